"""Kill points for fault-injection tests: `KERNELSMITH_TEST_KILL_AT=LABEL#N` makes the process
SIGKILL itself right after the N-th write labelled LABEL (archive writes: `add`, `verdict`,
`meta:<key>`, `commit`), so a test can kill a real run between any two of its writes.

Unset (every real run), `hit` is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "KERNELSMITH_TEST_KILL_AT"

_counts: dict[str, int] = {}


def _target() -> tuple[str, int] | None:
    spec = os.environ.get(ENV)
    if not spec or "#" not in spec:
        return None
    label, _, n = spec.rpartition("#")
    return (label, int(n)) if n.isdigit() else None


_TARGET = _target()


def hit(label: str) -> None:
    """Count one write labelled `label`; die by SIGKILL when it is the one the test named."""
    if _TARGET is None or label != _TARGET[0]:
        return
    _counts[label] = _counts.get(label, 0) + 1
    if _counts[label] == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)
