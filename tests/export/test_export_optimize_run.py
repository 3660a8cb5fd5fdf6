"""Export from a real (tiny) interpreter `optimize` run of the demo target."""

import json
from pathlib import Path

from kernelsmith.cli import main
from kernelsmith.export import export_runs
from kernelsmith.search.archive import Archive

ROOT = Path(__file__).resolve().parents[2]


def test_export_of_an_interpreter_params_run(tmp_path):
    run = tmp_path / "run"
    rc = main(["--targets", str(ROOT / "targets"), "optimize", "demo", "rms_norm", "--budget", "2",
               "--mutator", "params", "--device", "interpret", "--out", str(run), "--no-progress"])
    assert rc == 0
    with Archive(run / "archive.sqlite") as a:
        rows = a.all()
    children = [r for r in rows if r["mutator"] == "params"]
    assert len(children) == 2 and all(r["accepted"] and r["speedup"] is None for r in children)

    out = tmp_path / "sft.jsonl"
    summary = export_runs([run], "sft", out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    # No timing: both children are first steps; their one-line params edits of the same base are
    # near-duplicates, so one sample remains.
    assert summary["counts"]["first"] == 1 and summary["dropped"] == {"near_duplicate": 1}
    rec = records[0]
    child = next(r for r in children if r["id"] == rec["meta"]["child_id"])
    assert rec["messages"][2]["content"] == child["response"]
    assert child["response"].startswith("<<<<<<< SEARCH") and "num_warps" in child["response"]
    assert "_rms_norm_kernel" in rec["messages"][1]["content"]  # the parent (base) file is in the prompt
    assert rec["meta"]["source"]["device"] == "interpret" and rec["meta"]["gain"] is None
