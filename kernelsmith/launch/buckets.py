"""Per-shape table geometry: size buckets split at geometric midpoints, second-level cells inside
a bucket, and the row a table serves for one call's sizes (used by space.py and rendered tables)."""

from __future__ import annotations

import itertools
import math


def buckets(sizes: list[int] | None) -> tuple[list[int | None], list[int]]:
    """(limits, bucket index per shape): one bucket per distinct size, split at geometric midpoints."""
    if not sizes:
        return [None], [0] * len(sizes or [])
    distinct = sorted(set(sizes))
    limits: list[int | None] = [int(math.sqrt(a * b)) for a, b in itertools.pairwise(distinct)] + [None]
    return limits, [distinct.index(s) for s in sizes]


def cells(bucket_of: list[int], sizes2: list[int] | None, n: int) -> tuple[list[list], list[tuple[int, int]]]:
    """(second-level limits per first-level bucket, each shape's (bucket, cell)): a bucket's shapes
    split by their second-level size as `buckets` splits by the first."""
    if sizes2 is None:
        return [[None] for _ in range(n)], [(b, 0) for b in bucket_of]
    limits2: list[list] = []
    cell_of: list[tuple[int, int]] = [(0, 0)] * len(bucket_of)
    for b in range(n):
        idx = [i for i, x in enumerate(bucket_of) if x == b]
        lim, of = buckets([sizes2[i] for i in idx])
        limits2.append(lim)
        for i, c in zip(idx, of, strict=True):
            cell_of[i] = (b, c)
    return limits2, cell_of


def lookup(table: dict, size: int, size2: int | None = None) -> dict:
    """The row of a table serving one call's sizes: the first whose limits both admit them."""
    limits2 = table.get("limits2") or [None] * len(table["limits"])
    for row, lim, lim2 in zip(table["rows"], table["limits"], limits2, strict=True):
        if (lim is None or size <= lim) and (lim2 is None or size2 is None or size2 <= lim2):
            return row
    return table["rows"][-1]
