"""Structural rewrites of Triton kernels found from the syntax tree, one transformation per module.

Each transformation takes a launch `Site` (analysis.py) and its knob values and returns a `Rewrite`
(the new file and one sentence saying what changed), or raises `Decline` with the reason it cannot
show the change is valid. The `rewrite` mutator (../rewrite.py) turns them into proposals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARK = "# kernelsmith rewrite:"  # a comment every rewritten kernel carries (no rewrite of a rewrite)


@dataclass
class Rewrite:
    """One transformed file."""

    transform: str  # widen | coarsen | persistent | merge_loads | hoist
    kernel: str
    code: str
    explain: str  # one sentence for the reviewer (explain.py; report.md shows it above the diff)
    axis: int | None = None
    knobs: dict[str, int] = field(default_factory=dict)
