"""The rewrite sentences (rewrites/explain.py, their one owner) and result.json's structured lineage
(`rewrite_lineage`): what report.md shows and what publishing renders from validated fields."""

from __future__ import annotations

import pytest

from kernelsmith.search.mutators.rewrite import explain_lineage, knob_literals, rewrite_lineage
from kernelsmith.search.mutators.rewrites.explain import TRANSFORMS, sentence


def test_each_transform_keeps_the_report_wording():
    assert sentence("widen", "_k", 0, {"ROWS_GROUP": 8}) == (
        "Tile widening: each program of `_k` now handles ROWS_GROUP = 8 rows of grid axis 0 at once as "
        "2-D [ROWS_GROUP, ...] tiles (per-row values become vectors, loads and stores get a row mask), so "
        "that axis launches 8x fewer programs with wider memory accesses (ROWS_GROUP is capped at the "
        "axis's size: a call with fewer rows runs them as before)."
    )
    assert sentence("coarsen", "_k", 1, {"COARSEN_GROUP": 2}) == (
        "Program coarsening: each program of `_k` now does the work of COARSEN_GROUP = 2 consecutive "
        "former programs along grid axis 1 (an unrolled `tl.static_range` loop that skips ids past the "
        "original grid), so that axis launches 2x fewer, busier programs (COARSEN_GROUP is capped at "
        "the axis's size: a call with fewer programs runs them as before)."
    )
    assert sentence("persistent", "_k", None, {"PERSISTENT_GROUP": 4}) == (
        "Persistent launch: `_k` now starts (number of SMs) x PERSISTENT_GROUP = 4 programs per SM "
        "instead of one program per work item, and each program loops over the former programs' work "
        "items with a grid stride."
    )
    texts = ["tl.load(w_ptr\n    + cols)", "b", "c", "d"]
    assert sentence("hoist", "_k", None, {}, detail=(4, texts)) == (
        "Hoisted loop invariants: in `_k` 4 expression(s) that do not change across a loop's iterations "
        "(`tl.load(w_ptr + cols)`; `b`; `c`; ...) are computed once before the loop."
    )
    assert sentence("merge_loads", "_k", None, {}, detail=(1, ["tl.load(x)"])) == (
        "Merged repeated loads: in `_k` 1 load(s) repeated later in the same block with nothing in "
        "between that could change them (`tl.load(x)`) are read once and reused."
    )


def test_without_detail_and_with_a_quoting_function():
    quote = lambda s: f"<{s}>"  # noqa: E731
    assert sentence("hoist", "_k", None, {}) == (
        "Hoisted loop invariants: in `_k` expressions that do not change across a loop's iterations are "
        "computed once before the loop."
    )
    assert "in <_k> loads repeated later" in sentence("merge_loads", "_k", None, {}, name=quote)
    widen = sentence("widen", "_k", 0, {"ROWS_GROUP": 4}, name=quote)
    assert "of <_k> now handles <ROWS_GROUP> = 4 rows" in widen and "[<ROWS_GROUP>, ...]" in widen
    assert set(TRANSFORMS) == {"widen", "coarsen", "persistent", "hoist", "merge_loads"}
    with pytest.raises(ValueError, match="unknown rewrite transform"):
        sentence("unroll", "_k", None, {})
    with pytest.raises(ValueError, match="exactly one knob"):
        sentence("widen", "_k", 0, {})


def _rows():
    rw = {"op": "rewrite", "transform": "widen", "kernel": "_k", "axis": 0, "knobs": {"ROWS_GROUP": 4},
          "explain": "Tile widening: ..."}
    hoist = {"op": "rewrite", "transform": "hoist", "kernel": "_k", "axis": None, "knobs": {},
             "explain": "Hoisted loop invariants: ..."}
    return [
        {"id": 1, "mutator": "base", "parent_id": None, "params": None},
        {"id": 2, "mutator": "params", "parent_id": 1, "params": {"op": "ask"}},
        {"id": 3, "mutator": "rewrite", "parent_id": 2, "params": hoist},
        {"id": 4, "mutator": "rewrite", "parent_id": 1, "params": rw},
        {"id": 5, "mutator": "params", "parent_id": 4, "params": {"op": "retune"}},
        {"id": 6, "mutator": "rewrite", "parent_id": 5, "params": {**hoist, "kernel": "_j"}},
    ]


def test_rewrite_lineage_is_structured_oldest_first_and_reads_retuned_knobs():
    rows = _rows()
    assert rewrite_lineage(rows, 2) == [] and rewrite_lineage(rows, None) == []
    assert rewrite_lineage(rows, 3) == [{"transform": "hoist", "kernel": "_k", "axis": None, "knobs": {}}]
    assert rewrite_lineage(rows, 6) == [
        {"transform": "widen", "kernel": "_k", "axis": 0, "knobs": {"ROWS_GROUP": 4}},
        {"transform": "hoist", "kernel": "_j", "axis": None, "knobs": {}},
    ]
    assert explain_lineage(rows, 6) == ["Tile widening: ...", "Hoisted loop invariants: ..."]
    # params retuned the knob after the rewrite: the winner's code holds the value the PR shows.
    code = "def f(x):\n    ROWS_GROUP = 16  # kernelsmith: rows\n    return x\n"
    assert rewrite_lineage(rows, 5, code)[0]["knobs"] == {"ROWS_GROUP": 16}
    # report.md says the same value: the sentence is rendered again at the retuned knob.
    rows[4]["code"] = code
    (said,) = explain_lineage(rows, 5)
    assert said == sentence("widen", "_k", 0, {"ROWS_GROUP": 16}) and "ROWS_GROUP = 16 rows" in said
    rows[4]["code"] = code.replace("16", "4")
    assert explain_lineage(rows, 5) == ["Tile widening: ..."]  # unchanged: the stored sentence


def test_knob_literals_only_where_every_assignment_agrees():
    code = "A = 4\nB = 2\nB = 8\nC = n\nD = 1.5\ndef f():\n    A = 4\n"
    assert knob_literals(code, ["A", "B", "C", "D", "E"]) == {"A": 4}
    assert knob_literals("def (:", ["A"]) == {}
