"""The search's seeds: one random generator per proposal slot, and the offset of the final
re-measurement's inputs (both loop.py and finish.py use them; kept apart so neither imports the other)."""

from __future__ import annotations

import hashlib
import random

FINAL_SEED_OFFSET = 1_000_003  # the winner is re-measured on inputs no earlier evaluation saw


def slot_rng(seed: int, generation: int, slot: int) -> random.Random:
    """The random generator of one proposal slot (independent of evaluation order)."""
    digest = hashlib.sha256(f"{seed}/{generation}/{slot}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))
