"""KernelBench tasks under the referee: honest ModelNews scored, cheating ones rejected by name."""

import argparse
import json
from pathlib import Path

import pytest

from kernelsmith.commands import bench as bench_cmd
from kernelsmith.kernelbench.bench import score_solution
from kernelsmith.kernelbench.problem import read_problem
from kernelsmith.kernelbench.problems import PROBLEMS_DIR, SOLUTIONS_DIR

CHEATS = sorted((Path(__file__).resolve().parents[1] / "data" / "kernelbench" / "cheats").glob("*.py"))


def _bench(argv, capsys):
    parser = argparse.ArgumentParser()
    bench_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_honest_solutions_are_accepted(capsys):
    out = _bench([str(PROBLEMS_DIR), "--solutions", str(SOLUTIONS_DIR), "--device", "interpret", "--json"],
                 capsys)
    report = json.loads(out)
    assert [t["task"] for t in report["tasks"]] == ["1_Swish", "2_RMSNorm", "3_Softmax", "4_Linear_ReLU"]
    assert all(t["correct"] and t["reason"] is None for t in report["tasks"]), report["tasks"]
    assert all(t["timed"] is False and t["speedup"] is None for t in report["tasks"])
    m = report["metrics"]
    assert m["correctness_rate"] == 1.0 and m["correct"] == 4
    # No timing under the interpreter: the speed metrics say so instead of inventing numbers.
    assert m["fast_p"] == {"1.0": None, "1.2": None} and m["mean_speedup"] is None and not m["timed"]


@pytest.mark.parametrize("path", CHEATS, ids=[p.stem for p in CHEATS])
def test_cheating_solutions_are_rejected(path, tmp_path):
    expect = path.read_text().splitlines()[0].removeprefix("# expect:").strip()
    problem = read_problem(PROBLEMS_DIR / f"{path.stem.split('__')[0]}.py")
    score = score_solution(problem, path.read_text(), tmp_path, device="interpret")
    assert not score.correct
    assert score.reason == expect, score.detail


def test_missing_solution_counts_as_incorrect(tmp_path, capsys):
    out = _bench([str(PROBLEMS_DIR), "--solutions", str(tmp_path), "--only", "3_Softmax,1_Swish",
                  "--device", "interpret"], capsys)
    assert "| 3_Softmax | no | - | - | - | missing_solution |" in out
    assert out.index("3_Softmax") < out.index("1_Swish")  # --only keeps the order given
    assert "correctness rate: 0/2 = 0.00" in out and "fast_1.0: 0.00" in out
    assert "mean speedup (geomean over correct tasks, slowdowns included): 0.00x" in out


@pytest.mark.gpu
def test_honest_solutions_are_timed_on_cuda(capsys):
    report = json.loads(_bench([str(PROBLEMS_DIR), "--solutions", str(SOLUTIONS_DIR), "--device", "cuda",
                                "--json"], capsys))
    assert report["metrics"]["correctness_rate"] == 1.0 and report["metrics"]["timed"]
    assert all(t["speedup"] is not None and t["speedup"] > 0 for t in report["tasks"])
    assert report["metrics"]["fast_p"]["1.0"] is not None
