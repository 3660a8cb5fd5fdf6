"""A local fixture repository (git) and target yaml for scan / checkout / verify tests (helpers; a
unique module name, since `conftest` is ambiguous when several test folders are collected)."""

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

OPS = '''\
"""Scale a list (the fixture's operator)."""


# kernelsmith: hotspot
def scale(xs, k):
    """Every element times k."""
    return [x * k for x in xs]
'''

KERNELS = '''\
import triton
import triton.language as tl


# kernelsmith: hotspot
@triton.jit
def _add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
'''

TESTS = '''\
from eng.ops import scale


def test_scale_ints():
    assert scale([1, 2, 3], 2) == [2, 4, 6]


def test_scale_empty():
    assert scale([], 5) == []


def test_scale_negative():
    assert scale([-1, 4], -3) == [3, -12]
'''

BENCH = '''\
import sys
import time

sys.path.insert(0, ".")
from eng.ops import scale  # noqa: E402

t = time.perf_counter()
for _ in range(200):
    scale(list(range(1000)), 3)
print(f"scale: {(time.perf_counter() - t) * 5:.3f} ms per call")
'''

HARNESS = '''\
import torch

SHAPES = [{"n": 8}]
CPU_SHAPES = [{"n": 4}]


def make_inputs(shape, device, seed):
    return {"xs": list(range(shape["n"])), "k": 2}


def reference(xs, k):
    return torch.tensor([x * k for x in xs])
'''


def git(cwd, *args):
    """Run git with a fixed identity (test repositories only)."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def fixture_repo(tmp_path):
    """A git repository with a marked operator, a Triton kernel, an unharnessed mark, tests, a bench."""
    repo = tmp_path / "upstream"
    # Its own pytest config, as real repositories have: pytest's rootdir (and so the test ids verify
    # compares) must not depend on what lies in the folders above the checkout (/tmp).
    write(repo, "pytest.ini", "[pytest]\n")
    write(repo, "eng/__init__.py", "")
    write(repo, "eng/ops.py", OPS)
    write(repo, "eng/kernels.py", KERNELS)
    write(repo, "eng/extra.py", "# kernelsmith: hotspot\ndef unharnessed():\n    return 1\n")
    write(repo, "tests/test_ops.py", TESTS)
    write(repo, "bench/bench_ops.py", BENCH)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def make_target(tmp_path: Path, repo: Path, **op_fields) -> Path:
    """targets/fix.yaml with one operator `scale` over `repo` (fields override the defaults)."""
    folder = tmp_path / "targets"
    write(folder, "fix/scale.py", HARNESS)
    op = {"name": "scale", "file": "eng/ops.py", "entry": "scale", "harness": "fix/scale.py",
          "test": "python -m pytest -q -p no:hypothesispytest tests/test_ops.py"}
    op.update(op_fields)
    lines = [f"repo: test/fix\nclone_url: {repo}\nbase: main\noperators:\n  - name: {op.pop('name')}"]
    lines += [f"    {k}: {json.dumps(v)}" for k, v in op.items()]
    return write(folder, "fix.yaml", "\n".join(lines) + "\n")


def make_run(tmp_path: Path, yaml_path: Path, checkout: Path, base_sha: str, winner: str | None,
             op: str = "scale", file: str = "eng/ops.py") -> Path:
    """A run directory as `optimize` leaves it (run.json, result.json, report.md, winner/)."""
    run = tmp_path / "run"
    (run / "winner").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({
        "target": str(yaml_path), "op": op, "repo": "test/fix", "file": file, "checkout": str(checkout),
        "base_sha": base_sha, "seed": 0, "budget": 1, "minutes": None, "mutator": "params",
        "device": "interpret", "gpus": [None], "argv": [], "versions": {},
        "created_at": "2026-01-01T00:00:00Z"}))
    (run / "result.json").write_text(json.dumps({"geomean_speedup": None, "timed": False, "accepted": 1,
                                                 "evaluations": 1, "winner": {"id": 1}}))
    (run / "report.md").write_text("# kernelsmith: scale\n\nSome findings.\n\n## Details\n\nkeep me\n")
    if winner is not None:
        (run / "winner" / Path(file).name).write_text(textwrap.dedent(winner))
    return run
