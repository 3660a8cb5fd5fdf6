"""A structural rewrite that wins on some sizes and loses on others gets its knob tabled per size
(search/mutators/split.py): the rewrite where it won, its knob at 1 (the base's launch) where it lost."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import upstreamkit
from test_search_rewrite import _Recorder, _sites, task_for

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee
from kernelsmith.search.mutators.params import ParamsMutator
from kernelsmith.search.mutators.rewrite import explain_lineage
from kernelsmith.search.mutators.rewrites.analysis import find_sites
from kernelsmith.search.mutators.rewrites.coarsen import coarsen
from kernelsmith.search.mutators.rewrites.persistent import persistent
from kernelsmith.search.mutators.rewrites.widen import widen
from kernelsmith.search.mutators.split import split_proposal

ROOT = Path(__file__).resolve().parents[2]
KNOBS = {"widen": "ROWS_GROUP", "coarsen": "COARSEN_GROUP", "persistent": "PERSISTENT_GROUP"}


def _verdict(task, speedups: list[tuple[float, float, float] | None]) -> dict:
    """An accepted, timed verdict with (speedup, CI low, CI high) per harness shape (None: untimed)."""
    shapes = [{"shape": s, "speedup": t and t[0], "ci95": t and [t[1], t[2]]}
              for s, t in zip(task.harness.shapes_for("interpret"), speedups, strict=True)]
    return {"accepted": True, "correct": True, "violations": [], "error": None, "shapes": shapes,
            "fresh_shapes": [], "timed": True, "geomean_speedup": 1.0,
            "timing": {"metric": "device", "aa_ratio": 1.0, "noisy": False, "mode": "full"},
            "details": {"messages": []}}


def _parent(transform: str, speedups, cid: int = 7) -> tuple[object, dict]:
    """(the row_rms task, an archive row of its `transform` rewrite measured at `speedups`)."""
    task = task_for("row_rms")  # interpreter shapes: rows 5 (cols 48), rows 3 (cols 64)
    (site,) = _sites(task)[0].values()
    rw = {"widen": lambda: widen(site, 0, 4), "coarsen": lambda: coarsen(site, 0, 4),
          "persistent": lambda: persistent(site, 4)}[transform]()
    params = {"op": "rewrite", "transform": transform, "kernel": "_row_rms_kernel", "axis": 0,
              "knobs": {KNOBS[transform]: 4}, "explain": rw.explain}
    row = {"id": cid, "mutator": "rewrite", "params": params, "code": rw.code, "status": "evaluated",
           "verdict": _verdict(task, speedups), "parent_id": 1, "generation": 1}
    return task, row


def _launches(code: str, knob: str, sizes) -> list[tuple[tuple, int]]:
    namespace: dict = {}
    exec(compile(code, "rowwise.py", "exec"), namespace)
    recorder = namespace["_row_rms_kernel"] = _Recorder()
    for rows, cols in sizes:
        namespace["row_rms"](torch.ones(rows, cols))
    return [(grid, kwargs[knob]) for grid, kwargs in recorder.launches]


@pytest.mark.parametrize("transform", ["widen", "coarsen"])
def test_a_rewrite_that_lost_at_some_sizes_is_switched_off_there(transform):
    # 1.2x on 5 x 48, 0.8x on 3 x 64 (both beyond their CIs): the knob is 1 on the smaller size, 4
    # on the larger (keyed on rows for widening, on the element count for coarsening: what the
    # params search keys each launcher's tables on).
    task, parent = _parent(transform, [(1.2, 1.15, 1.25), (0.8, 0.75, 0.85)])
    p = split_proposal(task, "interpret", parent, set())
    assert p is not None and p.mutator == "params" and p.parent_id == parent["id"]
    assert p.params["op"] == "split" and p.params["on"] == parent["id"]
    knob = KNOBS[transform]
    sizes = [(1, 64), (3, 64), (5, 48), (9, 48)]
    assert _launches(p.code, knob, sizes) == [((1,), 1), ((3,), 1), ((2,), 4), ((3,), 4)]
    assert "per-shape table" in p.prompt
    # What report.md and the PR say of the rewrite behind it: the knob is chosen per size.
    said = explain_lineage([{"id": 1, "mutator": "base", "parent_id": None, "params": None}, parent,
                            {"id": 8, "mutator": "params", "parent_id": parent["id"], "params": p.params,
                             "code": p.code}], 8)
    assert len(said) == 1 and said[0].endswith(f"{knob} is chosen per input size by the `_KS_CONFIGS` "
                                                "table at the top of the diff.")
    assert explain_lineage([parent], parent["id"]) == [parent["params"]["explain"]]
    with Referee(task, device="interpret") as referee:  # the tabled rewrite is still correct
        verdict = referee.evaluate(p.code, candidate_id=2).to_json()
    assert verdict["accepted"], (verdict.get("reason"), verdict.get("error"))


@pytest.mark.parametrize(("transform", "speedups"), [
    ("widen", [(1.2, 1.15, 1.25), (1.1, 1.05, 1.15)]),   # nothing lost: the rewrite as it is
    ("widen", [(0.9, 0.85, 0.95), (0.8, 0.75, 0.85)]),   # nothing won: no table can win
    ("widen", [(1.2, 1.15, 1.25), (0.99, 0.97, 1.01)]),  # the loss is within its CI
    ("widen", [(1.2, 1.15, 1.25), None]),                # a shape not timed (a screen's subset)
    ("persistent", [(1.2, 1.15, 1.25), (0.8, 0.75, 0.85)]),  # its knob at 1 is no base launch
])
def test_no_split_where_the_measurement_does_not_call_for_one(transform, speedups):
    task, parent = _parent(transform, speedups)
    assert split_proposal(task, "interpret", parent, set()) is None


def test_the_params_search_proposes_the_split_once_then_retunes():
    task, parent = _parent("widen", [(1.2, 1.15, 1.25), (0.8, 0.75, 0.85)])
    mutator = ParamsMutator(task, device="interpret")
    mutator.sync([parent])
    first = mutator.propose(parent, [], random.Random(0), set())
    assert first is not None and first.params["op"] == "split"
    second = mutator.propose(parent, [], random.Random(1), set())
    assert second is not None and second.params["op"] == "retune" and second.params["on"] == parent["id"]


def test_liger_layer_norms_widening_is_split_as_measured_on_an_h100():
    # The numbers of `optimize liger layer_norm --mutator all` on an H100 (candidate #3, four rows a
    # program): 0.884x at 1 token, 0.971x at 4096 x 4096, faster on the rest; 0.994x overall.
    checkout = upstreamkit.require("liger")
    task = load_task(str(ROOT / "targets" / "liger.yaml"), "layer_norm", checkout=str(checkout))
    sites, _ = find_sites(task.base_code, task.operator.entry)
    (site,) = [s for s in sites if s.kernel.name == "_layer_norm_forward_kernel"]
    measured = [(0.884, 0.843, 0.907), (0.971, 0.95, 0.982), (1.02, 1.012, 1.029), (1.105, 1.066, 1.136),
                (1.002, 0.986, 1.015)]
    shapes = [{"shape": s, "speedup": m[0], "ci95": [m[1], m[2]]}
              for s, m in zip(task.harness.shapes_for("cuda"), measured, strict=True)]
    verdict = {**_verdict(task, [None, None]), "shapes": shapes}
    parent = {"id": 3, "mutator": "rewrite", "code": widen(site, 0, 4).code, "status": "evaluated",
              "params": {"op": "rewrite", "transform": "widen", "kernel": site.kernel.name, "axis": 0,
                         "knobs": {"ROWS_GROUP": 4}}, "verdict": verdict, "parent_id": 1}
    p = split_proposal(task, "cuda", parent, set())
    assert p is not None
    rows = [r["layer_norm_forward:ROWS_GROUP"] for r in p.params["table"]["rows"]]
    assert 1 in rows and 4 in rows  # off where it lost, four rows where it won
    with Referee(task, device="interpret") as referee:
        verdict = referee.evaluate(p.code, candidate_id=4).to_json()
    assert verdict["accepted"], (verdict.get("reason"), verdict.get("error"))
