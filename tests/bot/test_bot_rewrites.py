"""A rewrite winner's PR body says what changed (issue 12) without trusting the run directory (issue 13):
result.json's `winner.rewrites` is validated field by field (bot/artifact.py), every kernel it names
must be a function of the winner, and publish renders the sentence itself (bot/prbody.py), above the
diff, never pasting the run's `explain` text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from botkit import EXAMPLE_RUN, MINISERVE, OP_FILE, PUB, saved_run

from bot.artifact import UnsafeArtifact, check_rewrite_kernels, load_evidence
from bot.cli import main
from bot.prbody import render_body
from kernelsmith.search.mutators.rewrites.analysis import find_sites
from kernelsmith.search.mutators.rewrites.widen import widen

HOSTILE = "<img src=x onerror=alert(1)> @maintainer #1"
WIDEN = {"transform": "widen", "kernel": "_rms_norm_kernel", "axis": 0, "knobs": {"ROWS_GROUP": 4}}
# What publish renders for WIDEN: names through bot/prbody.py's code(), the wording of report.md.
SAID = ("**What changed:** Tile widening: each program of `_rms_norm_kernel` now handles `ROWS_GROUP` = 4 "
        "rows of grid axis 0 at once as 2-D [`ROWS_GROUP`, ...] tiles (per-row values become vectors, loads "
        "and stores get a row mask), so that axis launches 4x fewer programs with wider memory accesses "
        "(`ROWS_GROUP` is capped at the axis's size: a call with fewer rows runs them as before).")


def _run(tmp_path: Path, rewrites) -> Path:
    """The example run directory with `winner.rewrites` set (left out when None)."""
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE_RUN, run)
    result = json.loads((run / "result.json").read_text())
    if rewrites is not None:
        result["winner"]["rewrites"] = rewrites
    (run / "result.json").write_text(json.dumps(result))
    return run


def _rewritten_winner() -> tuple[str, dict]:
    """The demo's rms_norm widened by the rewrite mutator's own transformation, and its lineage entry."""
    base = (MINISERVE / OP_FILE).read_text()
    (site,), _ = find_sites(base, "rms_norm")
    rw = widen(site, 0, 4)
    return rw.code, {"transform": rw.transform, "kernel": rw.kernel, "axis": rw.axis, "knobs": rw.knobs}


def test_valid_rewrites_are_read_and_an_old_run_has_none(tmp_path):
    hoist = {"transform": "hoist", "kernel": "_rms_norm_kernel", "axis": None, "knobs": {},
             "explain": HOSTILE}  # a field publish never reads: ignored, never shown
    ev = load_evidence(_run(tmp_path, [WIDEN, hoist]))
    assert ev.rewrites == [WIDEN, {k: hoist[k] for k in ("transform", "kernel", "axis", "knobs")}]
    check_rewrite_kernels(ev, (EXAMPLE_RUN / "winner" / "rms_norm.py").read_text())
    assert load_evidence(EXAMPLE_RUN).rewrites == []
    persistent = {"transform": "persistent", "kernel": "k", "axis": None, "knobs": {"PERSISTENT_GROUP": 1}}
    assert load_evidence(_run(tmp_path / "p", [persistent])).rewrites == [persistent]


BAD = [
    ("not a list", HOSTILE, "winner.rewrites must be a list of at most 8"),
    ("too many", [WIDEN] * 9, "winner.rewrites must be a list of at most 8"),
    ("entry not a mapping", [HOSTILE], "winner.rewrites[0] must be a mapping"),
    ("unknown transform", [{**WIDEN, "transform": HOSTILE}], "winner.rewrites[0].transform must be one of"),
    ("kernel markup", [{**WIDEN, "kernel": HOSTILE}], "winner.rewrites[0].kernel is not an accepted name"),
    ("kernel too long", [{**WIDEN, "kernel": "k" * 65}], "winner.rewrites[0].kernel is not an accepted name"),
    ("kernel newline", [{**WIDEN, "kernel": "_k\n"}], "winner.rewrites[0].kernel is not an accepted name"),
    ("kernel missing", [{k: v for k, v in WIDEN.items() if k != "kernel"}], "kernel is not an accepted"),
    ("axis text", [{**WIDEN, "axis": HOSTILE}], "winner.rewrites[0].axis must be an integer"),
    ("axis bool", [{**WIDEN, "axis": True}], "winner.rewrites[0].axis must be an integer"),
    ("axis 3", [{**WIDEN, "axis": 3}], "winner.rewrites[0].axis must lie in [0, 2]"),
    ("axis missing", [{**WIDEN, "axis": None}], "winner.rewrites[0].axis must be an axis for widen"),
    ("axis on persistent", [{"transform": "persistent", "kernel": "_k", "axis": 0, "knobs": {"P": 2}}],
     "winner.rewrites[0].axis must be null for persistent"),
    ("knobs a list", [{**WIDEN, "knobs": [HOSTILE]}], "winner.rewrites[0].knobs must be a mapping of 1"),
    ("five knobs", [{**WIDEN, "knobs": {f"K{i}": 2 for i in range(5)}}], "knobs must be a mapping of 1"),
    ("knob on hoist", [{"transform": "hoist", "kernel": "_k", "axis": None, "knobs": {"K": 2}}],
     "winner.rewrites[0].knobs must be a mapping of 0 knob(s) for hoist"),
    ("knob name markup", [{**WIDEN, "knobs": {HOSTILE: 4}}], "rewrites[0].knobs key is not an accepted"),
    ("knob value text", [{**WIDEN, "knobs": {"ROWS_GROUP": HOSTILE}}], "knobs.ROWS_GROUP must be an integer"),
    ("knob value float", [{**WIDEN, "knobs": {"ROWS_GROUP": 4.0}}], "knobs.ROWS_GROUP must be an integer"),
    ("knob zero", [{**WIDEN, "knobs": {"ROWS_GROUP": 0}}], "knobs.ROWS_GROUP must lie in [1, 65536]"),
    ("knob huge", [{**WIDEN, "knobs": {"ROWS_GROUP": 65537}}], "knobs.ROWS_GROUP must lie in [1, 65536]"),
]


@pytest.mark.parametrize("case,rewrites,expect", BAD, ids=[b[0] for b in BAD])
def test_each_bad_field_is_refused_without_echoing_it(tmp_path, case, rewrites, expect):
    with pytest.raises(UnsafeArtifact) as e:
        load_evidence(_run(tmp_path, rewrites))
    msg = str(e.value)
    assert msg.startswith("result.json: ") and expect in msg, msg
    for bad in ("<img", "@maintainer", "#1", "onerror"):
        assert bad not in msg


def test_a_kernel_the_winner_does_not_define_is_refused(tmp_path):
    code = (EXAMPLE_RUN / "winner" / "rms_norm.py").read_text()
    # Named in a comment, a string and a call: none of them is a `def`.
    ghost = {**WIDEN, "kernel": "_ghost_kernel"}
    ev = load_evidence(_run(tmp_path, [WIDEN, ghost]))
    forged = code + "\n# def _ghost_kernel(x):\nNOTE = 'def _ghost_kernel('\n_ghost_kernel = None\n"
    with pytest.raises(UnsafeArtifact, match=r"winner.rewrites\[1\].kernel is not a function defined in"):
        check_rewrite_kernels(ev, forged)
    check_rewrite_kernels(ev, forged + "def _ghost_kernel(x):\n    return x\n")


def test_the_body_says_what_changed_above_the_diff_from_the_fields_only(tmp_path):
    ev = load_evidence(_run(tmp_path, [{**WIDEN, "explain": HOSTILE}]))
    body = render_body(repo="kernelsmith/demo", base="main", file=OP_FILE, target="demo", op="rms_norm",
                       ev=ev, diff="--- a\n+++ b\n")
    assert body.count("**What changed:**") == 1 and SAID in body
    assert body.index(SAID) < body.index("<details>")
    assert "<img" not in body and "@maintainer" not in body
    plain = render_body(repo="kernelsmith/demo", base="main", file=OP_FILE, target="demo", op="rms_norm",
                        ev=load_evidence(EXAMPLE_RUN), diff="--- a\n+++ b\n")
    assert "What changed" not in plain


def test_publish_opens_a_pr_whose_body_explains_a_real_rewrite(gh, tmp_path):
    """End to end on the local GitHub: the winner is the rewrite mutator's widening of the demo's
    rms_norm; the run's own explanation texts are forged, the PR shows only the bot's sentence."""
    code, entry = _rewritten_winner()
    assert entry == WIDEN
    run = saved_run(gh, tmp_path / "run")
    (run / "winner" / "rms_norm.py").write_text(code)
    result = json.loads((run / "result.json").read_text())
    result["winner"]["rewrites"] = [{**entry, "explain": HOSTILE}]
    result["winner"]["explain"] = HOSTILE
    (run / "result.json").write_text(json.dumps(result))
    (run / "report.md").write_text(f"**What changed:** {HOSTILE}\n")
    assert main(["publish", *PUB, str(run)]) == 0
    (pr,) = gh.state.pulls("kernelsmith/demo")
    body = pr["body"]
    assert SAID in body and body.index(SAID) < body.index("<details>")
    assert body.count("**What changed:**") == 1
    for bad in ("<img", "@maintainer", "onerror"):
        assert bad not in body
    assert "+    rows = tl.program_id(0) * ROWS_GROUP + tl.arange(0, ROWS_GROUP)" in body  # the real diff


def test_publish_refuses_a_rewrite_of_a_kernel_the_winner_lacks(gh, tmp_path, capsys):
    run = saved_run(gh, tmp_path / "run")
    result = json.loads((run / "result.json").read_text())
    result["winner"]["rewrites"] = [{**WIDEN, "kernel": "_not_in_the_winner"}]
    (run / "result.json").write_text(json.dumps(result))
    assert main(["publish", *PUB, str(run)]) == 1
    err = capsys.readouterr().err
    assert "winner.rewrites[0].kernel is not a function defined in the winner's file" in err
    assert "_not_in_the_winner" not in err
    assert gh.state.writes() == []
