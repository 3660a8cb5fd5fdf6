"""Helpers for the referee tests: demo tasks built from the bundled miniserve folder."""

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelsmith.onboard.task import load_task

ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = ROOT / "targets" / "demo.yaml"
MINISERVE = ROOT / "examples" / "miniserve"
CORPUS = Path(__file__).resolve().parent


def demo_task(op: str):
    """The demo operator `op`, using the bundled folder itself as the checkout (no clone)."""
    return load_task(str(DEMO_YAML), op, checkout=str(MINISERVE))


def untimed(shapes: list[dict]) -> list[dict]:
    """A verdict's per-shape results without their seconds (`check_s`: wall time, never alike twice)."""
    return [{k: v for k, v in s.items() if k != "check_s"} for s in shapes]


@contextmanager
def interpret_referee(home: Path, seed: int, op: str = "rms_norm"):
    """A demo operator's interpreter Referee with Triton's and the XDG caches under `home` (one per
    test module: a module-scoped fixture yields from this)."""
    from kernelsmith.referee import Referee

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(home / "triton"))
        mp.setenv("XDG_CACHE_HOME", str(home / "xdg"))
        ref = Referee(demo_task(op), device="interpret", seed=seed, timeout_s=90)
        try:
            yield ref
        finally:
            ref.close()


def expected_outcome(path: Path) -> str | None:
    """The violation a corpus file must be rejected with (its docstring's first word after
    CHEAT/BROKEN), or None for an honest rewrite that must be accepted."""
    first = path.read_text().split('"""')[1].strip()
    kind, _, rest = first.partition(" ")
    if kind.startswith("HONEST"):
        return None
    return rest.split(":")[0].strip()


def run_json_child(code: str) -> dict:
    """Run `code` in a fresh CPU-only Python (the interpreter backend's stand-ins patch Triton
    process-wide) and return the JSON object its last output line prints."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
