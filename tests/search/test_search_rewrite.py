"""The rewrite mutator's transformations on kernels written for these tests (tests/search/data/
rewrite/): a 1-D elementwise kernel, a row-wise reduction, a tokens x heads grid and a stand-in with
the structure of SGLang's merge_state, each rewrite judged by the real referee under the Triton
interpreter (listed and fresh shapes); declines on atomics and on a data-dependent index; the new
knobs found by the tunable discovery."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from kernelsmith.launch.tunables import discover, relevant, render
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee
from kernelsmith.search.mutators.rewrite import RewriteMutator, variants
from kernelsmith.search.mutators.rewrites import MARK
from kernelsmith.search.mutators.rewrites.analysis import Decline, find_sites
from kernelsmith.search.mutators.rewrites.coarsen import coarsen
from kernelsmith.search.mutators.rewrites.loads import merge_loads
from kernelsmith.search.mutators.rewrites.persistent import persistent
from kernelsmith.search.mutators.rewrites.widen import widen

DATA = Path(__file__).parent / "data" / "rewrite"
YAML, SRC = DATA / "rewrite.yaml", DATA / "src"


def task_for(op: str):
    return load_task(str(YAML), op, checkout=str(SRC))


def _sites(task):
    sites, declined = find_sites(task.base_code, task.operator.entry)
    return {s.kernel.name: s for s in sites}, declined


# (op, rewrites: (transform, axis, knob)); knobs that do not divide the grid exercise the guards.
CASES = [
    ("scale_add", [("coarsen", 0, 4), ("widen", 0, 4), ("persistent", None, 1)]),
    ("row_rms", [("coarsen", 0, 4), ("widen", 0, 4), ("persistent", None, 2)]),
    ("head_scale", [("coarsen", 0, 4), ("coarsen", 1, 8), ("widen", 0, 8), ("widen", 1, 2),
                    ("persistent", None, 1)]),
    ("merge_state", [("coarsen", 1, 4), ("coarsen", 0, 2), ("widen", 1, 4), ("widen", 0, 2),
                     ("persistent", None, 1)]),
    # pointer advanced in place, a column loop with tile and scalar accumulators (widened at init)
    ("row_stats", [("widen", 0, 4), ("coarsen", 0, 2), ("persistent", None, 2)]),
    ("scale_twice", [("merge_loads", None, None), ("widen", 0, 2)]),
]
BUILD = {
    "coarsen": lambda site, axis, knob: coarsen(site, axis, knob),
    "widen": lambda site, axis, knob: widen(site, axis, knob),
    "persistent": lambda site, axis, knob: persistent(site, knob),
    "merge_loads": lambda site, axis, knob: merge_loads(site),
}


@pytest.mark.parametrize(("op", "rewrites"), CASES, ids=[c[0] for c in CASES])
def test_rewrites_are_correct_under_the_referee(op, rewrites):
    task = task_for(op)
    sites, declined = _sites(task)
    assert declined == [] and len(sites) == 1
    (site,) = sites.values()
    codes = []
    for transform, axis, knob in rewrites:
        rw = BUILD[transform](site, axis, knob)
        assert MARK in rw.code and rw.explain and rw.transform == transform
        # A short diff: coarsening and persistent launch leave the old body alone (only its def
        # line, its program-id reads and the launch change); widening edits the lines that broadcast.
        removed = [ln for ln in _diff(task.base_code, rw.code) if ln.startswith("-")]
        assert len(removed) <= (30 if transform == "widen" else 8), removed
        codes.append(rw.code)
    with Referee(task, device="interpret") as referee:
        for code in codes:
            verdict = referee.evaluate(code, candidate_id=1).to_json()
            assert verdict["accepted"], (verdict.get("reason"), verdict.get("error"))
            assert verdict["fresh_shapes"], "fresh shapes were checked too"


def _diff(a: str, b: str) -> list[str]:
    import difflib

    return [
        ln
        for ln in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if ln[:1] in "+-" and not ln.startswith(("---", "+++"))
    ]


def test_merge_loads_keeps_a_load_after_a_store():
    task = task_for("scale_twice")
    (site,) = _sites(task)[0].values()
    code = merge_loads(site).code
    assert "    y = x * w\n" in code and "tl.load(w_ptr + cols, mask=mask)" in code
    # the input row is loaded again after the store to `out`, which may alias it: kept
    assert code.count("tl.load(x_ptr + row * n + cols, mask=mask)") == 2
    keys = [v.key for v in variants([site])]
    assert "merge_loads:_scale_twice_kernel" in keys
    other = variants(list(_sites(task_for("row_rms"))[0].values()))
    assert not any(v.transform == "merge_loads" for v in other)


def test_a_wrong_rewrite_is_caught_by_the_referee():
    """The guard matters: one that drops the last former program leaves its rows unwritten.

    (A guard that lets former programs past the end would write out of bounds: under the CPU
    interpreter that corrupts the worker's own memory, and once hung it instead of crashing.)"""
    task = task_for("head_scale")
    (site,) = _sites(task)[0].values()
    code = coarsen(site, 1, 4).code.replace("if pid < num_programs_1:", "if pid < num_programs_1 - 1:")
    with Referee(task, device="interpret") as referee:
        verdict = referee.evaluate(code, candidate_id=1).to_json()
    assert not verdict["accepted"] and "unwritten_output" in verdict["violations"], verdict


@pytest.mark.parametrize(
    ("op", "why"),
    [("histogram", "tl.atomic_add"), ("gather_rows", "data-dependent index")],
)
def test_declines_with_a_reason_in_the_log(op, why):
    task = task_for(op)
    sites, declined = _sites(task)
    assert sites == {} and len(declined) == 1 and why in declined[0]
    log: list[str] = []
    mutator = RewriteMutator(task, note=log.append)
    mutator.sync([{"id": 1, "mutator": "base", "params": None}])
    assert mutator.propose({"id": 1, "mutator": "base", "code": task.base_code}, [], None) is None
    assert any(why in line for line in log), log


def test_declines_what_it_cannot_model():
    code = (SRC / "kernels" / "elementwise.py").read_text()
    computed = code.replace("_scale_add_kernel[(triton.cdiv(n, BLOCK),)]", "_scale_add_kernel[grid_of(n)]")
    assert "not a tuple" in find_sites(computed, "scale_add")[1][0]
    again = "    _scale_add_kernel[(1,)](x, y, out, n, alpha, BLOCK=BLOCK)\n"
    twice = code.replace("    return out\n", again + "    return out\n")
    assert "launched from 2 places" in find_sites(twice, "scale_add")[1][0]
    helper = code.replace("    pid = tl.program_id(0)\n", "    pid = _pid()\n") + (
        "\n\n@triton.jit\ndef _pid():\n    return tl.program_id(0)\n"
    )
    assert "helper _pid reads tl.program_id" in find_sites(helper, "scale_add")[1][0]
    (site,) = find_sites(code, "scale_add")[0]
    with pytest.raises(Decline, match="axis 1"):
        coarsen(site, 1, 4)
    # Widening follows no per-row branch, no loop accumulator changing shape, no 2-D tile.
    rowwise = (SRC / "kernels" / "rowwise.py").read_text()
    store = "    tl.store(rms_ptr + row, rms)\n"
    branch = rowwise.replace(store, "    if row < 3:\n    " + store)
    (site,) = find_sites(branch, "row_rms")[0]
    with pytest.raises(Decline, match="branches on a per-row value"):
        widen(site, 0, 4)
    acc = rowwise.replace(
        "    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)\n",
        "    acc = cols * 0.0\n    for _ in range(2):\n        acc += x * x\n"
        "    rms = tl.sqrt(tl.sum(acc, axis=0) / (2 * n_cols) + eps)\n",
    )
    (site,) = find_sites(acc, "row_rms")[0]
    with pytest.raises(Decline, match="`acc` widens inside a loop"):
        widen(site, 0, 4)
    tile = rowwise.replace("x * x, axis=0", "(x[None, :] * x[:, None]), axis=0")
    (site,) = find_sites(tile, "row_rms")[0]
    with pytest.raises(Decline, match="2-D tiles"):
        widen(site, 0, 4)
    no_torch = code.replace("import torch\n", "")
    (site,) = find_sites(no_torch, "scale_add")[0]
    with pytest.raises(Decline, match="torch"):
        persistent(site, 4)


def _with_options(code: str, options: str, launch_tail: str) -> str:
    """row_rms with its launch options built in a dict (as Liger builds `kernel_args`) and spread
    into the launch, `launch_tail` replacing the launch's last arguments."""
    head = "    _row_rms_kernel[grid](x, out, rms, cols, x.stride(0), "
    launch = head + "eps, BLOCK_N=triton.next_power_of_2(cols))\n"
    assert launch in code
    built = (f"    opts = {options}\n    if x.device.type == 'xpu':\n        opts['grf_mode'] = 'large'\n"
             f"{head}{launch_tail})\n")
    return code.replace(launch, built)


def test_a_launch_that_spreads_an_options_dict_is_rewritten_when_every_parameter_is_named():
    task = task_for("row_rms")
    code = _with_options(task.base_code, "{}", "eps, BLOCK_N=triton.next_power_of_2(cols), **opts")
    sites, declined = find_sites(code, "row_rms")
    assert declined == [] and len(sites) == 1
    rewritten = [coarsen(sites[0], 0, 2).code, widen(sites[0], 0, 4).code]
    for rw in rewritten:
        assert "**opts" in rw  # the options reach the rewritten launch unchanged
    with Referee(task, device="interpret") as referee:
        for rw in rewritten:
            verdict = referee.evaluate(rw, candidate_id=1).to_json()
            assert verdict["accepted"], (verdict.get("reason"), verdict.get("error"))
    # A parameter left to the dict (`eps` here, as Liger's rms_norm leaves BLOCK_ROW): declined, named.
    hidden = _with_options(task.base_code, '{"eps": eps}', "BLOCK_N=triton.next_power_of_2(cols), **opts")
    sites, declined = find_sites(hidden, "row_rms")
    assert sites == [] and len(declined) == 1
    assert "**opts" in declined[0] and "eps are not passed" in declined[0], declined
    starred = code.replace("x.stride(0), eps,", "*(x.stride(0), eps),")
    assert "*args" in find_sites(starred, "row_rms")[1][0]


LAUNCH = "    _scale_add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, alpha, BLOCK=BLOCK)\n"


@pytest.mark.parametrize("bound", [False, True], ids=["inline", "bound-to-a-name"])
def test_a_grid_lambda_reading_the_launch_keywords_is_rewritten(bound):
    task = task_for("scale_add")
    assert LAUNCH in task.base_code
    lam = 'lambda meta: (triton.cdiv(n, meta["BLOCK"]),)'
    launch = (f"    grid = {lam}\n    _scale_add_kernel[grid](x, y, out, n, alpha, BLOCK=BLOCK)\n" if bound
              else f"    _scale_add_kernel[{lam}](x, y, out, n, alpha, BLOCK=BLOCK)\n")
    code = task.base_code.replace(LAUNCH, launch)
    sites, declined = find_sites(code, "scale_add")
    assert declined == [] and len(sites) == 1
    site = sites[0]
    assert site.launch_size(0) == "triton.cdiv(n, BLOCK)"
    rewritten = {"coarsen": coarsen(site, 0, 4).code, "widen": widen(site, 0, 4).code,
                 "persistent": persistent(site, 2).code}
    # The count passed to the kernel is computed at the launch; the lambda keeps its own argument.
    assert "num_programs_0=triton.cdiv(n, BLOCK)" in rewritten["coarsen"]
    assert 'meta["BLOCK"]' in rewritten["coarsen"] and 'meta["BLOCK"]' not in rewritten["persistent"]
    with Referee(task, device="interpret") as referee:
        for name, rw in rewritten.items():
            verdict = referee.evaluate(rw, candidate_id=1).to_json()
            assert verdict["accepted"], (name, verdict.get("reason"), verdict.get("error"))


def test_a_grid_lambda_the_launch_cannot_compute_is_declined():
    code = task_for("scale_add").base_code
    autotuned = code.replace(LAUNCH, '    _scale_add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)]'
                                     "(x, y, out, n, alpha)\n")
    assert "does not pass by name" in find_sites(autotuned, "scale_add")[1][0]
    other = code.replace(LAUNCH, "    _scale_add_kernel[lambda meta: (triton.cdiv(n, meta.get('BLOCK')),)]"
                                 "(x, y, out, n, alpha, BLOCK=BLOCK)\n")
    assert "other than as meta" in find_sites(other, "scale_add")[1][0]
    two = code.replace(LAUNCH, "    _scale_add_kernel[lambda a, b: (n,)](x, y, out, n, alpha, BLOCK=BLOCK)\n")
    assert "a lambda other than" in find_sites(two, "scale_add")[1][0]


def test_widening_follows_libdevice_math_and_elementwise_helpers():
    task = task_for("row_rms")
    line = "    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)\n"
    assert line in task.base_code
    header = "import triton.language as tl\n"

    def variant(imports: str, expr: str, helper: str = "") -> str:
        code = task.base_code.replace(header, header + imports).replace(line, f"    rms = {expr}\n")
        return code + helper

    by_name = variant("from triton.language.extra.libdevice import rsqrt as inv_sqrt\n",
                      "1.0 / inv_sqrt(tl.sum(x * x, axis=0) / n_cols + eps)")
    by_module = variant("from triton.language.extra import libdevice\n",
                        "libdevice.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)")
    # A jit helper of the file that maps element by element (as Liger's `silu(x)`), calling another.
    helpers = variant("", "_root(tl.sum(x * x, axis=0) / n_cols, eps)",
                      "\n\n@triton.jit\ndef _sq(v):\n    return tl.sqrt(v)\n"
                      "\n\n@triton.jit\ndef _root(v, e):\n    s = v + e\n    return _sq(s.to(tl.float32))\n")
    widened = []
    for code in (by_name, by_module, helpers):
        (site,) = find_sites(code, "row_rms")[0]
        rw = widen(site, 0, 4).code
        assert "axis=1" in rw
        widened.append(rw)
    with Referee(task, device="interpret") as referee:
        for rw in widened:
            verdict = referee.evaluate(rw, candidate_id=1).to_json()
            assert verdict["accepted"], (verdict.get("reason"), verdict.get("error"))
    # A helper that does more than map elements (here it builds a block) is not followed.
    blocky = variant("", "_grow(tl.sum(x * x, axis=0) / n_cols + eps)",
                     "\n\n@triton.jit\ndef _grow(v):\n    return tl.sqrt(v + tl.arange(0, 1))\n")
    (site,) = find_sites(blocky, "row_rms")[0]
    with pytest.raises(Decline, match="per-row or per-column values"):
        widen(site, 0, 4)


def test_widening_keeps_a_raise_under_a_uniform_branch():
    """SGLang's gelu_and_mul raises under `if quant_max is not None` (a constexpr): left as it is."""
    task = task_for("row_rms")
    store = "    tl.store(rms_ptr + row, rms)\n"
    check = '    if BLOCK_N < 1:\n        raise ValueError("BLOCK_N")\n'
    guarded = task.base_code.replace(store, check + store)
    (site,) = find_sites(guarded, "row_rms")[0]
    rw = widen(site, 0, 4).code
    assert 'raise ValueError("BLOCK_N")' in rw
    with Referee(task, device="interpret") as referee:
        verdict = referee.evaluate(rw, candidate_id=1).to_json()
    assert verdict["accepted"], (verdict.get("reason"), verdict.get("error"))
    per_row = task.base_code.replace(store, "    if BLOCK_N < 1:\n        raise ValueError(rms)\n" + store)
    (site,) = find_sites(per_row, "row_rms")[0]
    with pytest.raises(Decline, match="raise"):
        widen(site, 0, 4)


class _Recorder:
    """Stands in for a kernel: records each launch's grid and keyword arguments."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, kwargs))


@pytest.mark.parametrize("transform", ["widen", "coarsen"])
def test_the_group_is_capped_at_the_rows_a_call_has(transform):
    # Layer norm on an H100: four rows a program made one token 0.88x (a [4, BLOCK] tile, three rows
    # masked); a call with fewer rows than the knob runs them as the base does.
    task = task_for("row_rms")
    (site,) = _sites(task)[0].values()
    rw = BUILD[transform](site, 0, 4)
    knob = "ROWS_GROUP" if transform == "widen" else "COARSEN_GROUP"
    namespace: dict = {}
    exec(compile(rw.code, "rowwise.py", "exec"), namespace)
    recorder = namespace["_row_rms_kernel"] = _Recorder()
    for rows in (1, 2, 3, 6, 9):
        namespace["row_rms"](torch.ones(rows, 8))
    got = [(grid, kwargs[knob]) for grid, kwargs in recorder.launches]
    assert got == [((1,), 1), ((1,), 2), ((1,), 4), ((2,), 4), ((3,), 4)]


@pytest.mark.parametrize(
    ("transform", "knob"),
    [("coarsen", "COARSEN_GROUP"), ("persistent", "PERSISTENT_GROUP"), ("widen", "ROWS_GROUP")],
)
def test_the_new_knob_is_a_tunable_the_params_search_finds(transform, knob):
    task = task_for("merge_state")
    (site,) = _sites(task)[0].values()
    build = {"coarsen": lambda: coarsen(site, 1, 4), "persistent": lambda: persistent(site, 4),
             "widen": lambda: widen(site, 1, 4)}
    rw = build[transform]()
    tunables = relevant(discover(rw.code), rw.code, "merge_state_triton")
    found = [t for t in tunables if t.key.endswith(f":{knob}")]
    assert len(found) == 1 and found[0].kind == "group" and found[0].base == 4
    assert 1 in found[0].domain and 16 in found[0].domain
    # num_warps of the launch is tunable too (Triton's default, inserted on change).
    assert any(t.kind == "num_warps" for t in tunables)
    retuned = render(rw.code, tunables, {found[0].key: 16})
    assert f"{knob} = 16" in retuned and f"{knob} = 4" not in retuned
    ast.parse(retuned)


def test_variants_order_and_mutator_determinism_and_resume():
    task = task_for("head_scale")
    sites, _ = _sites(task)
    keys = [v.key for v in variants(list(sites.values()))]
    assert keys[:5] == [
        "widen:_head_scale_kernel@0=4",
        "widen:_head_scale_kernel@1=4",
        "coarsen:_head_scale_kernel@0=4",
        "coarsen:_head_scale_kernel@1=4",
        "persistent:_head_scale_kernel=4",
    ]
    assert len(keys) == len(set(keys)) == 20

    def run(mutator, rows, n):
        out = []
        for _ in range(n):
            mutator.sync(rows)
            p = mutator.propose(rows[0], [], None, set())
            if p is None:
                break
            rows.append({"id": len(rows) + 1, "mutator": p.mutator, "params": p.params,
                         "parent_id": p.parent_id, "code": p.code})
            out.append(p)
        return out

    base = [{"id": 1, "mutator": "base", "params": None, "code": task.base_code, "parent_id": None}]
    first = run(RewriteMutator(task), list(base), 30)
    again = run(RewriteMutator(task), list(base), 30)
    assert [p.code for p in first] == [p.code for p in again] and len(first) == 20
    assert all(p.parent_id == 1 and p.params["explain"] for p in first)
    # Resume: a new mutator synced from the first five rows goes on with the sixth proposal.
    rows = list(base)
    run(RewriteMutator(task), rows, 5)
    resumed = run(RewriteMutator(task), rows, 30)
    assert [p.code for p in resumed] == [p.code for p in first[5:]]


def test_rewrites_a_params_parent_but_never_a_rewrite():
    task = task_for("scale_add")
    mutator = RewriteMutator(task)
    mutator.sync([{"id": 1, "mutator": "base", "params": None}])
    tuned = task.base_code.replace("BLOCK = 64", "BLOCK = 256")
    p = mutator.propose({"id": 7, "mutator": "params", "code": tuned}, [], None, set())
    assert p.parent_id == 7 and "BLOCK = 256" in p.code and MARK in p.code
    rewritten = {"id": 8, "mutator": "params", "code": p.code}
    q = mutator.propose(rewritten, [], None, set())
    assert q.parent_id == 1 and q.code.count(MARK) == 1  # the base's rewrite, never a stacked one


def test_explain_lineage_reaches_a_rewrite_behind_a_retune():
    from kernelsmith.search.mutators.rewrite import explain_lineage

    rows = [
        {"id": 1, "mutator": "base", "parent_id": None, "params": None},
        {"id": 2, "mutator": "rewrite", "parent_id": 1, "params": {"explain": "Tile widening: ..."}},
        {"id": 3, "mutator": "params", "parent_id": 2, "params": {"op": "retune", "on": 2}},
        {"id": 4, "mutator": "params", "parent_id": 1, "params": {"op": "step"}},
    ]
    assert explain_lineage(rows, 3) == ["Tile widening: ..."]
    assert explain_lineage(rows, 4) == [] and explain_lineage(rows, None) == []
