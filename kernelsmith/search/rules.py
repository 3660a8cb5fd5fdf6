"""How a search spends its budget: when it stops, which screens are measured in full at once, and
which spaces are enumerated rather than searched. Every constant of these rules lives here, with
the reason for its value (docs/design.md, "The params search": spending the budget).

- A run given `--minutes` spends them: stagnation does not end it (an explicit `--stagnation`
  still does). It ends early only when its space is covered, every distinct launch measured, and
  says so (the stop reason and result.json's `space`).
- A run bounded by proposals stops on stagnation, counted in measurements that could have changed
  the best (`could_change_best`), not in proposals: a screen far behind the best, a rejection or a
  duplicate teaches the model where not to go; it is no failed attempt to improve. The count that
  stops a run grows with the space's distinct launches (launch/twins.py), and a space small enough to be
  enumerated (`ENUMERATE_LAUNCHES`) is never stopped by it.
- A screen far ahead of the best full measurement (`PROMOTE_MARGIN`) gets its full measurement in
  the same referee call even where its screen loses a shape (referee/timing/staged.py), so a run
  has a measured best from its first candidates. Not in a sweep: the baseline measures its grid as
  it always did (its best single config is one that loses no shape).
"""

from __future__ import annotations

import math

from kernelsmith.search.candidate import Candidate

# Spaces of up to this many distinct launches (launch/twins.py) are enumerated in the model's order: every
# launch set is proposed, nearest the fastest so far first (nearby.py), and stagnation never stops
# the run before the space is covered. Counted on the real targets' GPU shapes: SGLang
# merge_state 6, fused_rmsnorm 11, gelu_and_mul 20, LMDeploy apply_rotary_pos_emb 51, SGLang
# act_quant 60 are enumerated; the demo's silu_and_mul (66), LMDeploy's router (78) and sampler
# (432) are searched. At the sweep's 71 evaluations per GPU-minute on the H100 (LMDeploy's sampler),
# 64 launch sets are about a minute of measurements, the shortest budget the bot is given.
ENUMERATE_LAUNCHES = 64

# A run bounded by proposals stops once this share of its space's distinct launches (at least
# STAGNATION_MIN) was measured, in full or as a contender, without raising the best measured win by
# IMPROVEMENT. A tenth, as resolve.BLIND_SHARE and params.NEAR_SHARE: the sampler's 432 launch sets
# give 44 such measurements, where its proposals (screens below the bar included) once stopped a
# run on the H100 after 52 evaluations, 95 s of a 120 s budget, at 5.79x against the sweep's 6.53x.
STAGNATION_SHARE = 0.1
# The floor, and the count where a space has no launches to scale by (a model writing code): the
# old default's floor, so a space of a few dozen launches is not left after a handful of contenders.
STAGNATION_MIN = 12
# A new best counts only when it beats the last by this factor: re-measurements of one kernel move
# its geomean by a percent or two, so ties on a plateau must not reset the count.
IMPROVEMENT = 1.002

# A screen whose all-shape geomean reaches this multiple of the best full measurement so far (the
# base's 1.0 before any) is measured in full at once, even where its screen loses a shape (which
# otherwise skips the full measurement: referee/timing/staged.py). On an independent harness of
# LMDeploy's sampler every fast single config lost its small-vocabulary shape, so its first 46
# candidates were screened only and the run had no measured best until generation 24. Wide, because screens
# and full measurements agree within about 1.3% (the H200 archives of docs/benchmarks.md): at 25%
# a promotion is never the screen's noise, and each one raises the next promotion's bar by the same
# factor, so a run whose best gains 6x promotes at most eight times (a full measurement each).
PROMOTE_MARGIN = 1.25


def could_change_best(c: Candidate) -> bool:
    """Whether an evaluated candidate's measurement could have raised the best: measured in full, or
    a screen that reached the contender bar and lost a shape (its full measurement was skipped)."""
    if not c.accepted or not c.evaluated or c.is_base or c.verdict is None:
        return False
    return c.depth == "full" or bool((c.verdict.details or {}).get("screen_lost_shapes"))


def default_stagnation(launches: int | None, budget_hint: int, *, minutes: float | None) -> float:
    """Counted measurements without a better candidate that stop a run (see module docstring):
    none with `minutes` or on an enumerated space; else STAGNATION_SHARE of the distinct `launches`,
    at least STAGNATION_MIN; without a countable space, 3/4 of the proposal budget (at least the same)."""
    if minutes is not None or enumerates(launches):
        return math.inf
    if launches is None:
        return max(STAGNATION_MIN, (3 * budget_hint) // 4)
    return max(STAGNATION_MIN, math.ceil(STAGNATION_SHARE * launches))


def enumerates(launches: int | None) -> bool:
    """Whether a space of `launches` distinct launch sets is enumerated in the model's order."""
    return launches is not None and launches <= ENUMERATE_LAUNCHES
