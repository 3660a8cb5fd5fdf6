"""The bot's phases: every reply text they use is in replies.md and fills in; commands read typed."""

from __future__ import annotations

import ast
import json
import string
from pathlib import Path

import pytest
from botkit import PUB, saved_run

import bot.phases.publish as phase
from bot.cli import main
from bot.commands import Command, Invalid, addresses_bot, read_command
from bot.dashboard import TITLE, read_block
from bot.phases.replies import templates, text

PHASES = Path(__file__).resolve().parents[2] / "bot" / "phases"


def _strings(node) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def test_every_reply_text_used_is_in_the_templates_and_every_template_is_used():
    asked, mentioned = set(), set()
    for path in PHASES.glob("*.py"):
        tree = ast.parse(path.read_text())
        mentioned |= _strings(tree)
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "text" and call.args:
                asked |= _strings(call.args[0])
    known = set(templates())
    assert asked and asked - known == set()
    assert known - mentioned == set()


def test_every_template_fills_in_from_its_own_fields():
    for name, body in templates().items():
        fields = {f for _, f, _, _ in string.Formatter().parse(body) if f}
        values = {f: 1.5 if f == "geomean" else f"<{f}>" for f in fields}
        filled = text(name, **values)
        assert "{" not in filled and all(v in filled for f, v in values.items() if f != "geomean")
    assert text("remeasured", geomean=1.234).startswith("the winner re-applied, re-measured at 1.23x")
    with pytest.raises(KeyError):
        text("queued", command="/kernelsmith help")             # a missing field is an error, not blank


@pytest.mark.parametrize("body,expected", [
    ("/kernelsmith optimize rms_norm --budget 3", Command("optimize", "rms_norm", 3)),
    ("/kernelsmith", Command("help")),
    ("/kernelsmith deploy", Invalid("Unknown command.")),
    ("/kernelsmith optimize rms_norm --budget 0", Invalid("`--budget` must be between 1 and 2000.")),
    ("no command here", None),
    (None, None),
])
def test_read_command_returns_one_typed_result(body, expected):
    assert read_command(body) == expected
    assert addresses_bot(body) == (expected is not None)


def test_the_cli_publishes_through_the_publish_phase(gh, tmp_path, monkeypatch):
    """`kernelsmith-bot publish` takes the publish job's path: run and PR recorded, dashboard mirrored."""
    calls, real = [], phase.publish_run
    monkeypatch.setattr(phase, "publish_run", lambda *a, **k: calls.append(a[1].op) or real(*a, **k))
    run = saved_run(gh, tmp_path / "run")
    assert main(["publish", *PUB, str(run), "--dry-run"]) == 0
    assert gh.state.requests == [] and not (tmp_path / "state.json").exists()   # no request, no state
    assert main(["publish", *PUB, str(run)]) == 0
    assert calls == ["rms_norm", "rms_norm"]
    pr = gh.state.pulls("kernelsmith/demo")[0]
    state = json.loads((tmp_path / "state.json").read_text())["operators"]["demo/rms_norm"]
    assert state["verify_status"] == "pass"
    assert state["result"]["geomean_speedup"] == pytest.approx(1.37, abs=0.005)
    assert state["pr"]["number"] == pr["number"] and state["run_dir"] == str(run)
    (dash,) = [i for i in gh.repo.issues.values() if i["title"] == TITLE]
    assert read_block(dash["body"])["operators"]["demo/rms_norm"]["pr"]["number"] == pr["number"]


def test_work_item_slugs_are_one_per_target_and_operator():
    from bot.work import WorkItem, from_json, to_json

    a, b = WorkItem("demo", "x-rms_norm"), WorkItem("demo-x", "rms_norm")
    assert a.slug != b.slug
    assert WorkItem("demo", "rms_norm").slug == "demo-rms_norm"   # the common case reads as before
    names = [("a", "b-c"), ("a-b", "c"), ("a-", "b"), ("a", "-b"), ("a--b", "c"), ("a-", "-b-c"),
             ("a.b", "c"), ("a", "b.c"), ("a-b-c", "d"), ("a", "b-c-d")]
    slugs = [WorkItem(t, o).slug for t, o in names if not o.startswith("-")]
    assert len(set(slugs)) == len(slugs)
    items = from_json(to_json([a, b]))
    assert [(i.target, i.op) for i in items] == [("demo", "x-rms_norm"), ("demo-x", "rms_norm")]
    assert [d["slug"] for d in json.loads(to_json([a, b]))] == [a.slug, b.slug]
    # A forged slug in the work list is never used: it is derived again.
    forged = json.dumps([{"target": "demo", "op": "rms_norm", "slug": "../elsewhere"}])
    assert from_json(forged)[0].slug == "demo-rms_norm"


def test_publishing_an_operator_the_loader_could_not_take_gives_its_own_error(tmp_path):
    from bot.pullrequest import PublishError, publish_spec

    (tmp_path / "t.yaml").write_text("repo: a/b\noperators:\n"
                                     " - {name: good, file: k.py, entry: k, harness: h.py}\n"
                                     " - {name: bad, file: k.py, entry: k}\n")
    assert publish_spec("t", "good", str(tmp_path)).file == "k.py"
    with pytest.raises(PublishError, match=r"operators\[1\]\.harness: missing required field"):
        publish_spec("t", "bad", str(tmp_path))
