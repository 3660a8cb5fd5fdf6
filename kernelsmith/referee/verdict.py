"""The referee's verdict: one candidate's correctness, integrity and timing, as plain data."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

# Every named rejection (docs/design.md, Pinned details), in the order a verdict reports them first.
REJECTIONS = (
    "malformed_proposal", "duplicate", "compile_error", "import_error", "crash", "out_of_memory", "timeout",
    "protocol",
    "forged_timing",
    "tensor_subclass", "reference_call", "monkeypatch", "network_access", "file_access",
    "extra_threads", "extra_streams", "library_fallback", "no_kernel_launch", "cached_result",
    "reused_output",
    "precision_downgrade", "input_mutation", "dtype_mismatch", "shape_mismatch", "unwritten_output",
    "nondeterministic", "incorrect", "wrong_on_fresh_shape",
)

NO_TIMING_LINE = "No timing was done (no CUDA device: correctness and integrity only)."
# A candidate is a contender (gets the full measurement) when its all-shape screen geomean is at
# least this share of the best measured win so far. Replayed H200 archives (dev/notes/benchmarks.md):
# screen and full agree within ~1.3%, and at 0.99 most full measurements on a plateau changed
# nothing; 1.0 skips 5-10 per run and misses only gains of 0.3-0.7%, which the winner rule (the
# smallest change within 1%) ignores anyway.
CONTENDER_MARGIN = 1.0
# The winner rule's floor (search/evidence.py): a shape whose speedup CI lies entirely below it is
# lost, and a candidate with a lost shape cannot be the winner however fast its geomean.
SLOWEST_SHAPE = 0.98


# The rules below are the only place the search, export, chart and report read "may this number be
# trusted". Each is written once, over plain values; the Verdict methods, the search's Candidate
# (search/candidate.py) and the functions over verdict JSON below all call it.
def _noisy(timing: dict | None) -> bool:
    return bool((timing or {}).get("noisy"))


def _fully_measured(timing: dict | None) -> bool:
    return (timing or {}).get("aa_ratio") is not None


def speedup_to_trust(accepted, geomean: float | None, noisy: bool, depth: str | None) -> float | None:
    """The rule: a geomean a decision may rest on is accepted, fully timed (`depth` "full", the
    archive's timing column) and not noisy; anything else gives None."""
    return geomean if accepted and depth == "full" and not noisy else None


def aa_bias_factor(value) -> float | None:
    """A shape's `aa_bias` as read back from a verdict or result: 1.0 without one, the factor where it
    is one the referee writes (timing.aa_bias: finite, at least 1.0), None for anything else (a file
    on disk is no proof of who wrote it: such a value must neither narrow an interval nor be shown)."""
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 1.0 else None


def shape_timings_usable(accepted, timed: bool, noisy: bool) -> bool:
    """Whether per-shape speedups may be read (a table, a sweep's per-shape best): accepted, timed
    at any depth, not noisy."""
    return bool(accepted and timed and not noisy)


def _depth(timed: bool, timing: dict | None, details: dict | None) -> str:
    if not timed:
        return "none"
    depth = (details or {}).get("timing_depth") or (timing or {}).get("mode")
    if depth in ("screen_subset", "screen", "full"):
        return depth
    return "full" if _fully_measured(timing) else "screen"


def is_noisy(verdict) -> bool:
    """The A/A control strayed (timing.aa_strayed): the measurement is no evidence either way
    (a Verdict or its JSON)."""
    if isinstance(verdict, Verdict):
        return verdict.noisy
    return _noisy((verdict or {}).get("timing"))


def fully_measured(verdict) -> bool:
    """The full interleaved measurement with its A/A control was done (a Verdict or its JSON)."""
    timing = verdict.timing if isinstance(verdict, Verdict) else (verdict or {}).get("timing")
    return _fully_measured(timing)


def trusted_speedup(verdict: dict | None, depth: str | None) -> float | None:
    """`speedup_to_trust` of a verdict's JSON timed to `depth` (the archive's timing column)."""
    verdict = verdict or {}
    return speedup_to_trust(verdict.get("accepted"), verdict.get("geomean_speedup"), is_noisy(verdict), depth)


def row_trusted_speedup(row) -> float | None:
    """`speedup_to_trust` read off an archive row (a search Candidate or its columns as a dict)."""
    return speedup_to_trust(row.get("accepted"), row.get("speedup"),
                            is_noisy(row.get("verdict")), row.get("timing"))


def contender_bar(best: float) -> float:
    """The screen geomean from which a candidate is a contender, given the best measured win."""
    return CONTENDER_MARGIN * best


def is_contender(screen_geomean: float | None, bar: float | None) -> bool:
    """Whether an all-shape screen geomean earns the full measurement (no bar: nobody does)."""
    return screen_geomean is not None and bar is not None and screen_geomean >= bar


def lost_shapes(shapes: list[dict]) -> list[int]:
    """Indices of the verdict's shape entries slower than SLOWEST_SHAPE beyond their own 95% CI."""
    return [i for i, s in enumerate(shapes) if (s.get("ci95") or [None, None])[1] is not None
            and s["ci95"][1] < SLOWEST_SHAPE]


def timing_depth(verdict) -> str:
    """How deep a verdict (a Verdict or its JSON) was timed: "none", "screen_subset", "screen" or "full".

    "screen_subset" (timing/staged.py): screened on a few representative shapes only and stopped there;
    its null `geomean_speedup` must not be read as an all-shape number.
    """
    if isinstance(verdict, Verdict):
        return verdict.depth
    return _depth(verdict.get("timed"), verdict.get("timing"), verdict.get("details"))


def subset_geomean(verdict) -> float | None:
    """The geomean over the representative shapes of a "screen_subset" verdict (else None)."""
    if timing_depth(verdict) != "screen_subset":
        return None
    details = verdict.details if isinstance(verdict, Verdict) else verdict.get("details")
    return (details or {}).get("subset_geomean")


def _first_reason(names: list[str]) -> str | None:
    if not names:
        return None
    rank = {n: i for i, n in enumerate(REJECTIONS)}
    return min(names, key=lambda n: rank.get(n, len(REJECTIONS)))


# -- the verdict's schema (docs/design.md, Pinned details: Verdict JSON), written here only -----------
SHAPE_KEYS = ("shape", "max_abs_err", "baseline_ms", "candidate_ms", "speedup", "ci95",
              "device_ms", "host_ms", "bitwise_identical", "pct_roofline", "check_s")
TIMING_METHOD = "CUDA events after an L2 flush and a ~100us GPU spin"


def untimed_block() -> dict:
    """A verdict's `timing` before (or without) any timing."""
    return {"metric": None, "aa_ratio": None, "noisy": None}


def timing_block(aa_ratio: float | None, noisy: bool, mode: str) -> dict:
    """A timed verdict's `timing`: the worst A/A ratio, noisy (full mode only: a screen has no A/A
    control, so null), the depth and the method."""
    return {"metric": "device", "aa_ratio": aa_ratio, "noisy": noisy if mode == "full" else None,
            "mode": mode, "method": TIMING_METHOD}


def in_progress() -> dict:
    """The verdict a worker fills while it evaluates (Verdict.from_json reads it when done)."""
    return {"accepted": False, "correct": False, "violations": [], "error": None, "shapes": [],
            "fresh_shapes": [], "timed": False, "geomean_speedup": None,
            "timing": untimed_block(), "details": {"messages": []}}


def shape_timing_fields(*, base_ms: float, cand_ms: float, speedup: float, ci95: list[float],
                        host_ms: float | None, base_host_ms: float | None, roof_ms: float | None,
                        aa_ratio: float | None, reps: int, attempts: int,
                        base_samples: list[float], cand_samples: list[float],
                        judge_base_ms: float | None = None, aa_ci95: list[float] | None = None,
                        late_reps: list[int] | None = None, aa_bias: float | None = None) -> dict:
    """The fields one timed shape adds to its `shapes` entry (device time is the candidate's time)."""
    return {
        "baseline_ms": base_ms, "candidate_ms": cand_ms, "speedup": speedup, "ci95": ci95,
        "device_ms": cand_ms, "base_device_ms": base_ms, "host_ms": host_ms, "base_host_ms": base_host_ms,
        "pct_roofline": (100.0 * roof_ms / cand_ms) if roof_ms else None,
        "floored": roof_ms is not None and cand_ms < roof_ms,
        "aa_ratio": aa_ratio, "aa_ci95": aa_ci95, "reps": reps, "attempts": attempts,
        # A strayed A/A control dwarfed by the shape's effect (timing.aa_bias): the factor its
        # `ci95` was widened by, and the geomean's CI is too (search/evidence.py); None otherwise.
        "aa_bias": aa_bias,
        # The judge's own median of the base (timing/claims.py, check b); None in one process.
        "judge_base_ms": judge_base_ms,
        # Repetitions the host queued too late to be timed alone: timed again, or (past the
        # allowance) kept; the runner's own count, shown for diagnosis, never decides anything.
        "late_reps": {"retimed": late_reps[0], "kept": late_reps[1]} if late_reps else None,
        # Raw per-repetition times: benchmark.json (pytest-benchmark format) derives its stats from them.
        "samples_ms": {"base": [float(f"{t:.5g}") for t in base_samples],
                       "candidate": [float(f"{t:.5g}") for t in cand_samples]},
    }


@dataclass
class Verdict:
    """What the referee decided about one candidate (docs/design.md, Pinned details: Verdict JSON)."""

    accepted: bool
    correct: bool
    violations: list[str] = field(default_factory=list)
    error: str | None = None
    device: dict = field(default_factory=dict)
    shapes: list[dict] = field(default_factory=list)
    geomean_speedup: float | None = None
    timing: dict = field(default_factory=untimed_block)
    fresh_shapes: list[dict] = field(default_factory=list)
    reason: str | None = None
    timed: bool = False
    eval_s: float = 0.0
    details: dict = field(default_factory=dict)

    # -- the rules (module functions above), read off this verdict --------------------------------
    @property
    def noisy(self) -> bool:
        """The A/A control strayed past ±1% beyond its own CI (timing.aa_strayed)."""
        return _noisy(self.timing)

    @property
    def fully_measured(self) -> bool:
        """The full interleaved measurement with its A/A control was done."""
        return _fully_measured(self.timing)

    @property
    def depth(self) -> str:
        """How deep it was timed: "none", "screen_subset", "screen" or "full"."""
        return _depth(self.timed, self.timing, self.details)

    def trusted_speedup(self, depth: str | None = None) -> float | None:
        """The geomean a decision may rest on (`depth`: the archive's timing column; default its own)."""
        return speedup_to_trust(self.accepted, self.geomean_speedup, self.noisy,
                                self.depth if depth is None else depth)

    @property
    def shape_timings_usable(self) -> bool:
        """Per-shape speedups may be read: accepted, timed (any depth), not noisy."""
        return shape_timings_usable(self.accepted, self.timed, self.noisy)

    @classmethod
    def rejected(cls, reason: str, error: str | None = None, **kw) -> Verdict:
        """A verdict rejecting the candidate for one named reason."""
        return cls(accepted=False, correct=False, violations=[reason], error=error, reason=reason, **kw)

    def finalize(self) -> Verdict:
        """Derive `reason` and `accepted` from the violations (accepted = correct and clean)."""
        seen: list[str] = []
        for v in self.violations:
            if v not in seen:
                seen.append(v)
        self.violations = seen
        self.reason = _first_reason(self.violations)
        self.accepted = bool(self.correct and not self.violations and self.error is None)
        if not self.timed:
            self.geomean_speedup = None
        return self

    def to_json(self) -> dict:
        """The verdict as JSON-serialisable data (non-finite floats become null).

        Every shape carries the per-shape keys of docs/design.md; those not measured (no timing) are null.
        """
        data = _clean(asdict(self))
        data["shapes"] = [{**dict.fromkeys(SHAPE_KEYS), **s} for s in data.get("shapes") or []]
        return data

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        """Rebuild a verdict from `to_json` output; unknown keys are kept in `details`."""
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        extra = {k: v for k, v in data.items() if k not in names}
        accepted, correct = bool(known.pop("accepted", False)), bool(known.pop("correct", False))
        v = cls(accepted=accepted, correct=correct, **known)
        if extra:
            v.details = {**(v.details or {}), **extra}
        return v

    def feedback(self, limit: int = 1800) -> str:
        """Short text for the LLM: the outcome, errors, violations, per-shape timings, roofline."""
        lines = []
        if self.accepted:
            head = "ACCEPTED: correct and clean."
        else:
            head = f"REJECTED ({self.reason or 'incorrect'})."
        lines.append(head)
        if self.violations:
            lines.append("violations: " + ", ".join(self.violations))
        for msg in (self.details or {}).get("messages", [])[:6]:
            lines.append(f"- {msg}")
        if self.error:
            lines.append("error: " + _tail(self.error, 700))
        if not self.timed:
            if self.correct and not self.violations:
                lines.append(NO_TIMING_LINE)
        else:
            metric = self.timing.get("metric")
            gm = self.geomean_speedup
            sub = subset_geomean(self)
            if sub is not None:
                lines.append(f"screened on {len(self.details.get('subset_shapes') or [])} representative "
                             f"shapes only: geomean {sub:.3f}x there, too far below the best so far to "
                             "be timed on every shape (no all-shape geomean)")
            else:
                lines.append(f"geomean speedup vs base ({metric} time): "
                             + (f"{gm:.3f}x" if gm is not None else "n/a")
                             + (" [NOISY measurement, not a win]" if self.noisy else ""))
            lost = (self.details or {}).get("screen_lost_shapes")
            if lost:
                lines.append(f"slower than {SLOWEST_SHAPE}x beyond the screen's CI on {len(lost)} shape(s) "
                             "(below): it cannot be the winner, so it was not fully measured")
            for s in self.shapes:
                if s.get("candidate_ms") is None:
                    continue
                roof = s.get("pct_roofline")
                lines.append(
                    f"  {_shape_str(s['shape'])}: base {s['baseline_ms']:.4f} ms, candidate "
                    f"{s['candidate_ms']:.4f} ms, speedup {s['speedup']:.3f}x"
                    + (f", {roof:.0f}% of roofline" if roof is not None else ""))
        if self.fresh_shapes and self.correct:
            lines.append(f"checked on {len(self.fresh_shapes)} fresh shapes as well")
        text = "\n".join(lines)
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def summary(self) -> str:
        """One line: accepted/rejected, reason, speedup or 'no timing'."""
        state = "accepted" if self.accepted else f"rejected ({self.reason})"
        if not self.timed:
            return f"{state}; no timing was done"
        gm = self.geomean_speedup
        noisy = " (noisy)" if self.noisy else ""
        sub = subset_geomean(self)
        if sub is not None:
            return f"{state}; screened on representative shapes only ({sub:.3f}x there): not a contender"
        return f"{state}; geomean speedup {gm:.3f}x{noisy}" if gm is not None else state


def _shape_str(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _tail(text: str, n: int) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def _clean(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj
