"""Run directories with real archives (Archive API, Verdict JSON) for the export tests."""

import json
from pathlib import Path

import pytest

from kernelsmith.referee.verdict import Verdict
from kernelsmith.search.archive import Archive, NewRow
from kernelsmith.search.edits import format_edit

ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = ROOT / "targets" / "demo.yaml"
CHECKOUT = ROOT / "examples" / "miniserve"
OP_FILE = "miniserve/kernels/rms_norm.py"
BASE = (CHECKOUT / OP_FILE).read_text()


def verdict(accepted=True, speedup=None, noisy=False, reason=None):
    """A verdict as the referee writes it: timed when a speedup is given."""
    timed = speedup is not None
    shapes = [{"shape": {"tokens": 3, "hidden": 256, "dtype": "float16"}, "max_abs_err": 0.0,
               "baseline_ms": 1.0 if timed else None, "candidate_ms": 1.0 / speedup if timed else None,
               "speedup": speedup, "ci95": [speedup * 0.99, speedup * 1.01] if timed else None}]
    v = Verdict(accepted=accepted, correct=accepted, violations=[] if accepted else [reason or "incorrect"],
                device={"name": "NVIDIA H200" if timed else "Triton interpreter (CPU)"}, shapes=shapes,
                geomean_speedup=speedup, timed=timed,
                timing={"metric": "device" if timed else None, "aa_ratio": 1.001 if timed else None,
                        "noisy": noisy if timed else None})
    return v.finalize().to_json()


def variant(warps: int, extra: str = "") -> str:
    """The base rms_norm file with another num_warps (a params-style edit)."""
    code = BASE.replace("BLOCK_N=BLOCK_N, num_warps=1)", f"BLOCK_N=BLOCK_N, num_warps={warps})", 1)
    assert code != BASE
    return code + extra


def add(archive, code, parent, mutator="params", v=None, status=None, response=None, insp=None):
    """Add a row the way the engine does: pending, then the verdict."""
    parent_code = archive.get(parent)["code"]
    if response is None and code is not None:
        key = "BLOCK_N=BLOCK_N, num_warps="
        old = next(ln for ln in parent_code.splitlines() if key in ln)
        new = next(ln for ln in code.splitlines() if key in ln)
        response = format_edit(old + "\n", new + "\n")
    cid = archive.add(NewRow(code, mutator=mutator, parent_id=parent, response=response,
                      inspiration_ids=insp or [], status=status or "pending",
                      prompt="[system]\n...\n\n[user]\n..." if mutator == "llm" else None))
    if v is not None and status != "duplicate":
        archive.set_verdict(cid, v, Verdict.from_json(v).feedback())
    return cid


def write_run(path: Path, device: str, mutator: str) -> Path:
    """run.json as the engine writes it (the keys docs/design.md lists)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "run.json").write_text(json.dumps({
        "target": str(DEMO_YAML), "op": "rms_norm", "repo": "kernelsmith/demo", "file": OP_FILE,
        "checkout": str(CHECKOUT), "base_sha": "0" * 40, "seed": 0, "budget": 10, "minutes": None,
        "mutator": mutator, "device": device, "gpus": [0] if device == "cuda" else [None], "argv": [],
        "versions": {}, "created_at": "2026-11-30T00:00:00+00:00"}))
    return path


@pytest.fixture
def timed_run(tmp_path):
    """A GPU-style run: ids and what the rules must do with each are in `expect`."""
    run = write_run(tmp_path / "timed", "cuda", "all")
    with Archive(run / "archive.sqlite") as a:
        base = a.add(NewRow(BASE, mutator="base", status="evaluated", verdict=verdict(True, 1.0)))
        ids = {"base": base}
        ids["first"] = add(a, variant(4), base, v=verdict(True, 1.10))
        ids["first_rejected"] = add(a, variant(2, "\nBROKEN = 1\n"), base, mutator="llm",
                                    v=verdict(False, reason="incorrect"),
                                    response="<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n")
        ids["improve"] = add(a, variant(8), ids["first"], mutator="llm", v=verdict(True, 1.30),
                             insp=[ids["first_rejected"]])
        ids["not_faster"] = add(a, variant(16), ids["first"], v=verdict(True, 1.11))
        ids["parent_rejected"] = add(a, variant(32), ids["first_rejected"], v=verdict(True, 1.5))
        ids["noisy"] = add(a, variant(8, "\nNOISY = 1\n"), ids["improve"], v=verdict(True, 1.6, noisy=True))
        ids["duplicate"] = a.add(NewRow(variant(8), mutator="params", parent_id=ids["first"],
                                        status="duplicate"))
        ids["same_as_first"] = add(a, variant(4).replace("\n\n\n", "\n\n\n# same kernel, new comment\n", 1),
                                   base, v=verdict(True, 1.09))
        ids["malformed"] = a.add(NewRow(None, mutator="llm", parent_id=ids["first"], response="I cannot help",
                                 status="pending"))
        a.set_verdict(ids["malformed"], verdict(False, reason="malformed_proposal"), "malformed")
        ids["slow_first"] = add(a, variant(2), base, v=verdict(True, 0.8))
    return run, ids


@pytest.fixture
def interpreter_run(tmp_path):
    """A CPU run (no timing): only accepted first steps can be kept."""
    run = write_run(tmp_path / "cpu", "interpret", "params")
    with Archive(run / "archive.sqlite") as a:
        base = a.add(NewRow(BASE, mutator="base", status="evaluated", verdict=verdict(True)))
        ids = {"base": base}
        ids["first"] = add(a, variant(4), base, v=verdict(True))
        ids["later"] = add(a, variant(8), ids["first"], v=verdict(True))
        ids["rejected"] = add(a, variant(16), base, v=verdict(False, reason="compile_error"))
    return run, ids
