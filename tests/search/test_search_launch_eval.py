"""The static launch evaluator (launch/evaluate.py) on small launchers written here: what it computes, and
where it must refuse (no signature) rather than call two different launches the same."""

from __future__ import annotations

import pytest
import torch

from kernelsmith.launch.evaluate import LaunchEvaluator
from kernelsmith.launch.tunables import discover, relevant
from kernelsmith.launch.values import Unsupported

HEAD = '''import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n), mask=i < n)


'''
X = {"x": torch.empty(1000, device="meta")}


def _evaluator(body: str, cuda: bool = True):
    code = HEAD + body
    return LaunchEvaluator(code, relevant(discover(code), code, "f"), "f", cuda=cuda), code


def _knob(ev, name: str) -> str:
    """The key of the knob whose key ends with `name`."""
    keys = [k for k, _ in ev.knob_at.values()] + [k for opts in ev.option_at.values() for _, k, _ in opts]
    return next(k for k in keys if k.endswith(name))


def test_a_grid_lambda_reads_the_launch_keywords():
    ev, _ = _evaluator('''def f(x):
    n = x.shape[0]
    BLOCK = 128
    grid = lambda META: (triton.cdiv(n, META["BLOCK"]),)
    _k[grid](x, n, BLOCK=BLOCK, num_warps=4)
''')
    block = _knob(ev, "BLOCK")
    for b in (64, 128, 1024):
        (path,) = ev.signature({block: b}, X)
        launch = path[0]
        assert launch[0] == "_k" and dict(launch[1])["BLOCK"] == b and launch[2] == ((0, -(-1000 // b)),)


def test_a_knob_through_a_stored_launcher_is_no_signature():
    """`k = _k[grid]; k(...)`: the grid (a tuple holding the knob's value) reaches an unknown call."""
    ev, _ = _evaluator('''def f(x):
    n = x.shape[0]
    BLOCK = 128
    _k[(1,)](x, n, BLOCK=BLOCK)
    again = _k[(triton.cdiv(n, BLOCK),)]
    again(x, n, 64)
''')
    assert _knob(ev, "BLOCK")
    with pytest.raises(Unsupported, match="again"):
        ev.signature({}, X)


def test_an_undecidable_test_no_knob_reaches_is_followed_both_ways():
    ev, _ = _evaluator('''def f(x, flag=None):
    n = x.shape[0]
    BLOCK = 256
    if x.is_cuda:
        BLOCK = 512
    if _mystery(x):
        n = n // 2
    _k[(1,)](x, n, BLOCK=BLOCK)


def _mystery(x):
    return True
''', cuda=False)  # off CUDA `x.is_cuda` is not decided either
    sig = ev.signature({}, X)
    assert len(sig) == 4  # two undecided tests, each followed both ways
    launches = [[item for item in path if item[0] == "_k"] for path in sig]
    assert sorted({dict(k[1])["BLOCK"] for (k,) in launches}) == [256, 512]
    # The call it cannot see into is part of every path, where it ran.
    assert all(path[0][0] == "call" for path in sig)


@pytest.mark.parametrize("body", [
    # a loop the knob's value flows through
    '''def f(x):
    num_warps = 8
    while num_warps * 32 > x.shape[0]:
        num_warps //= 2
    _k[(1,)](x, x.shape[0], BLOCK=64, num_warps=num_warps)
''',
    # a test a knob reaches that cannot be decided
    '''def f(x):
    BLOCK = 64
    if BLOCK > _limit(x):
        BLOCK = 32
    _k[(1,)](x, x.shape[0], BLOCK=BLOCK)


def _limit(x):
    return 100
''',
    # a tensor sized by a knob passed to the kernel
    '''def f(x):
    BLOCK = 64
    buf = torch.empty(BLOCK, device=x.device)
    _k[(1,)](buf, x.shape[0], BLOCK=BLOCK)
''',
])
def test_what_a_knob_reaches_and_cannot_be_followed_gives_no_signature(body):
    ev, _ = _evaluator(body)
    with pytest.raises(Unsupported):
        ev.signature({}, X)


def test_a_module_level_knob_read_outside_the_launcher_turns_the_space_off():
    code = HEAD.replace("i = tl.arange(0, BLOCK)", "i = tl.arange(0, BLOCK) + WIDTH") + '''WIDTH = 64


def f(x):
    _k[(1,)](x, x.shape[0], BLOCK=WIDTH)
'''
    tunables = relevant(discover(code), code, "f")
    assert any(t.scope is None for t in tunables)
    with pytest.raises(Unsupported, match="read outside the launcher"):
        LaunchEvaluator(code, tunables, "f")


def test_asserts_and_early_returns_a_knob_decides_are_part_of_the_signature():
    ev, _ = _evaluator('''def f(x):
    BLOCK = 1024
    assert BLOCK <= 4096
    if BLOCK >= x.shape[0]:
        return x
    _k[(1,)](x, x.shape[0], BLOCK=BLOCK)
    return x
''')
    block = _knob(ev, "BLOCK")
    small, big, too_big = (ev.signature({block: b}, X) for b in (512, 2048, 8192))
    assert small[0][0][0] == "_k" and big[0][0][0] == "return" and too_big[0][0][0] == "assert"
    assert ev.signature({block: 256}, X)[0][0][0] == "_k"
    assert ev.signature({block: 4096}, X) == big  # both return before launching: the same


def test_a_call_a_knob_decides_to_run_is_part_of_the_path():
    """`if BLOCK > 512: _log(x)`: configs that run the call and configs that do not differ, though
    they launch the same; where the deciding test cannot be evaluated, no signature."""
    ev, _ = _evaluator('''def f(x):
    BLOCK = 256
    if BLOCK > 512:
        _log(x)
    _k[(1,)](x, x.shape[0], BLOCK=min(BLOCK, 64))
    flag = BLOCK > x.shape[0] or _log(x)


def _log(x):
    print(x)
''')
    assert "f:BLOCK" in {k for k, _ in ev.knob_at.values()}
    low, high = ev.signature({"f:BLOCK": 256}, X), ev.signature({"f:BLOCK": 1024}, X)
    assert low != high and ev.signature({"f:BLOCK": 128}, X) == low
    assert [item[0] for item in low[0]] == ["_k", "call"] and [item[0] for item in high[0]] == ["call", "_k"]
    ev, _ = _evaluator('''def f(x):
    BLOCK = 256
    flag = BLOCK > _limit(x) and _log(x)
    _k[(1,)](x, x.shape[0], BLOCK=min(BLOCK, 64))
''')
    assert "f:BLOCK" in {k for k, _ in ev.knob_at.values()}
    with pytest.raises(Unsupported, match="run or not"):
        ev.signature({}, X)
