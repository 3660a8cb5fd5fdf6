"""Interpreter stand-ins for reductions and scans with a kernel's own combine function (tl.sort, a
segmented scan: combine.py) and for the autotuner's benchmarking (every config ties, the first is
kept). Exercised in a child process, as the referee's workers use them.
"""


import pytest
from referee_helpers import run_json_child

CHILD = r'''
import json, os
os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl
from kernelsmith.referee.backend.interpret import InterpretBackend
from kernelsmith.interpreter import standins
backend = InterpretBackend()
backend.init_context()
out = {}


@triton.jit
def _keyed_add(x, y):
    # Segmented count (Liger-Kernel's MoE routing): associative, not commutative.
    key_mask: tl.constexpr = 0xFFFF0000
    kx = x & key_mask
    return tl.where(kx == (y & key_mask), x + y - kx, y)


@triton.jit
def _first(a, b):
    return a


@triton.jit
def _pick_larger(a, b):
    # A Python `if` on the values: compiled Triton runs it on scalars; blocks cannot take it.
    if a > b:
        return a
    return b


@triton.jit
def sort_scan(x_ptr, keys_ptr, sorted_ptr, runs_ptr, first_ptr, larger_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(sorted_ptr + offs, tl.sort(x, 0))
    keys = tl.load(keys_ptr + offs).to(tl.uint32)
    tl.store(runs_ptr + offs, tl.associative_scan(keys, 0, _keyed_add))
    tl.store(first_ptr, tl.reduce(x, 0, _first))
    tl.store(larger_ptr, tl.reduce(x, 0, _pick_larger))


g = torch.Generator().manual_seed(0)
x = torch.randint(-1000, 1000, (256,), generator=g, dtype=torch.int32)
experts = torch.sort(torch.randint(0, 5, (256,), generator=g)).values
keys = ((experts << 16) | 1).to(torch.int32)
srt, runs = torch.empty_like(x), torch.empty_like(keys)
first, larger = torch.empty(1, dtype=torch.int32), torch.empty(1, dtype=torch.int32)
sort_scan[(1,)](x, keys, srt, runs, first, larger, N=256)
expected_runs = torch.cat([torch.arange(1, int((experts == e).sum()) + 1) for e in experts.unique()])
out["sort"] = torch.equal(srt, torch.sort(x).values)
out["segmented_scan"] = torch.equal((runs & 0xFFFF).long(), expected_runs)
out["first"] = int(first) == int(x[0])
out["larger"] = int(larger) == int(x.max())
out["combine_used"] = sorted(standins.USED)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}),
                          triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def tuned(x_ptr, y_ptr, runs_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)
    tl.atomic_add(runs_ptr, 1)


w, v, runs = torch.randn(100), torch.empty(100), torch.zeros(1, dtype=torch.int32)
tuned[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](w, v, runs, 100)
out["autotune_output"] = bool(torch.equal(v, w * 2))
out["autotune_best"] = tuned.best_config.kwargs["BLOCK"]
out["autotune_programs"] = int(runs)
out["info"] = backend.info()
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def child():
    return run_json_child(CHILD)


def test_sort_and_a_segmented_scan_run_on_whole_blocks(child):
    assert child["sort"] and child["segmented_scan"]
    assert "block combine functions" in child["combine_used"]


def test_combine_order_is_kept_and_a_scalar_only_function_falls_back(child):
    assert child["first"]  # reduce(x, _first) is x[0]: pairs combine left to right
    assert child["larger"]  # `if a > b` cannot take blocks: the interpreter's own path ran


def test_the_autotuner_keeps_its_first_config_and_benchmarks_nothing(child):
    assert child["autotune_output"] and child["autotune_best"] == 16
    assert child["autotune_programs"] == 7  # one launch of cdiv(100, 16) programs, no benchmark runs
    assert "autotune: first config" in child["info"]["stand_ins"]
