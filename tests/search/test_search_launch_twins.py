"""Configs that launch the same (twins.py, launch/evaluate.py): the static launch signature against what the
launcher really launches (kernel launches recorded on CPU tensors), the sweep visiting one point per
launch, no dedupe where a knob reaches what the code text cannot tell, the params mutator never
proposing a twin (reproducibly, and the same on resume), and the demo and sampler spaces kept whole."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import threading
from pathlib import Path
from types import SimpleNamespace

import model_referee
import pytest
import torch
import upstreamkit
from test_search_params import drive
from test_search_sweep import fake_gpu  # noqa: F401 - a fixture

from kernelsmith.commands.run import optimize
from kernelsmith.harness.model import load_harness
from kernelsmith.onboard.task import load_task
from kernelsmith.referee.verdict import Verdict
from kernelsmith.search.archive import Archive
from kernelsmith.search.mutators.params import GridMutator, ParamsMutator
from kernelsmith.search.mutators.space import ConfigSpace
from kernelsmith.search.run_config import SearchConfig, SearchHooks
from kernelsmith.search.sweep import SweepGrid

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
CODE = (DATA / "clamp_launchers.py").read_text()
HIDDEN = [4096, 8192, 6144]  # the harness's GPU shapes' row lengths
MOST, DIV, FLOOR = ("scale_rows:most_warps", "scale_rows:launch.num_warps|div",
                    "scale_rows:launch.num_warps|floor")


def _task(entry: str = "scale_rows", code: str = CODE, harness=DATA / "clamp_harness.py"):
    return SimpleNamespace(base_code=code, harness=load_harness(harness),
                           operator=SimpleNamespace(entry=entry))


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _oracle_warps(values: dict, hidden: int) -> int:
    """scale_rows's warp count, written out here: max(min(npo2(cdiv(h, div)), most), floor)."""
    return max(min(_next_pow2(-(-hidden // values[DIV])), values[MOST]), values[FLOOR])


_RECORDING = threading.Lock()


class _Recorder:
    """Kernel launches recorded instead of run: (kernel, grid, kwargs) per launch."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple] = []
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        def run(fn, *args, grid, warmup, **kwargs):
            self.calls.append((fn.fn.__name__, grid, kwargs))

        for cls in (JITFunction, InterpretedFunction):
            monkeypatch.setattr(cls, "run", run)


_MODULES: dict[str, object] = {}


def _module(code: str, folder: Path):
    """`code` imported from a file (Triton reads kernel source through inspect)."""
    if code not in _MODULES:
        path = folder / f"twins_mod_{len(_MODULES)}.py"
        path.write_text(code)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _MODULES[code] = mod
    return _MODULES[code]


def _real_launches(rec: _Recorder, code: str, folder: Path, entry: str, shapes: list[dict]) -> list[list]:
    """What `entry` of `code` launches on CPU tensors of each shape: [(kernel, grid, kwargs)] per shape."""
    fn = getattr(_module(code, folder), entry)
    out = []
    with _RECORDING:
        for s in shapes:
            rec.calls.clear()
            x = torch.zeros(s["tokens"], s["hidden"], dtype=getattr(torch, s["dtype"]))
            fn(x, torch.ones(s["hidden"], dtype=x.dtype))
            out.append(list(rec.calls))
    return out


def _static(space: ConfigSpace, values: dict) -> list[dict]:
    """The evaluator's knob-dependent arguments of the (one) launch per shape."""
    sig = space.twins.signature({"values": values})
    assert sig is not None
    per_shape = []
    for paths in sig:
        assert len(paths) == 1  # every test of the launcher is decided
        launches = [item for item in paths[0] if item[0] == "_scale_rows_kernel"]
        assert len(launches) == 1
        per_shape.append(dict(launches[0][1]))
    return per_shape


def test_static_num_warps_equals_what_the_launcher_launches(tmp_path, monkeypatch):
    """(a) For configs across the grid and every GPU and CPU shape, the evaluator's num_warps is the
    num_warps the rendered launcher passes when called (launch recorded, nothing run)."""
    rec = _Recorder(monkeypatch)
    for device in ("cuda", "interpret"):
        space = ConfigSpace(_task(), device=device)
        assert {t.key for t in space.tunables} == {MOST, DIV, FLOOR} and space.twins.off is None
        combos = list(itertools.product(*(t.domain for t in space.tunables)))
        for combo in combos[:: len(combos) // 12] + [combos[-1]]:
            values = dict(zip((t.key for t in space.tunables), combo, strict=True))
            code = space.render({"values": values})
            real = _real_launches(rec, code, tmp_path, "scale_rows", space.shapes)
            static = _static(space, values)
            for shape, launches, knobbed in zip(space.shapes, real, static, strict=True):
                assert [k for k, _, _ in launches] == ["_scale_rows_kernel"]
                kwargs = launches[0][2]
                # Only num_warps depends on the knobs; its static value is the real one.
                assert knobbed == {"num_warps": kwargs["num_warps"]}, (values, shape)
                assert kwargs["num_warps"] == _oracle_warps(values, shape["hidden"])


def test_the_grid_collapses_to_its_distinct_launches():
    """(b) 468 knob combinations; on the three row lengths they make only the distinct warp triples
    the clamp allows (counted here from the clamp written out), and the grid proposes one per triple."""
    space = GridMutator(_task(), device="cuda")
    keys = [t.key for t in space.tunables]
    combos = [dict(zip(keys, c, strict=True)) for c in itertools.product(*(t.domain for t in space.tunables))]
    assert len(combos) == 6 * 13 * 6 == 468
    triples = {tuple(_oracle_warps(v, h) for h in HIDDEN) for v in combos}
    grid = SweepGrid(_task(), device="cuda", seed=0)
    assert grid.launches() == (len(triples), 0) and len(triples) < 40
    assert f"{len(triples)} distinct launches on the listed shapes" in grid.describe_grid()
    base = [{"id": 1, "mutator": "base", "params": None, "code": CODE, "status": "pending"}]
    space.sync(base)
    proposed = []
    while (p := space.propose(base[0], [], None, set())) is not None:
        proposed.append(tuple(_oracle_warps(p.params["values"], h) for h in HIDDEN))
    base_triple = tuple(_oracle_warps(space.base_values, h) for h in HIDDEN)
    assert len(proposed) == len(set(proposed)) == len(triples) - 1 and base_triple not in proposed


class _LaunchReferee(model_referee.ModelReferee):
    """Judges a scale_rows candidate by what it really launches (recorded on CPU tensors): each
    shape's speed peaks at num_warps = hidden / 512. Logs each candidate's warps per shape."""

    recorder: _Recorder
    folder: Path
    seen: dict[int, tuple] = {}

    def evaluate(self, code, *, candidate_id=0, timing="full", seed=None, **kw):
        code = code if code is not None else self.task.base_code
        launches = _real_launches(self.recorder, code, self.folder, "scale_rows", self.shapes)
        warps = tuple(calls[0][2]["num_warps"] for calls in launches)
        base = _real_launches(self.recorder, self.task.base_code, self.folder, "scale_rows", self.shapes)
        type(self).seen[candidate_id] = warps

        def ms(w, h):
            return 1.0 + abs(math.log2(w) - math.log2(h / 512))

        shapes = []
        for s, w, b in zip(self.shapes, warps, base, strict=True):
            sp = ms(b[0][2]["num_warps"], s["hidden"]) / ms(w, s["hidden"])
            shapes.append({"shape": s, "max_abs_err": 0.0, "baseline_ms": 1.0, "candidate_ms": 1.0 / sp,
                           "speedup": sp, "ci95": [sp * 0.99, sp * 1.01], "device_ms": 1.0 / sp,
                           "host_ms": None, "samples_ms": {"base": [1.0] * 3, "candidate": [1 / sp] * 3}})
        g = math.exp(sum(math.log(s["speedup"]) for s in shapes) / len(shapes))
        v = Verdict(accepted=True, correct=True, device={"name": "model GPU", "driver": "0", "torch": "x",
                                                         "triton": "y"},
                    shapes=shapes, geomean_speedup=g, timed=True,
                    timing={"metric": "device", "aa_ratio": 1.001 if timing != "screen" else None,
                            "noisy": False if timing != "screen" else None})
        v.eval_s = 0.5
        return v.finalize()


def _clamp_target(tmp_path: Path) -> Path:
    """A targets folder holding `clamp` (scale_rows of the clamp launchers, with its harness)."""
    proj, targets = tmp_path / "proj", tmp_path / "targets"
    (proj / "clamp").mkdir(parents=True, exist_ok=True)
    (proj / "clamp" / "launchers.py").write_text(CODE)
    (targets / "clamp").mkdir(parents=True, exist_ok=True)
    (targets / "clamp" / "scale_rows.py").write_text((DATA / "clamp_harness.py").read_text())
    (targets / "clamp.yaml").write_text(
        f"repo: test/clamp\nclone_url: {proj}\nbase: main\noperators:\n  - name: scale_rows\n"
        "    file: clamp/launchers.py\n    entry: scale_rows\n    harness: clamp/scale_rows.py\n")
    return targets


def test_the_sweep_evaluates_one_point_per_distinct_launch(tmp_path, fake_gpu, monkeypatch, capsys):  # noqa: F811
    """(b) `kernelsmith sweep` over the clamp launcher: every distinct launch judged once, by a
    referee that records what each candidate really launches; result.json counts both."""
    targets = _clamp_target(tmp_path)
    _LaunchReferee.recorder, _LaunchReferee.folder, _LaunchReferee.seen = _Recorder(monkeypatch), tmp_path, {}
    result = optimize(SearchConfig(target="clamp", op="scale_rows", out=str(tmp_path / "sweep"),
                                   mutator="grid", command="sweep", device="cuda", gpus=[0], progress=False,
                                   targets=str(targets)),
                      SearchHooks(referee_factory=_LaunchReferee, precompile=False))
    warps = [1, 2, 4, 8, 16, 32]
    triples = {tuple(_oracle_warps(dict(zip((MOST, DIV, FLOOR), c, strict=True)), h) for h in HIDDEN)
               for c in itertools.product(warps, [2 << k for k in range(13)], warps)}
    sweep = result["sweep"]
    assert sweep["grid_size"] == 468 and sweep["distinct_launches"] == len(triples)
    assert sweep["without_launch_signature"] == 0 and sweep["launch_dedupe_note"] is None
    assert sweep["complete"] and sweep["proposed"] == sweep["evaluated"] == len(triples) - 1
    with Archive(tmp_path / "sweep" / "archive.sqlite") as a:
        ids = [r["id"] for r in a.all() if r["mutator"] == "grid"]
    seen = [_LaunchReferee.seen[i] for i in ids]  # what each grid point really launched
    assert len(seen) == len(set(seen)) == len(triples) - 1  # no launch measured twice
    assert set(seen) | {(32, 32, 32)} == triples  # the base: 32 warps on every row length
    stored = json.loads((tmp_path / "sweep" / "result.json").read_text())["sweep"]
    assert stored["distinct_launches"] == len(triples) and stored["grid_size"] == 468
    assert f"{len(triples)} distinct launches on the listed shapes" in capsys.readouterr().err
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert (f"- grid: 468 configurations (6 x 13 x 6 values), {len(triples) - 1} evaluated (the whole grid); "
            f"{len(triples)} distinct launches on the listed shapes, each swept once") in report


def test_a_resumed_params_run_proposes_what_one_run_did(tmp_path, fake_gpu, monkeypatch):  # noqa: F811
    """(d) The pipelined loop (proposals see verdicts generations late, twins told to the study):
    stopped after 6 proposals (whole generations) and resumed to 10, the archive holds what one run
    of 10 made, and no two of its candidates launch the same."""
    targets = _clamp_target(tmp_path)
    _LaunchReferee.recorder, _LaunchReferee.folder, _LaunchReferee.seen = _Recorder(monkeypatch), tmp_path, {}

    def run(name, budget, resume=False):
        return optimize(SearchConfig(target="clamp", op="scale_rows", out=str(tmp_path / name), budget=budget,
                                     mutator="params", device="cuda", gpus=[0], progress=False, seed=4,
                                     stagnation=100, resume=resume, targets=str(targets)),
                        SearchHooks(referee_factory=_LaunchReferee, precompile=False))

    run("whole", 10)
    run("split", 6)
    assert run("split", 10, resume=True)["proposals"] == 10

    def proposals(name):
        with Archive(tmp_path / name / "archive.sqlite") as a:
            return [(r["generation"], r["code"], r["params"], r["id"]) for r in a.all()]

    assert proposals("whole") == proposals("split")
    launched = [_LaunchReferee.seen[i] for *_, i in proposals("whole")]  # the base's included
    assert len(launched) == len(set(launched)) == 11


def test_a_knob_reaching_a_device_query_gets_no_dedupe():
    """(c) The clamp also bounded by a device query: no signature, every point proposed."""
    task = _task("scale_rows_queried")
    grid = GridMutator(task, device="cuda")
    size = math.prod(len(t.domain) for t in grid.tunables)
    assert size == 13 * 6 and grid.twins.off is None
    assert grid.twins.signature({"values": grid.base_values}) is None
    assert "num_warps depends on a knob and cannot be computed" in grid.twins.why
    base = {"id": 1, "mutator": "base", "params": None, "code": CODE, "status": "pending"}
    grid.sync([base])
    n = 0
    while grid.propose(base, [], None, set()) is not None:
        n += 1
    assert n == size - 1
    sweep = SweepGrid(task, device="cuda", seed=0)
    assert sweep.launches() == (size, size) and "launches not compared" in sweep.describe_grid()


def _drive(mutator, n: int, seed: int, rows: list[dict] | None = None) -> list[dict]:
    """Propose and judge one candidate at a time by the clamp written out (speed peaks at hidden/512)."""
    def verdict(params):
        configs = mutator.shape_configs(SimpleNamespace(params=params, values=params["values"]))
        shapes = []
        for s, c in zip(mutator.shapes, configs, strict=True):
            w = _oracle_warps({**mutator.base_values, **c}, s["hidden"])
            best = math.log2(s["hidden"] / 512)
            sp = (1 + abs(5 - best)) / (1 + abs(math.log2(w) - best))  # the base runs 32 = 2**5 warps
            shapes.append({"shape": s, "speedup": sp, "ci95": [sp * 0.99, sp * 1.01]})
        return {"accepted": True, "timed": True, "timing": {"noisy": False}, "shapes": shapes,
                "geomean_speedup": math.prod(x["speedup"] for x in shapes) ** (1 / len(shapes))}

    return drive(mutator, lambda code, params: verdict(params), n, seed, rows)


def _launched(mutator, params: dict) -> tuple:
    """The warp count each listed shape runs with under `params` (a table: its row for the shape)."""
    configs = mutator.shape_configs(SimpleNamespace(params=params, values=params["values"]))
    return tuple(_oracle_warps({**mutator.base_values, **c}, h) for c, h in zip(configs, HIDDEN, strict=True))


def test_params_never_proposes_a_twin_reproducibly_and_on_resume():
    """(d) With a fixed seed no two configs (tables included) the params mutator proposes launch the
    same on every shape, nor the base's; the same seed proposes the same; a mutator told the first
    rows (a resumed run) proposes what the running one did next."""
    a = _drive(ParamsMutator(_task(), device="cuda"), 8, seed=5)
    b = _drive(ParamsMutator(_task(), device="cuda"), 8, seed=5)
    assert [r["code"] for r in a] == [r["code"] for r in b] and len(a) == 9
    resumed = _drive(ParamsMutator(_task(), device="cuda"), 3, seed=5, rows=[dict(r) for r in a[:6]])
    assert [r["code"] for r in resumed] == [r["code"] for r in a]
    mutator = ParamsMutator(_task(), device="cuda")
    rows = _drive(mutator, 30, seed=1)
    launches = [_launched(mutator, r["params"]) for r in rows[1:]]
    base = _launched(mutator, {"values": mutator.base_values})
    assert len(launches) == len(set(launches)) and base not in launches
    # Every launch a single config can make was reached, by a single config or a table.
    combos = itertools.product(*(t.domain for t in mutator.tunables))
    keys = [t.key for t in mutator.tunables]
    singles = {_launched(mutator, {"values": dict(zip(keys, c, strict=True))}) for c in combos}
    assert len(singles) == 11 and singles - {base} <= set(launches)
    assert sum(1 for r in rows[1:] if not r["params"].get("table")) < len(singles)


def test_demo_and_sampler_spaces_keep_every_point():
    """(e) Where every knob reaches the launch directly, every point is its own launch: the demo's
    silu_and_mul and rms_norm, and a sampler-shaped launcher over LMDeploy's sampler harness."""
    for op, size in (("silu_and_mul", 66), ("rms_norm", 6)):
        task = load_task("demo", op, targets=str(ROOT / "targets"))
        for device in ("cuda", "interpret"):
            grid = SweepGrid(task, device=device, seed=0)
            assert grid.size == size and grid.launches() == (size, 0), (op, device)
    sampler = _task("draw", harness=ROOT / "targets" / "lmdeploy" / "multinomial_sampling.py")
    for device in ("cuda", "interpret"):
        grid = SweepGrid(sampler, device=device, seed=0)
        assert grid.size == 13 * 6 * 6 and grid.launches() == (grid.size, 0), device
    # The demo's full grid is still swept point by point (test_search_sweep.py checks the run).
    assert GridMutator(load_task("demo", "silu_and_mul", targets=str(ROOT / "targets")),
                       device="cuda").twins.off is None


REAL = [("sglang/python/sglang/kernels/ops/layernorm/fused_rmsnorm.py", "fused_rmsnorm",
         "sglang/fused_rmsnorm.py", 468, 11),
        ("lmdeploy/lmdeploy/pytorch/kernels/cuda/multinomial_sampling.py", "multinomial_sampling",
         "lmdeploy/multinomial_sampling.py", 432, 432)]


@pytest.mark.parametrize("rel, entry, harness, size, distinct", REAL, ids=[r[1] for r in REAL])
def test_real_launchers_when_carried(rel, entry, harness, size, distinct):
    """The real files (tests/upstreamkit.py): SGLang's fused_rmsnorm collapses to its distinct warp
    counts; LMDeploy's sampler keeps every point."""
    path = upstreamkit.require_file(rel)
    grid = SweepGrid(_task(entry, path.read_text(), ROOT / "targets" / harness), device="cuda", seed=0)
    assert grid.size == size and grid.launches() == (distinct, 0)
