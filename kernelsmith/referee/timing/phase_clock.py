"""Seconds spent per named phase: where an evaluation's or a worker's boot time went."""

from __future__ import annotations

import time


class PhaseClock:
    """Seconds spent per named phase, in order (where an evaluation's or a boot's time went)."""

    def __init__(self):
        self.phases: dict[str, float] = {}
        self._last = time.monotonic()

    def mark(self, name: str) -> None:
        """Charge the time since the previous mark to `name`."""
        now = time.monotonic()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self._last, 4)
        self._last = now
