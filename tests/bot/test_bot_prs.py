"""What the bot does after a maintainer closes or merges its PR (against the local GitHub server).

A PR closed without merging is a "no" to that change: no new PR (and no reopening) for the same
operator at the same source hash, even on a fresh runner that lost the state; once the operator's
source changes, the bot may propose again. A merged PR is recorded as merged. The dashboard shows
both."""

from __future__ import annotations

import json

from botkit import SavedRunEngine, as_user, event, push_upstream, run_bot

from bot.dashboard import TITLE, read_block

BRANCH = "kernelsmith/demo/rms_norm"


def _dashboard(gh) -> dict:
    (dash,) = [i for i in gh.repo.issues.values() if i["title"] == TITLE]
    return dash


def _state(tmp_path) -> dict:
    return json.loads((tmp_path / "state.json").read_text())["operators"]["demo/rms_norm"]


def _row(body: str, op: str) -> str:
    return next(line for line in body.splitlines() if f"| `{op}` |" in line)


def test_a_pr_closed_unmerged_is_not_proposed_again_until_the_source_changes(gh, tmp_path, monkeypatch):
    event(tmp_path, monkeypatch, "schedule", {})
    assert run_bot(gh, tmp_path)[0] == 0
    (pr,) = gh.state.pulls("kernelsmith/demo")
    head = gh.repo.branch_sha(BRANCH)
    as_user(gh, "maintainer").get_pull(pr["number"]).edit(state="closed")

    # A fresh runner whose dashboard lost its state block: the operator looks never optimized, so it
    # is searched again, but publishing asks GitHub and finds the closed PR at this same source.
    (tmp_path / "state.json").unlink()
    _dashboard(gh)["body"] = "edited by hand"
    gh.state.requests.clear()
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and ("optimize", "rms_norm", None, 30.0) in engine.calls
    (same,) = gh.state.pulls("kernelsmith/demo")
    assert same["state"] == "closed" and gh.repo.branch_sha(BRANCH) == head      # not reopened, not pushed
    assert not [r for r in gh.state.writes() if "/pulls" in r[1] or r[1].endswith("/statuses")]
    assert "was closed without merging at this source" in gh.summary.read_text()
    recorded = _state(tmp_path)["pr"]
    assert recorded["number"] == pr["number"] and recorded["state"] == "closed"
    assert recorded["source_hash"] == engine.hash
    body = _dashboard(gh)["body"]
    assert read_block(body)["operators"]["demo/rms_norm"]["pr"]["state"] == "closed"
    row = _row(body, "rms_norm")
    assert f"[#{pr['number']}](" in row and "closed unmerged" in row and "declined" in row

    # Even when the state thinks the operator is stale, a declined operator is not searched again.
    state = json.loads((tmp_path / "state.json").read_text())
    state["operators"]["demo/rms_norm"]["source_hash"] = "0" * 64
    (tmp_path / "state.json").write_text(json.dumps(state))
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and [c[1] for c in engine.calls if c[0] == "optimize"] == ["silu_and_mul"]

    # Upstream changes the operator: the bot may propose again, in a new PR; the closed one stays closed.
    gh.base_sha = push_upstream(gh, lambda t: "# upstream change\n" + t)
    code, engine = run_bot(gh, tmp_path, SavedRunEngine(gh))
    assert code == 0 and ("optimize", "rms_norm", None, 30.0) in engine.calls
    old, new = sorted(gh.state.pulls("kernelsmith/demo"), key=lambda p: p["number"])
    assert old["number"] == pr["number"] and old["state"] == "closed"
    assert new["state"] == "open" and gh.repo.git("rev-parse", f"{BRANCH}^") == gh.base_sha
    recorded = _state(tmp_path)["pr"]
    assert recorded["number"] == new["number"] and recorded["state"] == "open"
    assert recorded["source_hash"] == engine.hash != "0" * 64
    row = _row(_dashboard(gh)["body"], "rms_norm")
    assert f"[#{new['number']}](" in row and "| watched |" in row


def test_a_merged_pr_is_recorded_as_merged(gh, tmp_path, monkeypatch):
    event(tmp_path, monkeypatch, "schedule", {})
    assert run_bot(gh, tmp_path)[0] == 0
    (pr,) = gh.state.pulls("kernelsmith/demo")
    winner = (tmp_path / "runs" / "demo-rms_norm" / "winner" / "rms_norm.py").read_text()
    assert as_user(gh, "maintainer").get_pull(pr["number"]).merge().merged
    assert gh.repo.git("show", "main:miniserve/kernels/rms_norm.py") + "\n" == winner

    # The next run, on a fresh runner, asks GitHub about the PR the dashboard still calls open.
    (tmp_path / "state.json").unlink()
    event(tmp_path, monkeypatch, "workflow_dispatch", {"inputs": {"target": "demo", "op": "silu_and_mul"}})
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and [c[1] for c in engine.calls if c[0] == "optimize"] == ["silu_and_mul"]
    recorded = _state(tmp_path)["pr"]
    assert recorded["state"] == "merged" and recorded["number"] == pr["number"] and recorded["merged_at"]
    body = _dashboard(gh)["body"]
    assert read_block(body)["operators"]["demo/rms_norm"]["pr"]["state"] == "merged"
    row = _row(body, "rms_norm")
    assert f"[#{pr['number']}](" in row and " merged |" in row and "| watched |" in row
