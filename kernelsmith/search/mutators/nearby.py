"""Distances between launch sets: the params mutator's start-up moves on countable spaces.

Knob space is not launch space. Clamps (`max(min(next_power_of_2(cdiv(hidden, div * 32)),
max_warps), floor)`) give a few degenerate launch sets most of the knob combinations: SGLang
gelu_and_mul's 360 combinations make 20 launch sets, and the six that launch one warp count on every
shape own 310 of them, so start-up draws that are uniform over knobs mostly measure those. On the
H200 sweeps measured (dev/notes/benchmarks.md) the fastest sets lay next to the base's in
launch terms: gelu_and_mul's best was the 2nd or 3rd of 19 by distance from the base on four sweeps,
fused_rmsnorm's the 1st of 10 on four. So where a space's launch sets can be counted, the start-up
proposals walk the untried sets nearest the best measured so far instead of drawing at random.

A launch set is its signature (twins.py: per listed shape, what each path of the launcher
launches); its coordinates are every number in it, positive ones on a log2 scale (launch values are
mostly powers of two), so halving a warp count on one shape is a step of 1.
"""

from __future__ import annotations

import math

MISMATCH = 4.0  # a coordinate one set has and the other lacks, or a different name or kernel


def coordinates(signature: tuple) -> dict[tuple, object]:
    """{position in the signature: number (log2 where positive) or a non-numeric value}."""
    out: dict[tuple, object] = {}

    def walk(x, path: tuple) -> None:
        if isinstance(x, bool):
            out[path] = float(x)
        elif isinstance(x, int | float):
            out[path] = _scaled(x)
        elif isinstance(x, tuple | list):
            for i, y in enumerate(x):
                walk(y, (*path, i))
        else:
            out[path] = repr(x)

    walk(signature, ())
    return out


def _scaled(x: int | float) -> float | str:
    """log2 of a positive number, x - 1 of another; the launcher's code text is the target's, so a
    value with no finite scale (nan, inf, an int past a float's range) is compared as text."""
    try:
        v = math.log2(x) if x > 0 else float(x) - 1.0
    except (OverflowError, ValueError):
        return repr(x)
    return v if math.isfinite(v) else repr(x)


def distance(a: dict[tuple, object], b: dict[tuple, object]) -> float:
    """L1 distance of two sets' coordinates (MISMATCH per position they disagree on in kind)."""
    total = 0.0
    for key in a.keys() | b.keys():
        x, y = a.get(key), b.get(key)
        if isinstance(x, float) and isinstance(y, float):
            total += abs(x - y)
        elif x != y:
            total += MISMATCH
    return total
