"""`kernelsmith harness check`: is a harness sound before any search runs on it?

The checks that run the harness and the base happen in a sandboxed child process (onboard/harness_probe.py,
started by harness/box.py: the harness is target code, never imported here); then the base goes
through the real referee, as `evaluate` would run it. Each problem is one line naming the check
and the likely fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PROBE_TIMEOUT_S = 900


@dataclass
class Report:
    """What `harness check` found: problems (check, message, fix) and how many checks passed."""

    problems: list[list[str]] = field(default_factory=list)
    passed: int = 0
    device: str = ""
    sandboxed: bool = True
    child_failed: bool = False  # the probe's process crashed or hung: nothing else is checked

    @property
    def sound(self) -> bool:
        """True when no check found a problem."""
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem, then a summary line (after a warning when run without the sandbox)."""
        from kernelsmith.harness.box import shown
        from kernelsmith.sandbox import NO_SANDBOX_NOTE

        out = [f"problem [{shown(check)}] {shown(message)} -> fix: {shown(fix)}"
               for check, message, fix in self.problems]
        if not self.sandboxed:
            out.append(f"warning: {NO_SANDBOX_NOTE}")
        state = "sound" if self.sound else f"{len(self.problems)} problem(s)"
        out.append(f"harness check ({self.device}): {state}; {self.passed} check(s) passed")
        return out


def run_probe(task, device: str) -> Report:
    """The harness and base checks, in a sandboxed child process with the referee's environment;
    ConfigError when the harness does not load."""
    from kernelsmith import sandbox
    from kernelsmith.harness.box import HarnessChildError, checked_probe, run_child

    op = task.operator
    spec = {"root": str(task.root), "file": op.file, "entry": op.entry, "harness": str(op.harness),
            "variant": op.variant, "stubs": {k: str(v) for k, v in (task.target.stubs or {}).items()},
            "device": device}
    report = Report([], 0, device, sandboxed=sandbox.enabled())
    try:
        answer = run_child(spec, harness=op.harness, cwd=task.root, device=device, timeout_s=PROBE_TIMEOUT_S,
                           what="harness checks")
        report.problems, report.passed = checked_probe(answer, op.harness)
    except HarnessChildError as e:
        fix = ("smaller CPU_SHAPES (the interpreter runs one program at a time), and no waiting in the "
               "harness" if e.timed_out else "run the harness's make_inputs and reference by hand to see why")
        report.problems.append(["harness", str(e), fix])
        report.child_failed = True
    return report


def check_harness(task, device: str = "auto", timeout_s: float | None = None) -> Report:
    """Every check of `harness check` on `task`, the base judged by the real referee last."""
    from kernelsmith.referee import Referee
    from kernelsmith.referee.backend import resolve_device
    from kernelsmith.referee.checks.diagnose import base_failure

    resolved = resolve_device(device)
    report = run_probe(task, resolved)
    if report.child_failed or any(check == "reference" and "not written" in msg
                                  for check, msg, _ in report.problems):
        return report  # the referee would only repeat it
    # One verdict: no spare worker (interpret's default) booting beside it, never to be used.
    with Referee(task, device=resolved, seed=0, timeout_s=timeout_s, prefork=False) as referee:
        try:
            verdict = referee.evaluate(None, timing="none")
        except Exception as e:  # noqa: BLE001 - a RefereeError: the worker cannot load the task
            last = (str(e).strip().splitlines() or [type(e).__name__])[-1]
            report.problems.append(["referee", last, "see `kernelsmith evaluate`"])
            return report
    if verdict.accepted:
        report.passed += 1
    else:
        lines = base_failure(verdict).splitlines()
        fix = next((ln.split("likely fix: ", 1)[1] for ln in lines if "likely fix: " in ln), "")
        what = next((ln.split("what: ", 1)[1] for ln in lines if "what: " in ln), verdict.reason or "")
        report.problems.append([f"referee: {verdict.reason}", f"the referee rejects the base: {what}", fix])
    return report
