"""The optimize loop's CPU precompiler reaches a KernelBench solution's kernels through `bind`."""

from kernelsmith.kernelbench.adapter import kernelbench_task
from kernelsmith.kernelbench.problem import read_problem
from kernelsmith.kernelbench.problems import PROBLEMS_DIR, SOLUTIONS_DIR
from kernelsmith.search.precompile import Precompiler


def test_solution_kernels_compile_for_the_gpu_target(tmp_path, monkeypatch):
    cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    task = kernelbench_task(read_problem(PROBLEMS_DIR / "1_Swish.py"), tmp_path / "task")
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "work")
    try:
        pc.submit(2, (SOLUTIONS_DIR / "1_Swish.py").read_text())
        reply = pc.futures[2].result(timeout=180)
    finally:
        pc.close()
    assert reply["ok"], reply
    assert list(cache.rglob("_swish_kernel.cubin"))
