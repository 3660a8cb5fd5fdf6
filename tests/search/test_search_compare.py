"""`python -m kernelsmith.search.compare`: searches against a sweep, from synthetic archives."""

from __future__ import annotations

import json
from pathlib import Path

from kernelsmith.search.archive import Archive, NewRow
from kernelsmith.search.compare import compare_runs, main, render


def shapes(speeds: list[float]) -> list[dict]:
    """Verdict shapes at these speedups, with tight interleaved samples (base 1 ms)."""
    return [{"shape": {"n": i}, "speedup": s, "candidate_ms": 1 / s, "ci95": [s * 0.99, s * 1.01],
             "samples_ms": {"base": [1.0, 1.01, 0.99, 1.0, 1.0], "candidate": [1 / s] * 5}}
            for i, s in enumerate(speeds)]


def make_run(path: Path, evals: list[tuple[float, float, str]], *, command: str, mutator: str, wall_s: float,
             gpus: list[int], sweep: dict | None = None, final: float | None = None) -> Path:
    """A run directory whose archive holds the base and `evals` [(eval_s, geomean, timing)] in order;
    timing "lossy" is a full measurement at that geomean that is 0.9x on one of its two shapes."""
    path.mkdir(parents=True)
    with Archive(path / "archive.sqlite") as a:
        base = a.add(NewRow("base", mutator="base"))
        a.set_verdict(base, {"accepted": True, "timed": True, "geomean_speedup": 1.0, "eval_s": 3.0,
                             "timing": {"aa_ratio": 1.0, "noisy": False}}, "", timing="full")
        for i, (seconds, g, timing) in enumerate(evals):
            cid = a.add(NewRow(f"code {i}", mutator=mutator, parent_id=base))
            accepted = timing != "rejected"
            full = timing in ("full", "lossy")
            speeds = [g * g / 0.9, 0.9] if timing == "lossy" else [g, g]
            verdict = {"accepted": accepted, "timed": accepted, "geomean_speedup": g if accepted else None,
                       "eval_s": seconds, "reason": None if accepted else "incorrect",
                       "shapes": shapes(speeds) if accepted else [],
                       "timing": {"aa_ratio": 1.0 if full else None, "noisy": False}}
            a.set_verdict(cid, verdict, "", timing={"rejected": "none", "lossy": "full"}.get(timing, timing))
    run = {"target": "t.yaml", "op": "op", "file": "f.py", "checkout": "co", "base_sha": "0" * 40, "seed": 0,
           "device": "cuda", "gpus": gpus, "mutator": mutator, "command": command}
    (path / "run.json").write_text(json.dumps(run))
    result = {"op": "op", "mutator": mutator, "proposals": len(evals), "evaluations": len(evals),
              "wall_s": wall_s, "geomean_speedup": final, "shapes": [],
              "no_winner_reason": None if final else "none of the finalists is a measured win"}
    if sweep:
        result.update(command="sweep", sweep=sweep)
    (path / "result.json").write_text(json.dumps(result))
    return path


def _runs(tmp_path: Path) -> tuple[Path, Path]:
    sweep = make_run(tmp_path / "sweep", [(2.0, 1.2, "full"), (2.0, 3.0, "full"), (2.0, 9.0, "screen"),
                                          (2.0, 5.0, "full"), (2.0, 0.0, "rejected")],
                     command="sweep", mutator="grid", wall_s=30.0, gpus=[0],
                     sweep={"per_shape_best_geomean": 6.0, "best_single_geomean": 5.0}, final=4.9)
    search = make_run(tmp_path / "params", [(1.0, 2.0, "full"), (1.0, 5.5, "full"), (1.0, 5.8, "full"),
                                             (1.0, 7.0, "lossy")],
                      command="optimize", mutator="params", wall_s=60.0, gpus=[0, 1], final=None)
    return sweep, search


def test_gpu_seconds_to_fractions_of_the_sweeps_per_shape_best(tmp_path):
    """(The search's last candidate, 7.0x but 0.9x on a shape, is no measured win: it counts for nothing.)"""
    sweep, search = _runs(tmp_path)
    data = compare_runs([sweep, search])
    assert data["reference"] == 6.0 and data["reference_source"].startswith("per-shape best of sweep")
    s, p = data["runs"]
    # Fractions of the gain over the base: 50% is 3.5x, 90% 5.5x, 95% 5.75x. The sweep: 5.0x after
    # 8 GPU-s (its screened 9.0x and its rejection count time, not speed).
    assert s["kind"] == "sweep" and s["gpu_s"] == 10.0 and s["search_best"] == 5.0
    assert s["gpu_s_to"] == {"50%": 8.0, "90%": None, "95%": None}
    assert s["final_geomean"] == 4.9 and s["evaluations"] == 5 and s["held_gpu_s"] == 30.0
    assert s["evals_per_held_gpu_minute"] == 10.0
    # The search: 50% and 90% at its second evaluation (5.5x), 95% at its third (5.8x).
    assert p["kind"] == "optimize --mutator params" and p["gpu_s_to"] == {"50%": 2.0, "90%": 2.0, "95%": 3.0}
    assert p["final_geomean"] is None and p["held_gpu_s"] == 120.0 and p["evals_per_held_gpu_minute"] == 2.0
    assert p["search_best"] == 5.8 and p["gpu_s"] == 4.0
    # The bar: 95% within at most half the sweep's GPU-seconds (3 of 10: 30%); a run that
    # never got there has no share.
    assert p["share_of_sweep_gpu_s"] == 0.3 and s["share_of_sweep_gpu_s"] is None
    assert data["sweep_complete"] is None  # this synthetic sweep says nothing of its grid
    # Best reached at fractions of the sweep's 10 GPU-seconds.
    assert data["reference_gpu_s"] == 10.0
    assert [(r["gpu_s"], r[str(sweep)], r[str(search)]) for r in data["speedup_vs_gpu_s"]] == [
        (1.0, 1.0, 2.0), (2.5, 1.2, 5.5), (5.0, 3.0, 5.8), (7.5, 3.0, 5.8), (10.0, 5.0, 5.8)]


def test_the_cli_prints_the_tables_and_refuses_unfinished_runs(tmp_path, capsys):
    sweep, search = _runs(tmp_path)
    assert main([str(sweep), str(search)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Reference: 6.000x (per-shape best of sweep ")
    assert "a run's best counts measured wins; \"to 95%\": GPU-seconds until its best held 95% of the " \
        "reference's gain over the base (5.750x); \"of sweep\": that time over the sweep's GPU-seconds " \
        "(the sweep's result does not say how much of its grid it judged); \"within CI\": until a " \
        "measured win whose geomean's 95% CI reaches that 95%" in text
    row = ("| params | optimize --mutator params | 2 | 4.0 | 120.0 | 2.0 | 2.0 | 3.0 | 30% | 3.0 (30%) "
           "| 5.800x | no winner | 4 | 2.0 |")
    assert row in text
    assert ("| sweep | sweep | 1 | 10.0 | 30.0 | 8.0 | never | never | - | never | 5.000x | 4.900 | 5 "
            "| 10.0 |") in text
    assert "| 5.0 | 3.000x | 5.800x |" in text
    assert main([str(sweep), str(search), "--json", "--reference", "5.0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reference"] == 5.0 and data["runs"][0]["gpu_s_to"]["95%"] == 8.0
    # --any: the lossy 7.0x counts too.
    assert main([str(sweep), str(search), "--json", "--any"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"][1]["search_best"] == 7.0 and data["counted"] == "every full, non-noisy measurement"
    (tmp_path / "half").mkdir()
    assert main([str(sweep), str(tmp_path / "half")]) == 2
    assert "not a finished run directory" in capsys.readouterr().err


def test_without_a_sweep_the_best_search_is_the_reference(tmp_path):
    _, search = _runs(tmp_path)
    data = compare_runs([search])
    assert data["reference"] == 5.8 and "no sweep" in data["reference_source"]
    assert data["runs"][0]["gpu_s_to"] == {"50%": 2.0, "90%": 2.0, "95%": 3.0}  # 95%: 1 + 0.95 * 4.8 = 5.56x


def test_the_reference_is_the_sweeps_target(tmp_path):
    """A per-shape best that is no table (the params mutator's rule) is not the reference: the
    sweep's best single config is, and the source says why; where the table pays, the per-shape best."""
    sweep = {"per_shape_best_geomean": 6.0, "best_single_geomean": 5.0, "target_geomean": 5.0,
             "per_shape_table_beats_single": False}
    run = make_run(tmp_path / "sweep", [(2.0, 5.0, "full")], command="sweep", mutator="grid", wall_s=10.0,
                   gpus=[0], sweep=sweep, final=5.0)
    data = compare_runs([run])
    assert data["reference"] == 5.0 and data["reference_source"].startswith("best single config of sweep")
    assert "6.000x" in data["reference_source"]
    assert data["runs"][0]["gpu_s_to"]["95%"] == 2.0
    sweep.update(target_geomean=6.0, per_shape_table_beats_single=True)
    run = make_run(tmp_path / "sweep2", [(2.0, 5.0, "full")], command="sweep", mutator="grid", wall_s=10.0,
                   gpus=[0], sweep=sweep, final=5.0)
    data = compare_runs([run])
    assert data["reference"] == 6.0 and "a per-shape table pays" in data["reference_source"]
    assert data["runs"][0]["gpu_s_to"]["95%"] is None


def test_the_share_of_the_sweeps_gpu_seconds_says_whether_the_sweep_was_complete(tmp_path):
    """The issue's bar compares a search's time to 95% with the sweep's GPU-seconds: the whole
    grid's where the sweep judged it all (said so), a partial grid's otherwise (said too)."""
    sweep = {"per_shape_best_geomean": 5.0, "best_single_geomean": 5.0, "target_geomean": 5.0,
             "grid_size": 4, "evaluated": 4, "complete": True}
    run = make_run(tmp_path / "sweep", [(2.0, 1.5, "full"), (2.0, 5.0, "full"), (2.0, 0.5, "full"),
                                        (2.0, 2.0, "full")], command="sweep", mutator="grid", wall_s=10.0,
                   gpus=[0], sweep=sweep, final=5.0)
    search = make_run(tmp_path / "params", [(1.0, 5.0, "full")], command="optimize", mutator="params",
                      wall_s=5.0, gpus=[0], final=5.0)
    data = compare_runs([run, search])
    assert data["sweep_complete"] is True and data["reference_gpu_s"] == 8.0
    assert [r["share_of_sweep_gpu_s"] for r in data["runs"]] == [0.5, 0.125]
    assert "(the complete grid, 4 of 4 configs judged)" in render(data)
    sweep.update(complete=False, grid_size=9)
    run = make_run(tmp_path / "sweep2", [(2.0, 5.0, "full")], command="sweep", mutator="grid", wall_s=5.0,
                   gpus=[0], sweep=sweep, final=5.0)
    assert "(a partial grid, 4 of 9 configs judged)" in render(compare_runs([run, search]))
    # Configs launching what an earlier one launched are not swept: all 4 distinct ones is the grid.
    sweep.update(complete=True, grid_size=360, distinct_launches=4)
    run = make_run(tmp_path / "sweep3", [(2.0, 5.0, "full")], command="sweep", mutator="grid", wall_s=5.0,
                   gpus=[0], sweep=sweep, final=5.0)
    assert "(the complete grid, 4 of 360 configs (4 distinct launches) judged)" in render(
        compare_runs([run, search]))



def test_small_headroom_counts_fractions_of_the_gain(tmp_path):
    """SGLang gelu_and_mul on the H200: a 1.032x reference. 95% of that geomean is 0.98x, which the
    base has from the start; 95% of its gain (1.030x) is what a run must reach."""
    sweep = {"per_shape_best_geomean": 1.032, "best_single_geomean": 1.022, "target_geomean": 1.032,
             "per_shape_table_beats_single": True}
    run = make_run(tmp_path / "sweep", [(2.0, 1.022, "full"), (2.0, 1.031, "full")], command="sweep",
                   mutator="grid", wall_s=10.0, gpus=[0], sweep=sweep, final=1.03)
    data = compare_runs([run])
    assert data["runs"][0]["gpu_s_to"] == {"50%": 2.0, "90%": 4.0, "95%": 4.0}


def test_the_reference_can_be_the_sweeps_winner_re_measured(tmp_path, capsys):
    """The best of many noisy screens runs high; the sweep's final geomean is what it delivers."""
    sweep, search = _runs(tmp_path)
    data = compare_runs([sweep, search], "final")
    assert data["reference"] == 4.9 and "re-measured" in data["reference_source"]
    # 95% of 4.9's gain is 4.705x: the search's 5.5x full measurement (its second, at 2 GPU-s) holds it.
    params = next(r for r in data["runs"] if r["kind"].startswith("optimize"))
    assert params["gpu_s_to"]["95%"] == 2.0
    assert main([str(sweep), str(search), "--reference", "final"]) == 0
    assert "re-measured on new inputs" in capsys.readouterr().out
    # Without a sweep that has a winner there is nothing to re-measure: a usage error, said so.
    assert main([str(search), "--reference", "final"]) == 2
    assert "needs a sweep with a winner" in capsys.readouterr().err


def test_the_held_rate_with_setup_counts_the_time_before_wall_s(tmp_path):
    from kernelsmith.search.efficiency import run_summary

    sweep, _ = _runs(tmp_path)
    assert run_summary(sweep)["evals_per_held_gpu_minute_with_setup"] is None  # no timeline: older run
    result = json.loads((sweep / "result.json").read_text())
    result["timeline"] = {"setup_s": 30.0, "search_s": 25.0, "final_s": 5.0}
    (sweep / "result.json").write_text(json.dumps(result))
    s = run_summary(sweep)
    # 5 evaluations over 30 s of wall time on one GPU: 10 a minute; with 30 s of setup, 5.
    assert s["evals_per_held_gpu_minute"] == 10.0 and s["evals_per_held_gpu_minute_with_setup"] == 5.0
    assert s["timeline"]["setup_s"] == 30.0


def test_within_ci_counts_a_win_whose_interval_reaches_the_target(tmp_path):
    """SGLang gelu_and_mul on the H200 (session 20): the search measured the sweep's winning launch
    set at 1.023x where the sweep had 1.0265x; 95% of that gain is 1.025x, inside the run's own CI.
    The strict column says never, the within-CI one says when; a win whose CI stays below, never."""
    sweep = {"per_shape_best_geomean": 1.037, "best_single_geomean": 1.0265, "target_geomean": 1.0265}
    ref = make_run(tmp_path / "sweep", [(2.0, 1.0265, "full")], command="sweep", mutator="grid",
                   wall_s=10.0, gpus=[0], sweep=sweep, final=1.028)
    close = make_run(tmp_path / "close", [(1.0, 1.01, "full"), (1.0, 1.0227, "full")], command="optimize",
                     mutator="params", wall_s=10.0, gpus=[0], final=1.026)
    data = compare_runs([ref, close])
    search = data["runs"][1]
    assert search["gpu_s_to"]["95%"] is None and search["gpu_s_to_95_within_ci"] == 2.0
    assert search["share_within_ci"] == 1.0  # 2.0 of the sweep's 2.0 GPU-seconds
    assert "within CI" in render(data) and "| 2.0 (100%) |" in render(data)
    below = make_run(tmp_path / "below", [(1.0, 1.01, "full")], command="optimize", mutator="params",
                     wall_s=10.0, gpus=[0], final=1.01)
    data = compare_runs([ref, below])
    assert data["runs"][1]["gpu_s_to_95_within_ci"] is None  # its CI tops out near 1.02x
