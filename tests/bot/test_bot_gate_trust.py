"""Issue 13, findings 7 and 8 on the bot side: the dashboard is only the bot's own issue, the
permission is known before anything is written, installation tokens are narrowed per stage, and
names are matched to their very end (a trailing newline does not pass)."""

from __future__ import annotations

import json
import subprocess

import pytest
from botkit import SavedRunEngine, comment, event, replies, run_bot
from test_bot_github import _app

from bot.auth import GATE_PERMISSIONS, PUBLISH_PERMISSIONS
from bot.cli import main
from bot.commands import _OP_RE, CommandError, parse_command
from bot.dashboard import LABEL, TITLE
from kernelsmith.errors import ConfigError
from kernelsmith.onboard.config import load_target


def test_an_issue_by_someone_else_with_the_dashboard_title_is_ignored(gh, tmp_path, monkeypatch):
    forged = {"version": 1, "operators": {"demo/rms_norm": {"ignored": True, "source_hash": "x"},
                                          "demo/silu_and_mul": {"ignored": True}}}
    body = "<!-- kernelsmith-state\n" + json.dumps(forged) + "\n-->"
    gh.repo.labels[LABEL] = {"name": LABEL, "color": "ededed", "description": None}
    gh.repo.issues[50] = {"id": gh.state.next_id(), "number": 50, "title": TITLE, "body": body,
                          "state": "open", "user": "reader", "labels": [LABEL],
                          "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z"}
    event(tmp_path, monkeypatch, "schedule", {})
    code, engine = run_bot(gh, tmp_path)
    assert code == 0
    # The forged block stopped nothing, and the bot kept its own dashboard.
    assert sorted(c[1] for c in engine.calls if c[0] == "optimize") == ["rms_norm", "silu_and_mul"]
    assert gh.repo.issues[50]["body"] == body
    mine = [i for i in gh.repo.issues.values() if i["title"] == TITLE and i["user"] == "ks-bot"]
    assert len(mine) == 1 and "kernelsmith-state" in mine[0]["body"]


def test_the_permission_is_asked_before_anything_is_written(gh, tmp_path, monkeypatch):
    # For a permitted user (a read user gets nothing written at all: the test below).
    comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith help")
    gh.state.requests.clear()
    code, engine = run_bot(gh, tmp_path)
    assert code == 0 and engine.calls == []
    reqs = gh.state.requests
    asked = next(i for i, r in enumerate(reqs) if r[1].endswith("/collaborators/maintainer/permission"))
    first_write = next(i for i, r in enumerate(reqs) if r[0] not in ("GET", "HEAD"))
    assert asked < first_write


def _minted(gh) -> list[dict]:
    return [t.get("permissions") for t in gh.state.tokens.values() if t["kind"] == "installation"]


def test_installation_tokens_are_narrowed_per_stage(gh, tmp_path, monkeypatch):
    _app(gh, monkeypatch)
    c = comment(gh, tmp_path, monkeypatch, "maintainer", "/kernelsmith optimize rms_norm")
    assert main(["run", "--stage", "gate", "--runs", str(tmp_path / "runs")]) == 0
    assert _minted(gh) == [GATE_PERMISSIONS]
    assert "queued" in replies(gh, c)[0]["body"]
    # The gate's token cannot open a PR or push, whatever code ended up holding it.
    (gate_token,) = [k for k, t in gh.state.tokens.items() if t["kind"] == "installation"]
    from github import Auth, Github, GithubException

    repo = Github(auth=Auth.Token(gate_token), base_url=gh.api_url).get_repo("kernelsmith/demo")
    subprocess.run(["git", "branch", "feature", "main"], cwd=gh.repo.bare, check=True)
    with pytest.raises(GithubException) as e:
        repo.create_pull(base="main", head="feature", title="x", body="y")
    assert e.value.status == 403
    url = gh.server_url.replace("http://", f"http://x-access-token:{gate_token}@") + "/kernelsmith/demo.git"
    push = subprocess.run(["git", "push", url, "main:refs/heads/evil"], cwd=gh.repo.bare, capture_output=True)
    assert push.returncode != 0 and gh.repo.branch_sha("evil") is None

    # The publish stage mints its own token with what publishing needs.
    work = (tmp_path / "output.txt").read_text().split("\n")[1]
    monkeypatch.setenv("KERNELSMITH_WORK", work)
    SavedRunEngine(gh).optimize(None, "rms_norm", tmp_path / "runs" / "demo-rms_norm", None, None)
    assert main(["run", "--stage", "publish", "--runs", str(tmp_path / "runs")]) == 0
    assert _minted(gh)[1:] == [PUBLISH_PERMISSIONS]
    assert len(gh.state.pulls("kernelsmith/demo")) == 1 and "done" in replies(gh, c)[0]["body"]


def test_names_with_a_trailing_newline_do_not_pass(tmp_path):
    assert _OP_RE.match("rms_norm\n") is None and _OP_RE.match("rms_norm")
    with pytest.raises(CommandError):
        parse_command("/kernelsmith optimize rms_norm$x")
    yaml = tmp_path / "t.yaml"
    yaml.write_text('repo: "a/b\\n"\noperators: []\n')
    with pytest.raises(ConfigError, match="owner/name"):
        load_target(yaml)
    yaml.write_text('repo: a/b\noperators:\n  - {name: "op\\n", file: k.py, entry: f, harness: h.py}\n')
    # The file loads (its other operators would be served); that operator is never one of them.
    t = load_target(yaml)
    assert t.operators == [] and "not a valid name" in str(t.broken["operators[0]"])
    with pytest.raises(ConfigError):
        t.operator("op\n")


@pytest.mark.parametrize("body", ["/kernelsmith optimize rms_norm", "/kernelsmith rebase",
                                  "/kernelsmith ignore rms_norm", "/kernelsmith help"])
@pytest.mark.parametrize("stage", ["all", "gate"])
def test_a_read_user_gets_no_reaction_no_reply_and_no_work(gh, tmp_path, monkeypatch, body, stage):
    # `kernelsmith-bot run` on an issue_comment outside Actions (no workflow step checked the
    # permission first): the bot itself writes nothing for the user, not even a reaction.
    c = comment(gh, tmp_path, monkeypatch, "reader", body)
    gh.state.requests.clear()
    if stage == "all":
        code, engine = run_bot(gh, tmp_path)
        assert engine.calls == []
    else:
        code = main(["run", "--stage", "gate", "--runs", str(tmp_path / "runs")])
        out = (tmp_path / "output.txt").read_text().split("\n")
        assert out[0].startswith("work<<") and out[1] == "[]" and out[4] == "0"
    assert code == 0
    assert gh.state.writes() == []
    assert c["reactions"] == [] and replies(gh, c) == []
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
