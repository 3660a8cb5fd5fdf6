"""A copy of the bundled demo target (targets/demo.yaml, examples/miniserve) with hostile files added,
for the end-to-end security tests: the target's own repository content is what attacks."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from kernelsmith import sandbox

ROOT = Path(__file__).resolve().parents[2]
OP_FILE = "miniserve/kernels/rms_norm.py"
needs_sandbox = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")


def demo_target(tmp_path: Path, files: dict[str, str] | None = None, setup: str | None = None) -> Path:
    """targets/demo.yaml copied under tmp_path with its clone_url a copy of examples/miniserve that
    also holds `files` (path -> text), and `setup` when given; returns the yaml's path. The GPU
    benchmark commands are left out (the tests here run on CPU)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "miniserve", src,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    for rel, text in (files or {}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    tdir = tmp_path / "targets"
    shutil.copytree(ROOT / "targets" / "demo", tdir / "demo")
    text = (ROOT / "targets" / "demo.yaml").read_text().replace("../examples/miniserve", str(src))
    text = "".join(ln for ln in text.splitlines(keepends=True) if not ln.strip().startswith("benchmark:"))
    if setup is not None:
        text = text.replace("base: main\n", f"base: main\nsetup: {json.dumps(setup)}\n")
    yaml_path = tdir / "demo.yaml"
    yaml_path.write_text(text)
    return yaml_path


def python_first_on_path(monkeypatch) -> None:
    """The upstream commands say `python`: this interpreter (with torch and triton) is the one found."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    monkeypatch.setenv("PATH", path)


def make_run(tmp_path: Path, yaml_path: Path, checkout: Path, base_sha: str, winner: str) -> Path:
    """A run directory as `optimize` leaves it for the demo's rms_norm, with `winner` as its winner."""
    run = tmp_path / "run"
    (run / "winner").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({
        "target": str(yaml_path), "op": "rms_norm", "repo": "kernelsmith/demo", "file": OP_FILE,
        "checkout": str(checkout), "base_sha": base_sha, "seed": 0, "budget": 1, "minutes": None,
        "mutator": "params", "device": "interpret", "gpus": [None], "argv": [], "versions": {},
        "created_at": "2026-01-01T00:00:00Z"}))
    (run / "result.json").write_text(json.dumps({"geomean_speedup": None, "timed": False, "accepted": 1,
                                                 "evaluations": 1, "winner": {"id": 1}}))
    (run / "winner" / Path(OP_FILE).name).write_text(winner)
    return run
