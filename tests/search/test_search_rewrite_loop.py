"""`kernelsmith optimize --mutator rewrite` end to end under the interpreter with the real referee:
rewrite proposals judged like any candidate, a resumed run going on where it stopped, and the
report's one-sentence explanation above the diff, and result.json's structured `winner.rewrites`."""

from __future__ import annotations

import json
from pathlib import Path

from kernelsmith.cli import main
from kernelsmith.search.archive import Archive
from kernelsmith.search.mutators.rewrites.explain import sentence as explain_sentence

DATA = Path(__file__).parent / "data" / "rewrite"
ARGS = [
    "optimize",
    str(DATA / "rewrite.yaml"),
    "head_scale",
    "--checkout",
    str(DATA / "src"),
    "--device",
    "interpret",
    "--no-progress",
    "--seed",
    "3",
    "--mutator",
    "rewrite",
]


def _rows(run: Path) -> list[dict]:
    with Archive(run / "archive.sqlite") as a:
        return a.all()[1:]


def test_optimize_with_rewrite_then_resume(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*ARGS, "--budget", "2", "--out", str(run)]) == 0
    first = _rows(run)
    assert [r["mutator"] for r in first] == ["rewrite", "rewrite"]
    assert all(r["accepted"] for r in first), [r["feedback"] for r in first]
    assert main([*ARGS[:-2], "--resume", "--budget", "3", "--out", str(run)]) == 0
    rows = _rows(run)
    keys = [r["params"]["key"] for r in rows]
    assert len(rows) == 3 and len(set(keys)) == 3 and rows[:2] == first
    assert keys[0].startswith("widen:_head_scale_kernel@0=4") and keys[2].startswith("coarsen:")
    result = json.loads((run / "result.json").read_text())
    winner = next(r for r in rows if r["id"] == result["winner"]["id"])
    report = (run / "report.md").read_text()
    sentence = f"**What changed:** {winner['params']['explain']}"
    assert sentence in report and report.index(sentence) < report.index("winner.diff")
    # The same rewrite as structured data for publishing (which renders its own sentence from it).
    p = winner["params"]
    assert result["winner"]["rewrites"] == [
        {"transform": p["transform"], "kernel": "_head_scale_kernel", "axis": p["axis"], "knobs": p["knobs"]}
    ]
    (rw,) = result["winner"]["rewrites"]
    assert explain_sentence(rw["transform"], rw["kernel"], rw["axis"], rw["knobs"]) == p["explain"]


def test_rewrite_and_params_together(tmp_path):
    """`all` without a model: params and rewrite proposals in one run (the llm mutator is off)."""
    run = tmp_path / "all"
    args = [a for a in ARGS if a != "rewrite"]
    args[args.index("--mutator") + 1:args.index("--mutator") + 1] = ["all"]
    assert main([*args, "--budget", "4", "--out", str(run)]) == 0
    mutators = {r["mutator"] for r in _rows(run)}
    assert mutators == {"rewrite", "params"}, mutators


def test_a_declined_kernel_is_explained_in_the_run_log(tmp_path, capsys):
    args = [a if a != "head_scale" else "histogram" for a in ARGS]
    rc = main([*args, "--budget", "2", "--out", str(tmp_path / "hist")])
    out = capsys.readouterr()
    log = out.out + out.err
    assert rc == 1 and _rows(tmp_path / "hist") == []
    assert "rewrite declined: _histogram_kernel calls tl.atomic_add" in log
    assert "search space exhausted" in log
