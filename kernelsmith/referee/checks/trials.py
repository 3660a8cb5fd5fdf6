"""Trial helpers of the worker's correctness checks: seed-dependent sizes and fresh outputs."""

from __future__ import annotations

import torch

from kernelsmith.referee.checks import correctness as C


def _fitting(arena: dict, cand: dict) -> dict:
    """The arena's tensors whose shape, dtype and strides `cand`'s tensor of that name has."""
    return {n: b for n, b in arena.items() if isinstance(cand.get(n), torch.Tensor)
            and (cand[n].shape, cand[n].dtype, cand[n].stride()) == (b.shape, b.dtype, b.stride())}


# What the redraws of one shape may generate in all: a bound by size, not by wall time, so the draw
# taken (and the inputs a candidate is checked on) depends on the shape and seed, never on load.
REDRAW_BYTES = 8 << 30


def fitting_draw(arena: dict, inputs: dict, redraw, tries: int = 64, budget_bytes: int = REDRAW_BYTES) -> int:
    """Which draw fits the previous trial's storage `arena` best: 0 for `inputs`, else k.

    Same storage, new values: a result cached by address shows up as stale output. Sizes may
    follow the seed (a paged cache whose block count follows random lengths): redraws
    (`redraw(k)`, up to `tries`, and no more than `budget_bytes` of inputs drawn) look for inputs
    that fit the arena whole.
    """
    fits, taken = len(_fitting(arena, inputs)), 0
    drawn = 0
    for k in range(1, tries):
        if fits == len(arena) or drawn > budget_bytes:
            break
        cand = redraw(k)
        drawn += sum(t.numel() * t.element_size() for t in cand.values() if isinstance(t, torch.Tensor))
        n = len(_fitting(arena, cand))
        if n > fits:
            fits, taken = n, k
    return taken


def into_arena(arena: dict, inputs: dict) -> dict:
    """`inputs` with the values of each tensor that fits moved into the arena's storage."""
    fits = _fitting(arena, inputs)
    for name, buf in fits.items():
        buf.copy_(inputs[name])
    return {**inputs, **fits}


class FreshOutputs:
    """Outputs must be fresh per call (`reused_output`).

    Keeps the last call's returned outputs alive, as a caller keeps a result, so an honest
    allocator cannot hand their storage out again; an output sharing storage with them, or with a
    tensor the function's module keeps in its globals, is a finding. It is reported after the
    correctness checks, so a pointer cache is still named `cached_result`.
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        """Forget held outputs and findings (at the start and end of an evaluation)."""
        self.fn, self.held, self.finding = None, [], None

    def note(self, fn, outs: tuple, inputs: dict) -> None:
        """Check one call's returned outputs of `fn` on `inputs`, then hold them."""
        if fn is not self.fn:
            self.fn, self.held = fn, []
        mine = {t.untyped_storage().data_ptr() for t in C.tensors_of(inputs).values()}
        earlier = {t.untyped_storage().data_ptr() for t in self.held}
        kept = C.kept_storages(getattr(fn, "__globals__", None))
        for i, o in enumerate(outs):
            if type(o) is not torch.Tensor or o.numel() == 0:
                continue
            ptr = o.untyped_storage().data_ptr()
            if ptr in mine:
                continue  # the caller's own buffer, handed back (an `out=` argument)
            if (ptr in earlier or ptr in kept) and self.finding is None:
                whose = ("an earlier call's output" if ptr in earlier
                         else "a tensor its module keeps between calls")
                self.finding = (f"output {i} shares storage with {whose}: outputs must be fresh per call "
                                "(a caller keeping an earlier result would see it change)")
        self.held = [o for o in outs if type(o) is torch.Tensor]
