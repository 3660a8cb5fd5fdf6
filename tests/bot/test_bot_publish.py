"""Publishing against the local GitHub: schedule runs open one PR and then update it in place."""

from __future__ import annotations

import json
import subprocess

from botkit import OP_FILE, PUB, SavedRunEngine, event, saved_run

from bot.actions import ActionsEnv
from bot.auth import GitHubAuth
from bot.cli import main
from bot.dashboard import TITLE, read_block
from bot.run import Bot
from kernelsmith.onboard.checkout import BOT_AUTHOR


def _bot(gh, engine, tmp_path, **kw) -> Bot:
    return Bot(ActionsEnv.from_env(), GitHubAuth.from_env(), engine, runs_dir=tmp_path / "runs", **kw)


def _branch_log(gh, ref="kernelsmith/demo/rms_norm"):
    out = subprocess.run(["git", "log", "--format=%H %P %ae", f"main..{ref}"], cwd=gh.repo.bare,
                         capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines()]


def test_schedule_run_opens_a_pr_and_the_second_updates_it(gh, tmp_path, monkeypatch):
    event(tmp_path, monkeypatch, "schedule", {"schedule": "0 3 * * 1"})
    engine = SavedRunEngine(gh)
    assert _bot(gh, engine, tmp_path).run_all() == 0

    pulls = gh.state.pulls("kernelsmith/demo")
    assert len(pulls) == 1
    pr = pulls[0]
    assert pr["pr"]["head"] == "kernelsmith/demo/rms_norm" and pr["pr"]["base"] == "main"
    assert pr["title"].startswith("kernelsmith: rms_norm 1.37x faster on NVIDIA H200")
    # Rendered by publish from the validated numbers (report.md is not pasted), the marker last.
    assert "| shape | base ms | winner ms | speedup |" in pr["body"]
    assert pr["body"].rstrip().splitlines()[-1].startswith("<!-- kernelsmith:pr ")
    assert sorted(pr["labels"]) == ["kernelsmith", "performance"]
    # One commit on top of the run's base, authored by the bot, holding exactly the winner.
    (sha, parent, email), = _branch_log(gh)
    assert parent == gh.base_sha and email == BOT_AUTHOR[1]
    winner = (tmp_path / "runs" / "demo-rms_norm" / "winner" / "rms_norm.py").read_text()
    shown = subprocess.run(["git", "show", f"{sha}:{OP_FILE}"], cwd=gh.repo.bare, capture_output=True,
                           text=True, check=True).stdout
    assert shown == winner
    # A plain token gets a commit status (check runs are for Apps).
    assert [s["context"] for s in gh.repo.statuses] == ["kernelsmith/rms_norm"]
    assert gh.repo.statuses[0]["sha"] == sha and gh.repo.statuses[0]["state"] == "success"
    # The dashboard mirrors the state: the PR, and silu_and_mul's missing winner.
    dash = [i for i in gh.repo.issues.values() if i["title"] == TITLE]
    assert len(dash) == 1
    mirrored = read_block(dash[0]["body"])["operators"]
    assert mirrored["demo/rms_norm"]["pr"]["number"] == pr["number"]
    assert mirrored["demo/rms_norm"]["source_hash"] == engine.hash
    assert "`_fused_add_rms_norm_kernel` (line 40)" in dash[0]["body"]     # needs a harness
    assert ("optimize", "silu_and_mul", None, 30.0) in engine.calls

    # Second scheduled run, on a fresh runner (no local state): the operator changed upstream, so it
    # runs again; the new result updates the same PR in place.
    (tmp_path / "state.json").unlink()
    gh.state.requests.clear()
    engine2 = SavedRunEngine(gh)
    engine2.hash = "f" * 64
    assert _bot(gh, engine2, tmp_path).run_all() == 0
    assert len(gh.state.pulls("kernelsmith/demo")) == 1           # 0 duplicates
    assert len([i for i in gh.repo.issues.values() if i["title"] == TITLE]) == 1
    assert ("optimize", "rms_norm", None, 30.0) in engine2.calls
    assert not [r for r in gh.state.requests if r[0] == "POST" and r[1].endswith("/pulls")]
    assert len(_branch_log(gh)) == 1                              # still one bot commit
    # The first run's directory was kept aside, not overwritten or refused.
    assert len(list((tmp_path / "runs").glob("demo-rms_norm.*[0-9]"))) == 1


def test_unchanged_operator_is_not_optimized_again(gh, tmp_path, monkeypatch):
    event(tmp_path, monkeypatch, "schedule", {})
    assert _bot(gh, SavedRunEngine(gh), tmp_path).run_all() == 0
    (tmp_path / "state.json").unlink()                            # the dashboard still knows
    engine = SavedRunEngine(gh)
    assert _bot(gh, engine, tmp_path).run_all() == 0
    assert [c for c in engine.calls if c[0] == "optimize"] == [("optimize", "silu_and_mul", None, 30.0)]


def test_publish_cli_updates_in_place_and_never_duplicates(gh, tmp_path, capsys):
    run = saved_run(gh, tmp_path / "run")
    assert main(["publish", *PUB, str(run)]) == 0
    assert "opened PR #" in capsys.readouterr().out
    head1 = gh.repo.branch_sha("kernelsmith/demo/rms_norm")
    assert main(["publish", *PUB, str(run)]) == 0                       # same winner: nothing to push
    assert "unchanged PR #" in capsys.readouterr().out
    assert gh.repo.branch_sha("kernelsmith/demo/rms_norm") == head1
    faster = saved_run(gh, tmp_path / "run2", geomean_scale=1.1)
    code = faster / "winner" / "rms_norm.py"
    code.write_text(code.read_text().replace("num_warps = 8 if", "num_warps = 16 if"))
    assert main(["publish", *PUB, str(faster)]) == 0
    assert "updated PR #" in capsys.readouterr().out
    pulls = gh.state.pulls("kernelsmith/demo")
    assert len(pulls) == 1 and "1.51x" in pulls[0]["title"]
    assert len(_branch_log(gh)) == 1 and gh.repo.branch_sha("kernelsmith/demo/rms_norm") != head1


def test_foreign_commit_blocks_force_push_and_comments(gh, tmp_path, capsys):
    run = saved_run(gh, tmp_path / "run")
    assert main(["publish", *PUB, str(run)]) == 0
    # A maintainer pushes a fix-up commit onto the bot's branch.
    work = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "kernelsmith/demo/rms_norm", str(gh.repo.bare), str(work)],
                   check=True)
    (work / "NOTE.md").write_text("reviewed\n")
    ident = ["-c", "user.name=M", "-c", "user.email=m@example.com"]
    subprocess.run(["git", *ident, "add", "NOTE.md"], cwd=work, check=True)
    subprocess.run(["git", *ident, "commit", "-qm", "note"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD"], cwd=work, check=True)
    head = gh.repo.branch_sha("kernelsmith/demo/rms_norm")
    faster = saved_run(gh, tmp_path / "run2", geomean_scale=1.1)
    code = faster / "winner" / "rms_norm.py"
    code.write_text(code.read_text().replace("num_warps = 8 if", "num_warps = 16 if"))
    assert main(["publish", *PUB, str(faster)]) == 0
    assert gh.repo.branch_sha("kernelsmith/demo/rms_norm") == head   # not overwritten
    pr = gh.state.pulls("kernelsmith/demo")[0]
    comments = [c["body"] for c in gh.state.comments.values() if c["issue"] == pr["number"]]
    assert any("does not force-push" in c for c in comments)


def test_cap_on_open_bot_prs(gh, tmp_path, capsys):
    yaml = gh.targets / "demo.yaml"
    yaml.write_text(yaml.read_text() + "max_open_prs: 1\n")
    other = gh.repo
    subprocess.run(["git", "branch", "kernelsmith/demo/other", "main"], cwd=other.bare, check=True)
    auth = GitHubAuth.from_env()
    auth.repo("kernelsmith/demo").create_pull(base="main", head="kernelsmith/demo/other", title="x", body="y")
    assert main(["publish", *PUB, str(saved_run(gh, tmp_path / "run"))]) == 0
    assert "max_open_prs 1" in capsys.readouterr().out
    assert len(gh.state.pulls("kernelsmith/demo")) == 1
    assert gh.repo.branch_sha("kernelsmith/demo/rms_norm") is None


def test_unverified_or_slow_runs_are_not_published(gh, tmp_path, capsys):
    assert main(["publish", *PUB, str(saved_run(gh, tmp_path / "r1", status="regression"))]) == 1
    assert "verify status is 'regression'" in capsys.readouterr().err
    assert main(["publish", *PUB, str(saved_run(gh, tmp_path / "r2", geomean_scale=0.75))]) == 1
    assert "below min_speedup 1.05x" in capsys.readouterr().err
    assert gh.state.writes() == [] and gh.state.pulls("kernelsmith/demo") == []


def test_dry_run_touches_nothing_remote(gh, tmp_path, capsys):
    run = saved_run(gh, tmp_path / "run")
    assert main(["publish", *PUB, str(run), "--dry-run"]) == 0
    assert gh.state.requests == []                                # not even a read
    preview = (run / "pr-preview.md").read_text()
    assert preview.startswith("# Dry run: kernelsmith: rms_norm 1.37x faster")
    assert "kernelsmith/demo/rms_norm" in preview
    assert "```diff\n--- a/miniserve/kernels/rms_norm.py" in preview
    assert preview.strip() in gh.summary.read_text()


def test_dispatch_dry_run_writes_nothing_remote(gh, tmp_path, monkeypatch):
    event(tmp_path, monkeypatch, "workflow_dispatch",
          {"inputs": {"target": "demo", "op": "rms_norm", "budget": "3", "dry_run": "true"}})
    assert _bot(gh, SavedRunEngine(gh), tmp_path, dry_run=True).run_all() == 0
    assert gh.state.writes() == []                                # reads only (the dashboard state)
    assert (tmp_path / "runs" / "demo-rms_norm" / "pr-preview.md").is_file()


def test_dispatch_inputs_are_honoured(gh, tmp_path, monkeypatch):
    event(tmp_path, monkeypatch, "workflow_dispatch",
          {"inputs": {"target": "demo", "op": "rms_norm", "budget": "3", "dry_run": "false"}})
    engine = SavedRunEngine(gh)
    bot = _bot(gh, engine, tmp_path)
    assert bot.run_all() == 0
    assert [c for c in engine.calls if c[0] == "optimize"] == [("optimize", "rms_norm", 3, 30.0)]
    assert len(gh.state.pulls("kernelsmith/demo")) == 1
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["operators"]["demo/rms_norm"]["verify_status"] == "pass"
