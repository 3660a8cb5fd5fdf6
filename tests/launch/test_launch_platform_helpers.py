"""Launch values computed in helpers of the operator's own file, behind platform switches and thin
wrappers, read through the finder's and the launch evaluator's plain entry points (discover, relevant,
LaunchEvaluator) on tests/launch/data/helper_repo/src/kitpkg/ops/divergence.py: warps from a helper
of the file (`32 if device_name() == "xpu" else warps_for(BLOCK_SIZE)`), a tile cap set per platform
at module level, the launcher behind an autograd Function and a wrapper calling `Function.apply`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelsmith.launch.evaluate import LaunchEvaluator
from kernelsmith.launch.tunables import discover, relevant
from kernelsmith.launch.values import Unsupported

OPS = Path(__file__).parent / "data" / "helper_repo" / "src" / "kitpkg" / "ops"
CODE = (OPS / "divergence.py").read_text()
X = {"x": torch.empty(3, 50, device="meta")}  # a tile of 64: below every step of the warp ladder
LADDER = ["warps_for:warps#0", "warps_for:if[0]", "warps_for:warps#1", "warps_for:if[1]",
          "warps_for:warps#2", "warps_for:if[2]", "warps_for:warps#3"]


def _lines(code: str, tunables) -> set[str]:
    """The source lines the tunables' literals are on."""
    lines = code.splitlines()
    data = code.encode()
    return {lines[data[:s].count(b"\n")].strip() for t in tunables for s, e in t.sites if s < e}


def test_no_knob_on_a_branch_that_never_runs_on_cuda():
    tunables = relevant(discover(CODE), CODE, "row_sum")
    assert _lines(CODE, tunables) == {
        "warps = 4", "if tile >= 32768:", "warps = 32 if not on_rocm() else 16", "elif tile >= 8192:",
        "warps = 16", "elif tile >= 2048:", "warps = 8", "MAX_FUSED_SIZE = 65536 // 4"}
    assert [t.key for t in tunables if t.key.startswith("warps_for:")] == LADDER


@pytest.mark.parametrize("entry", ["row_sum_of", "RowSum.apply", "RowSum.forward"])
def test_the_launcher_behind_a_thin_wrapper_is_reached(entry):
    assert [t.key for t in relevant(discover(CODE), CODE, entry)] == [
        t.key for t in relevant(discover(CODE), CODE, "row_sum")]


@pytest.mark.parametrize("entry", ["row_sum", "row_sum_of", "RowSum.apply"])
def test_launches_through_the_helper_and_the_wrapper(entry):
    """The evaluator follows the entry's calls into the launcher and the helper: a ladder step the
    shape never takes launches what the base does (one measurement for both); one it takes does not."""
    tunables = relevant(discover(CODE), CODE, entry)
    ev = LaunchEvaluator(CODE, tunables, entry, cuda=True)
    base = {t.key: t.base for t in tunables}
    (path,) = ev.signature(base, X)
    launch = next(item for item in path if item[0] == "_row_sum_kernel")
    assert dict(launch[1]) == {"BLOCK_SIZE": 64, "num_stages": 3, "num_warps": 4}
    assert ev.signature({**base, "warps_for:warps#3": 2}, X) == ev.signature(base, X)  # >= 2048 only
    (path,) = ev.signature({**base, "warps_for:warps#0": 2}, X)
    assert dict(next(item for item in path if item[0] == "_row_sum_kernel")[1])["num_warps"] == 2
    # The cap `65536 // 4` is one knob whose value replaces the whole expression.
    (path,) = ev.signature({**base, "None:MAX_FUSED_SIZE": 256}, X)
    assert dict(next(item for item in path if item[0] == "_row_sum_kernel")[1])["BLOCK_SIZE"] == 64
    (path,) = ev.signature({**base, "None:MAX_FUSED_SIZE": 32}, X)  # 32 < 64: the cap bites
    assert dict(next(item for item in path if item[0] == "_row_sum_kernel")[1])["BLOCK_SIZE"] == 32


@pytest.mark.parametrize("tail", [
    # the launcher in a loop: its launches cannot be told per iteration
    '''def twice(x):
    for _ in range(2):
        row_sum(x)
''',
    # the launcher held as a value and called through it
    '''def through_a_value(x):
    fn = row_sum
    return fn(x)
''',
])
def test_a_helper_holding_a_knob_out_of_sight_gives_no_signature(tail):
    code = CODE + "\n\n" + tail
    entry = tail.split("(")[0].removeprefix("def ")
    tunables = relevant(discover(code), code, entry)
    assert tunables  # the launcher's knobs are reached
    with pytest.raises(Unsupported):
        LaunchEvaluator(code, tunables, entry).signature({t.key: t.base for t in tunables}, X)
