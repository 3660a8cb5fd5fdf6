"""`kernelsmith sweep`: the whole grid of the params knobs through the same evaluator, as a run directory
(the model referee stands in for the GPU)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import model_referee
import pytest
import torch

from kernelsmith.cli import main
from kernelsmith.commands.run import optimize
from kernelsmith.onboard.task import load_task
from kernelsmith.search.archive import Archive
from kernelsmith.search.compare import compare_runs
from kernelsmith.search.run_config import SearchConfig, SearchHooks
from kernelsmith.search.sweep import SweepGrid

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = [1 << k for k in range(4, 15)]  # the demo silu_and_mul's BLOCK domain: 16 .. 16384
WARPS = [1, 2, 4, 8, 16, 32]
WARPS_KEY = "silu_and_mul:_silu_and_mul_kernel.num_warps"


@pytest.fixture
def fake_gpu(monkeypatch):
    """One CUDA device as torch sees it; the model referee judges (nothing runs on a GPU)."""
    import kernelsmith.referee as referee
    import kernelsmith.referee.backend as backend
    from kernelsmith.search.precompile import Precompiler

    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(referee, "Referee", model_referee.ModelReferee)
    monkeypatch.setattr(Precompiler, "maybe", staticmethod(lambda *a, **k: None))
    model_referee.CALLS.clear()


STAND_IN = SearchHooks(referee_factory=model_referee.ModelReferee, precompile=False)


def _sweep(out: Path, *extra: str) -> int:
    return main(["--targets", str(ROOT / "targets"), "sweep", "demo", "silu_and_mul", "--device", "cuda",
                 "--out", str(out), "--no-progress", *extra])


def _model_speedups(block: int, warps: int) -> list[float]:
    """The model referee's per-shape speedups of one config, computed here independently of the run."""
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    ms = model_referee.model_ms
    shapes = task.harness.shapes_for("cuda")
    return [ms(s["tokens"], s["d"], 64, 1) / ms(s["tokens"], s["d"], block, warps) for s in shapes]


def test_sweep_visits_the_whole_grid_once_and_reports_single_and_per_shape_bests(tmp_path, fake_gpu, capsys):
    out = tmp_path / "sweep"
    assert _sweep(out) == 0
    io = capsys.readouterr()
    assert "sweep: grid of 66 configurations: BLOCK (11) x num_warps (6)" in io.err
    run = json.loads((out / "run.json").read_text())
    result = json.loads((out / "result.json").read_text())
    assert run["mutator"] == "grid" and run["command"] == "sweep" and run["budget"] is None
    assert result["mutator"] == "grid" and result["command"] == "sweep"
    assert result["stop_reason"] == "search space covered: all 66 distinct launches measured"
    assert result["space"] == {"launches": 66, "measured": 66, "covered": True}
    with Archive(out / "archive.sqlite") as a:
        rows = a.all()
    points = [(r["params"]["values"]["silu_and_mul:BLOCK"], r["params"]["values"][WARPS_KEY])
              for r in rows if r["mutator"] == "grid" and not r["params"].get("table")]
    # Every point of the product once; the base's own point (64, 1) is the base row.
    assert sorted(points) == sorted(set(itertools.product(BLOCKS, WARPS)) - {(64, 1)})
    assert points != sorted(points)  # a shuffled order, not the lexicographic corner first
    sweep = result["sweep"]
    assert sweep["grid_size"] == 66 and sweep["proposed"] == 65 and sweep["evaluated"] == 65
    assert sweep["complete"] and not sweep["sampled"]
    assert sweep["knobs"] == {"silu_and_mul:BLOCK": BLOCKS, WARPS_KEY: WARPS}
    # Independently of the run: the model's best single config and its best config per shape.
    compiles = [(b, w) for b, w in itertools.product(BLOCKS, WARPS) if b <= 8192]
    table = {c: _model_speedups(*c) for c in compiles}
    geo = {c: math.exp(sum(map(math.log, v)) / len(v)) for c, v in table.items()}
    per_shape = [max(1.0, *(v[i] for v in table.values())) for i in range(len(table[(64, 1)]))]
    # The best single config is the best fully measured one, and a config whose screen already loses
    # a shape beyond its CI (the model's CI is +-1%: below 0.97x somewhere) is never fully measured:
    # it cannot be the winner (referee/staging.py). The fastest, (4096, 32), is 0.71x at one token.
    fair = max(g for c, g in geo.items() if min(table[c]) * 1.01 >= 0.98)
    assert fair < 0.9 * max(geo.values()) and min(table[(4096, 32)]) < 0.75
    assert sweep["best_single_geomean"] == pytest.approx(fair, rel=1e-3)
    lost = [r for r in rows if (r["verdict"] or {}).get("details", {}).get("screen_lost_shapes")]
    assert lost and all(r["timing"] == "screen" for r in lost)
    per_shape_geo = math.exp(sum(map(math.log, per_shape)) / len(per_shape))
    assert sweep["per_shape_best_geomean"] == pytest.approx(per_shape_geo, rel=1e-3)
    assert sweep["per_shape_best_geomean"] > 1.01 * sweep["best_single_geomean"]
    assert sweep["per_shape_table_beats_single"]
    assert [s["speedup"] for s in sweep["per_shape_best"]] == pytest.approx(per_shape, rel=1e-3)
    # After the whole grid, the per-shape table the params rule adopts is proposed once and measured:
    # the last row, a table of grid configs. The target is that measurement (or the best single
    # config, were it higher), not the per-shape maximum, which no kernel was measured at.
    tables = [r for r in rows if r["mutator"] == "grid" and r["params"].get("table")]
    assert len(tables) == 1 and tables[0]["id"] == rows[-1]["id"] == sweep["table_id"]
    assert tables[0]["params"]["op"] == "table"
    assert sweep["table_geomean"] > 1.01 * sweep["best_single_geomean"]
    assert sweep["target_geomean"] == sweep["table_geomean"] <= sweep["per_shape_best_geomean"] * 1.01
    # The table, measured after the grid, loses no shape and is faster than every fair single
    # config: it wins.
    assert result["winner"]["id"] == sweep["table_id"] and result["geomean_speedup"] > fair
    assert f"sweep: 65 of 66 configurations evaluated; best single config {fair:.3f}x" in io.out
    report = (out / "report.md").read_text()
    assert "### Sweep" in report
    assert "- grid: 66 configurations (11 x 6 values), 65 evaluated (the whole grid)" in report
    assert (f"- that table, measured after the grid (candidate #{sweep['table_id']}): "
            f"{sweep['table_geomean']:.2f}x") in report
    assert "kernelsmith sweep " in report and "--mutator" not in report
    # The comparison the GPU step prints: a params search against this sweep.
    params = optimize(SearchConfig(target="demo", op="silu_and_mul", out=str(tmp_path / "params"), budget=12,
                                   mutator="params", device="cuda", gpus=[0], progress=False,
                                   targets=str(ROOT / "targets")), STAND_IN)
    data = compare_runs([out, tmp_path / "params"])
    assert data["reference"] == pytest.approx(sweep["table_geomean"], abs=1e-4)
    assert f"the per-shape table it measured after its grid (#{sweep['table_id']}" in data["reference_source"]
    assert [r["kind"] for r in data["runs"]] == ["sweep", "optimize --mutator params"]
    assert data["runs"][1]["evaluations"] == params["evaluations"]
    assert data["runs"][0]["evaluations"] == 66  # the grid's points and the table


def test_a_sweep_cut_short_resumes_where_it_stopped(tmp_path, fake_gpu):
    base = dict(target="demo", op="silu_and_mul", out=str(tmp_path / "s"), mutator="grid", command="sweep",
                device="cuda", gpus=[0], progress=False, targets=str(ROOT / "targets"), seed=5)
    first = optimize(SearchConfig(**base, minutes=1e-4), STAND_IN)
    assert first["stop_reason"].startswith("time budget") and not first["sweep"]["complete"]
    assert first["sweep"]["proposed"] < 65
    with pytest.raises(Exception, match="is a sweep run; resume it with that command"):
        optimize(SearchConfig(**{**base, "command": "optimize"}, resume=True), STAND_IN)
    done = optimize(SearchConfig(**base, resume=True, minutes=10), STAND_IN)
    assert done["sweep"]["complete"] and done["sweep"]["proposed"] == 65
    with Archive(tmp_path / "s" / "archive.sqlite") as a:
        codes = [r["code"] for r in a.all()]
        evaluated = [r["id"] for r in a.all() if r["mutator"] == "grid" and r["status"] == "evaluated"]
    # The base, 65 points and, after them, the per-shape table (proposed once, also across the resume).
    assert len(codes) == len(set(codes)) == 67 and len(evaluated) == 66
    screened = [c["cid"] for c in model_referee.CALLS if c["timing"] == "screen"]
    assert len(screened) == len(set(screened)) == 66  # no point evaluated twice across the resume


def test_a_sweep_cut_short_by_time_measures_its_table_and_a_resume_owes_the_whole_grids(
        tmp_path, fake_gpu, monkeypatch):
    from kernelsmith.search.loop import Search

    base = dict(target="demo", op="silu_and_mul", out=str(tmp_path / "s"), mutator="grid", command="sweep",
                device="cuda", gpus=[0], progress=False, targets=str(ROOT / "targets"), seed=0, minutes=10)
    should_stop = Search._should_stop

    def time_up_after_40(self, evaluator, since):  # the time budget, spent after 40 proposals
        if self.archive.proposals() >= 40:
            return "time budget of 10 minutes spent"
        return should_stop(self, evaluator, since)

    monkeypatch.setattr(Search, "_should_stop", time_up_after_40)
    first = optimize(SearchConfig(**base), STAND_IN)
    sweep = first["sweep"]
    assert first["stop_reason"].startswith("time budget") and not sweep["complete"]
    assert sweep["per_shape_table_beats_single"]
    with Archive(tmp_path / "s" / "archive.sqlite") as a:
        rows = a.all()
    tables = [r for r in rows if r["mutator"] == "grid" and r["params"].get("table")]
    # Once the budget is spent, the table the points so far make is judged like a point (the model
    # referee's screen, then its full measurement as a contender): the claim is a measured kernel.
    assert len(tables) == 1 and tables[0]["params"]["cut_short"] and tables[0]["id"] == rows[-1]["id"]
    assert tables[0]["status"] == "evaluated" and tables[0]["timing"] == "full"
    assert sweep["table_id"] == tables[0]["id"] and sweep["table_geomean"] == pytest.approx(
        tables[0].trusted_speedup, abs=1e-4)
    assert sweep["target_geomean"] == max(sweep["best_single_geomean"], sweep["table_geomean"])
    # On the search's own inputs (seed 0), as the points were; the re-measurement comes after it.
    assert [c["seed"] for c in model_referee.CALLS if c["cid"] == tables[0]["id"]][0] == 0
    report = (tmp_path / "s" / "report.md").read_text()
    assert f"- that table, measured once the time budget was spent (candidate #{tables[0]['id']})" in report
    assert "a maximum over single measurements and so an upper guess, not a kernel" in report
    data = compare_runs([tmp_path / "s"])
    assert f"the per-shape table it measured once its time budget was spent (#{tables[0]['id']}" \
        in data["reference_source"]
    # A resume completes the grid and still judges the whole grid's table (unless it is this one).
    monkeypatch.setattr(Search, "_should_stop", should_stop)
    done = optimize(SearchConfig(**base, resume=True), STAND_IN)
    assert done["sweep"]["complete"] and done["sweep"]["proposed"] == 65
    with Archive(tmp_path / "s" / "archive.sqlite") as a:
        rows = a.all()
    tables = [r for r in rows if r["mutator"] == "grid" and r["params"].get("table")]
    codes = [r["code"] for r in rows]
    assert len(codes) == len(set(codes))
    assert [bool(r["params"].get("cut_short")) for r in tables] in ([True, False], [True])
    assert all(r["status"] == "evaluated" for r in tables)


def test_the_order_is_fixed_by_the_seed_and_a_huge_grid_is_sampled():
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))

    def order(seed, cap=1000):
        return list(SweepGrid(task, device="cuda", seed=seed, cap=cap)._grid)

    assert order(1) == order(1) != order(2)
    assert sorted(order(1)) == sorted(itertools.product(BLOCKS, WARPS))
    capped = SweepGrid(task, device="cuda", seed=0, cap=10)
    points = list(capped._points(random.Random(0)))
    assert len(points) == len(set(points)) == 10 and set(points) <= set(itertools.product(BLOCKS, WARPS))
    assert "more than 10: a uniform sample of 10 is swept" in capped.describe_grid()


def test_sweep_usage_errors_exit_2(tmp_path, capsys):
    assert _sweep(tmp_path / "x", "--minutes", "0") == 2
    assert "--minutes" in capsys.readouterr().err
    assert _sweep(tmp_path / "y", "--resume") == 2  # nothing to resume there


def _parser(name: str):
    import argparse

    from kernelsmith.commands import optimize as optimize_cmd
    from kernelsmith.commands import sweep as sweep_cmd

    parser = argparse.ArgumentParser()
    parser.add_argument("--targets")  # the top-level option (cli.py)
    {"optimize": optimize_cmd, "sweep": sweep_cmd}[name].register(parser.add_subparsers())
    return parser


def _subcommand(name: str):
    return _parser(name)._subparsers._group_actions[0].choices[name]


def _flags(sub) -> dict:
    return {a.dest: (tuple(a.option_strings), a.default, a.type, a.choices and tuple(a.choices), a.metavar,
                     type(a).__name__) for a in sub._actions if a.dest != "help"}


def test_optimize_and_sweep_share_their_run_options():
    """One definition (commands/run_options.py): every sweep flag is optimize's, with the same default,
    type and choices; optimize adds only its search options; docs/cli.md's synopses name every flag."""
    opt, sweep = _flags(_subcommand("optimize")), _flags(_subcommand("sweep"))
    assert {k: opt[k] for k in sweep} == sweep
    assert set(opt) - set(sweep) == {"budget", "mutator", "replay", "islands", "exploit", "stagnation"}
    # Today's defaults, kept.
    assert {k: sweep[k][1] for k in ("minutes", "gpus", "device", "resume", "seed", "compile_limit",
                                     "ray", "workers_per_node", "pipeline", "checkout", "out")} == {
        # seed None: 0 for a new run, the run's own on a resume (a different one is refused)
        "minutes": None, "gpus": None, "device": "auto", "resume": False, "seed": None, "compile_limit": 20.0,
        "ray": None, "workers_per_node": None, "pipeline": None, "checkout": None, "out": None}
    cli = (ROOT / "docs" / "cli.md").read_text()
    for name, flags in (("optimize", opt), ("sweep", sweep)):
        # The command's synopsis: the text block under its heading.
        section = cli.split(f"## `kernelsmith {name}`\n", 1)[1]
        synopsis = section.split("```text\n", 1)[1].split("```", 1)[0]
        assert synopsis.startswith(f"kernelsmith {name} TARGET OP"), name
        named = {s for strings, *_ in flags.values() for s in strings if s.startswith("--")}
        assert {f for f in named if f not in synopsis} == set(), name


def test_the_shared_options_give_both_commands_the_same_config_fields():
    from kernelsmith.commands.run_options import run_config
    from kernelsmith.errors import ConfigError

    argv = ["demo", "silu_and_mul", "--checkout", "co", "--out", "o", "--minutes", "2", "--gpus", "0,1",
            "--device", "cuda", "--resume", "--seed", "5", "--compile-limit", "0", "--pipeline", "3"]
    opt = run_config(_parser("optimize").parse_args(["--targets", "t", "optimize", *argv]))
    assert opt == run_config(_parser("sweep").parse_args(["--targets", "t", "sweep", *argv]))
    assert opt == {"target": "demo", "op": "silu_and_mul", "checkout": "co", "out": "o", "minutes": 2.0,
                   "gpus": [0, 1], "device": "cuda", "resume": True, "seed": 5, "wait": False,
                   "progress": True, "targets": "t", "compile_limit": 0.0, "ray": None,
                   "workers_per_node": None, "pipeline": 3}
    for name in ("optimize", "sweep"):
        with pytest.raises(ConfigError, match="must be positive"):
            run_config(_parser(name).parse_args([name, "demo", "silu_and_mul", "--minutes", "0"]))
        with pytest.raises(ConfigError, match="names no device"):
            run_config(_parser(name).parse_args([name, "demo", "silu_and_mul", "--gpus", ","]))
