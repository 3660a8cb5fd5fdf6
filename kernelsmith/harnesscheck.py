"""`kernelsmith harness check`: is a harness sound before any search runs on it?

The checks that run the harness and the base happen in a child process (harnessprobe.py); then the
base goes through the real referee, as `evaluate` would run it. Each problem is one line naming
the check and the likely fix.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field

PROBE_TIMEOUT_S = 900


@dataclass
class Report:
    """What `harness check` found: problems (check, message, fix) and how many checks passed."""

    problems: list[list[str]] = field(default_factory=list)
    passed: int = 0
    device: str = ""

    @property
    def sound(self) -> bool:
        """True when no check found a problem."""
        return not self.problems

    def lines(self) -> list[str]:
        """One line per problem, then a summary line."""
        out = [f"problem [{check}] {message} -> fix: {fix}" for check, message, fix in self.problems]
        state = "sound" if self.sound else f"{len(self.problems)} problem(s)"
        out.append(f"harness check ({self.device}): {state}; {self.passed} check(s) passed")
        return out


def run_probe(task, device: str) -> Report:
    """The harness and base checks, in a child process with the referee's environment."""
    from .referee.process import scrubbed_env

    op = task.operator
    spec = {"root": str(task.root), "file": op.file, "entry": op.entry, "harness": str(op.harness),
            "stubs": {k: str(v) for k, v in (task.target.stubs or {}).items()}, "device": device}
    env = scrubbed_env()
    env.pop("TRITON_INTERPRET", None)
    if device == "interpret":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    try:
        proc = subprocess.run([sys.executable, "-m", "kernelsmith.harnessprobe", json.dumps(spec)],
                              capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S,
                              cwd=str(task.root))
    except subprocess.TimeoutExpired:
        return Report([["harness", f"the checks did not finish in {PROBE_TIMEOUT_S} s",
                        "smaller CPU_SHAPES (the interpreter runs one program at a time)"]], 0, device)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        data = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        return Report([["harness", f"the check process failed (exit {proc.returncode}): {tail}",
                        "run the harness's make_inputs and reference by hand to see why"]], 0, device)
    return Report(data["problems"], int(data["passed"]), device)


def check_harness(task, device: str = "auto", timeout_s: float | None = None) -> Report:
    """Every check of `harness check` on `task`, the base judged by the real referee last."""
    from .referee import Referee
    from .referee.backend import resolve_device
    from .referee.diagnose import base_failure

    resolved = resolve_device(device)
    report = run_probe(task, resolved)
    if any(check == "reference" and "not written" in msg for check, msg, _ in report.problems):
        return report  # the referee would only repeat it
    with Referee(task, device=resolved, seed=0, timeout_s=timeout_s) as referee:
        try:
            verdict = referee.evaluate(None, timing="none")
        except Exception as e:  # noqa: BLE001 - a RefereeError: the worker cannot load the task
            report.problems.append(["referee", str(e).strip().splitlines()[-1], "see `kernelsmith evaluate`"])
            return report
    if verdict.accepted:
        report.passed += 1
    else:
        lines = base_failure(verdict).splitlines()
        fix = next((ln.split("likely fix: ", 1)[1] for ln in lines if "likely fix: " in ln), "")
        what = next((ln.split("what: ", 1)[1] for ln in lines if "what: " in ln), verdict.reason or "")
        report.problems.append([f"referee: {verdict.reason}", f"the referee rejects the base: {what}", fix])
    return report
