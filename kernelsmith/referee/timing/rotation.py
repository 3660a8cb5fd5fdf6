"""Input and output buffers that the functions of one interleaved measurement use in rotation.

On the H200 an identical call ran up to ~1.1% slower, on every take, on another copy of the same
inputs (LMDeploy's sampler at 1 x 151,936; dev/probes/placement_probe.py): where the buffers sit moves
the time, not only the code. With a private copy per function, that difference sat between base and
candidate, and between the base and its A/A copy (the strays `aa_bias` had to bound).
Here each function uses every function's copy of the tensors in turn, so each ratio compares the
same mix of placements.

Written tensors (outputs, in-place buffers) rotate too: the calls of one repetition use different
copies, in-place buffers are restored before every call (timing.time_loop), and the candidate's
last output is read from the copy it wrote and cloned before any other call runs. Read-only inputs
are shared, so one function's write would reach the others: the correctness trials reject a
candidate that modifies them (input_mutation) before it is timed, and `changed` checks every copy
again after the timing. Non-tensor values stay with their function.

A shape whose copies do not fit the device's free memory (memory.py) gets fewer copies than
functions: each function still uses every copy of every set in turn, but some calls of one
repetition share a copy, so the loop clones the candidate's output before another call reuses its
copy (`next_copy`).
"""

from __future__ import annotations

import math

import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.input_cache import fresh_copy


def _values(inputs: dict) -> dict:
    """A private copy of the non-tensor values of an inputs dict."""
    return fresh_copy({k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)})


class Rotation:
    """`copies` copies of every input set (default: one per function), each function's own
    non-tensor values, and the calls' views over all the copies."""

    def __init__(self, originals: list[dict], n_fns: int, copies: int | None = None):
        n = n_fns if copies is None else max(1, min(int(copies), n_fns))
        self.own = [[fresh_copy(s) for s in originals] for _ in range(n)]  # [copy][set]
        self.values = [[_values(s) for s in originals] for _ in range(n_fns)]  # [fn][set]
        self.calls = [0] * n_fns
        # views[fn][copy][set]: copy's tensors, fn's own other values.
        self.views = [[[{k: (self.own[c][s][k] if isinstance(v, torch.Tensor) else self.values[j][s][k])
                         for k, v in originals[s].items()}
                        for s in range(len(originals))] for c in range(n)] for j in range(n_fns)]

    @property
    def copies(self) -> int:
        """How many copies of each set there are."""
        return len(self.own)

    def next_copy(self, j: int) -> int:
        """The copy function `j`'s next call uses."""
        n_sets, n = len(self.own[0]), len(self.own)
        k = self.calls[j]
        # Every n calls in a row use n different copies, and every lcm(sets, n) calls the copies
        # shift by one against the sets: each run of sets * n calls uses every copy of every set
        # once (with 3 sets and 3 copies a plain k % n would pair each set with one copy). While
        # the counts agree (`align`), the calls of one repetition use different copies (all of
        # them where there are as many copies as functions).
        return (j + k + k // math.lcm(n_sets, n)) % n

    def peek(self, j: int) -> tuple[int, dict]:
        """(input set, inputs) of function `j`'s next call, without taking it."""
        k = self.calls[j] % len(self.own[0])
        return k, self.views[j][self.next_copy(j)][k]

    def inputs(self, j: int) -> tuple[int, dict]:
        """(input set, inputs) of function `j`'s next call, taken."""
        out = self.peek(j)
        self.calls[j] += 1
        return out

    def align(self) -> None:
        """Bring every function's count of calls to the furthest one's (after some were called
        alone: the probe), so the calls of one repetition share an input set and use different
        copies again."""
        self.calls = [max(self.calls)] * len(self.calls)

    def changed(self, originals: list[dict], written: set[str]) -> list[str]:
        """The read-only tensors (not in `written`) that differ from `originals` on some copy."""
        return sorted({k for copies in self.own for s, inputs in enumerate(copies)
                       for k, v in C.tensors_of(inputs).items()
                       if k not in written and not C.same_bits(v, originals[s][k])})
