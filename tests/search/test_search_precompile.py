"""Compile-only warm-up on CPU: a candidate's kernels land in Triton's cache for a GPU target."""

from __future__ import annotations

from pathlib import Path

from kernelsmith.config import load_target
from kernelsmith.search.precompile import Precompiler
from kernelsmith.task import make_task

ROOT = Path(__file__).resolve().parents[2]
HARNESS = """
import torch
SHAPES = [{"tokens": 2, "d": 64, "dtype": "float16"}]
OUTPUTS = ["out"]
def make_inputs(shape, device, seed):
    x = torch.randn(shape["tokens"], 2 * shape["d"]).to(device=device, dtype=getattr(torch, shape["dtype"]))
    return {"out": torch.empty(shape["tokens"], shape["d"], dtype=x.dtype, device=device), "x": x}
def reference(out, x):
    d = x.shape[-1] // 2
    return (torch.nn.functional.silu(x[:, :d].float()) * x[:, d:].float()).to(out.dtype)
"""


def test_candidate_compiles_for_the_gpu_target_without_a_gpu(tmp_path, monkeypatch):
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    yaml = tmp_path / "t.yaml"
    (tmp_path / "h.py").write_text(HARNESS)
    yaml.write_text(
        "repo: a/b\noperators:\n  - name: silu\n    file: miniserve/kernels/silu_and_mul.py\n"
        "    entry: silu_and_mul\n    harness: h.py\n"
    )
    task = make_task(load_target(yaml), "silu", ROOT / "examples" / "miniserve", "0" * 40)
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work")
    try:
        pc.submit(7, task.base_code.replace("BLOCK = 64", "BLOCK = 1024"))
        pc.submit(8, "this is not python")
        replies = [pc.futures[c].result(timeout=120) for c in (7, 8)]
        pc.submit(9, task.base_code)
        pc.wait(9, timeout=120)  # queued behind nothing: runs, and wait returns when it is done
    finally:
        pc.close()
    assert replies[0]["ok"] and not replies[1]["ok"] and "NameError" in replies[1]["error"]
    assert pc.stats["jobs"] in (2, 3) and pc.stats["failed"] == 1
    assert list(cache.rglob("_silu_and_mul_kernel.cubin"))
    assert '"arch": 90' in next(cache.rglob("_silu_and_mul_kernel.json")).read_text()
    ttirs = [p.read_text() for p in cache.rglob("_silu_and_mul_kernel.ttir")]
    assert any("end = 1024" in t for t in ttirs)  # the candidate's BLOCK
