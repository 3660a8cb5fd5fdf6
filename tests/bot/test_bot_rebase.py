"""`/kernelsmith rebase` on a bot PR: the PR's winner diff re-applied to the current base (never the
old full file), re-measured and verified, the same PR updated in place, or a reply that says why not."""

from __future__ import annotations

import json
import subprocess

from botkit import OP_FILE, as_user, comment, event, push_upstream, replies, run_bot

from bot.pullrequest import marker, read_marker
from kernelsmith.search.edits import unified_diff

BRANCH = "kernelsmith/demo/rms_norm"
WINNER_LINE = "    num_warps = 8 if BLOCK_N >= 4096 else (4 if BLOCK_N >= 1024 else 1)\n"


def _show(gh, rev: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{OP_FILE}"], cwd=gh.repo.bare, capture_output=True,
                          text=True, check=True).stdout


def _open_pr(gh, tmp_path, monkeypatch) -> dict:
    event(tmp_path, monkeypatch, "schedule", {})
    assert run_bot(gh, tmp_path)[0] == 0
    (pr,) = gh.state.pulls("kernelsmith/demo")
    return pr


def test_rebase_replays_the_winner_on_the_new_base_and_updates_the_pr(gh, tmp_path, monkeypatch):
    pr = _open_pr(gh, tmp_path, monkeypatch)
    old_head = gh.repo.branch_sha(BRANCH)
    pr_diff = unified_diff(_show(gh, gh.base_sha), _show(gh, old_head), OP_FILE)
    # Upstream moves on: a new line at the top of the operator file (every later line shifts).
    new_base = push_upstream(gh, lambda t: "# Copyright upstream\n" + t)
    c = comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith rebase", number=pr["number"])
    code, engine = run_bot(gh, tmp_path)
    assert code == 0
    # One replay of exactly the PR's change, then verify; no search.
    run_dir = tmp_path / "runs" / "demo-rms_norm"
    assert engine.calls == [("replay", "rms_norm", pr_diff), ("verify", str(run_dir))]
    assert WINNER_LINE in pr_diff
    # The same PR, force-pushed onto the new base: upstream's line is kept, the winner's change added.
    (same,) = gh.state.pulls("kernelsmith/demo")
    head = gh.repo.branch_sha(BRANCH)
    assert same["number"] == pr["number"] and head != old_head
    assert gh.repo.git("rev-parse", f"{head}^") == new_base
    rebased = _show(gh, head)
    assert rebased.startswith("# Copyright upstream\n") and WINNER_LINE in rebased
    assert rebased == (run_dir / "winner" / "rms_norm.py").read_text()
    assert read_marker(same["body"])["base_sha"] == new_base
    (reply,) = replies(gh, c)
    assert f"rebased** onto `main` ({new_base[:12]})" in reply["body"]
    assert "re-measured at 1.37x geomean" in reply["body"]
    assert f"updated PR #{pr['number']}" in reply["body"]
    state = json.loads((tmp_path / "state.json").read_text())["operators"]["demo/rms_norm"]
    assert state["result"]["base_sha"] == new_base and state["pr"]["state"] == "open"


def test_rebase_says_when_the_winner_no_longer_applies(gh, tmp_path, monkeypatch):
    pr = _open_pr(gh, tmp_path, monkeypatch)
    head = gh.repo.branch_sha(BRANCH)
    before = json.loads((tmp_path / "state.json").read_text())["operators"]["demo/rms_norm"]
    # Upstream rewrites the very launch the winner tuned.
    new_base = push_upstream(gh, lambda t: t.replace("BLOCK_N=BLOCK_N, num_warps=1)",
                                                     "BLOCK_N=BLOCK_N, num_warps=2)"))
    c = comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith rebase", number=pr["number"])
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and [x[0] for x in engine.calls] == ["replay"]
    (reply,) = replies(gh, c)
    assert (f"the winner no longer applies to `main` ({new_base[:12]})**: run "
            "`/kernelsmith optimize rms_norm` for a new search") in reply["body"]
    assert "hunk 1 of 1" in reply["body"] and "num_warps=1" in reply["body"]
    # Nothing moved: the branch, the PR, and the operator's recorded run.
    assert gh.repo.branch_sha(BRANCH) == head and len(gh.state.pulls("kernelsmith/demo")) == 1
    after = json.loads((tmp_path / "state.json").read_text())["operators"]["demo/rms_norm"]
    assert after["optimized_at"] == before["optimized_at"] and after["source_hash"] == before["source_hash"]


def test_rebase_of_a_closed_pr_is_refused(gh, tmp_path, monkeypatch):
    pr = _open_pr(gh, tmp_path, monkeypatch)
    as_user(gh, "maintainer").get_pull(pr["number"]).edit(state="closed")
    c = comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith rebase", number=pr["number"])
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and engine.calls == []
    (reply,) = replies(gh, c)
    assert f"PR #{pr['number']} is closed" in reply["body"]
    assert "/kernelsmith optimize rms_norm" in reply["body"]


def test_rebase_finds_the_operator_from_the_branch_without_a_marker(gh, tmp_path, monkeypatch):
    pr = _open_pr(gh, tmp_path, monkeypatch)
    gh.repo.issues[pr["number"]]["body"] = "a maintainer rewrote the description"
    push_upstream(gh, lambda t: t + "\n# trailing note\n")
    c = comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith rebase", number=pr["number"])
    code, engine = run_bot(gh, tmp_path)
    # Without the marker's base_sha the diff is the branch head against its parent: the same change.
    assert code == 0 and [x[:2] for x in engine.calls][0] == ("replay", "rms_norm")
    assert WINNER_LINE in engine.calls[0][2]
    assert "rebased** onto `main`" in replies(gh, c)[0]["body"]


def test_rebase_on_a_pr_that_only_carries_a_marker_is_refused(gh, tmp_path, monkeypatch):
    """The marker is text anyone can paste: only a PR from the bot's branch can be rebased."""
    subprocess.run(["git", "branch", "feature", "main"], cwd=gh.repo.bare, check=True)
    body = marker("demo", "rms_norm", None, gh.base_sha)
    pr = as_user(gh, "maintainer").create_pull(base="main", head="feature", title="mine", body=body)
    c = comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith rebase", number=pr.number)
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and engine.calls == []
    assert "works on a kernelsmith pull request" in replies(gh, c)[0]["body"]
