"""Upstream verification of a run's winner: the operator's own test and benchmark commands, run in a
clean worktree at the base commit, then again with the winner applied.

Pass only when every test that passed on the base passes with the winner. A command that cannot
run (missing dependency, no GPU, bad command, nothing passing on the base) is "could-not-run",
never a pass. Setup, tests and benchmarks run inside the sandbox (kernelsmith/sandbox): they
cannot write the run directory, the checkout cache or the user's files, reach the network, or see
a credential.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from kernelsmith import safefs
from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.onboard.checkout import clean_worktree, run_setup, safe_env, venv_env
from kernelsmith.paths import cache_dir
from kernelsmith.runspec import RunSpec, run_file
from kernelsmith.sandbox import summary as sandbox_summary
from kernelsmith.sandbox.spawn import device_env
from kernelsmith.scratch import remove_tree

DEFAULT_TIMEOUT_S = 1800.0
TAIL_LINES = 60
MAX_WINNER_BYTES = 1 << 20  # the winner is one source file (publish takes at most 1 MiB too)
_COUNT_RE = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b")
_SUMMARY_RE = re.compile(r"(?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)|no tests ran)"
                         r".* in [\d.]+s")
_MISSING_RE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_NO_GPU_RE = re.compile(r"Torch not compiled with CUDA|No CUDA GPUs are available|Found no NVIDIA driver|"
                        r"CUDA driver version is insufficient|0 active drivers|CUDA is not available|"
                        r"requires? (a )?CUDA|needs? a CUDA device", re.I)
_BAD_CMD_RE = re.compile(r"command not found|can't open file|No such file or directory")


@dataclass
class CommandResult:
    """One command's run: exit code, time, output tail, pytest counts and per-test outcomes."""

    command: str
    exit_code: int | None
    duration: float
    output_tail: str
    timed_out: bool = False
    counts: dict | None = None
    outcomes: dict = field(default_factory=dict)
    output: str = field(default="", repr=False)

    def side(self, benchmark: CommandResult | None) -> dict:
        """This result as one side of verify.json (with its benchmark run, if any)."""
        c = self.counts or {}
        return {
            "command": self.command, "passed": c.get("passed"), "failed": c.get("failed"),
            "errors": c.get("errors"), "skipped": c.get("skipped"), "exit_code": self.exit_code,
            "duration": round(self.duration, 3), "timed_out": self.timed_out,
            "output_tail": self.output_tail,
            "benchmark": None if benchmark is None else {
                "command": benchmark.command, "output_tail": benchmark.output_tail,
                "duration": round(benchmark.duration, 3), "exit_code": benchmark.exit_code,
                "timed_out": benchmark.timed_out,
            },
        }


def parse_pytest_counts(output: str) -> dict | None:
    """passed/failed/errors/skipped/xfailed/xpassed from pytest's last summary line (None if absent)."""
    lines = [ln for ln in output.splitlines() if _SUMMARY_RE.search(ln)]
    if not lines:
        return None
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0, "xpassed": 0}
    for n, kind in _COUNT_RE.findall(lines[-1]):
        key = "errors" if kind.startswith("error") else kind
        if key in counts:
            counts[key] += int(n)
    return counts


def parse_junit(path: Path) -> dict[str, str]:
    """Test id -> "passed" | "failed" | "error" | "skipped" from a pytest junit XML file."""
    try:  # the tests wrote it: a plain file only, never read through a link they planted
        root = ET.fromstring(safefs.read_file(path, limit=64 << 20))
    except (OSError, ET.ParseError, safefs.UnsafePath):
        return {}
    outcomes = {}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        kinds = {child.tag for child in case}
        outcome = "passed"
        for tag, name in (("skipped", "skipped"), ("failure", "failed"), ("error", "error")):
            if tag in kinds:
                outcome = name
        outcomes[test_id] = outcome
    return outcomes


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-lines:])[-8000:]


def run_command(command: str, cwd: Path, env: dict, timeout_s: float,
                junit: Path | None = None, scratch: Path | None = None) -> CommandResult:
    """Run a shell command inside the "tests" sandbox (writable: `cwd` and `scratch`, where the
    junit file goes), in its own process group; kill the group on timeout."""
    from kernelsmith.sandbox.spawn import kill_group, start

    env = dict(env)
    if junit is not None:
        junit.unlink(missing_ok=True)
        env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} --junitxml={junit}".strip()
    own = scratch is None
    scratch = Path(tempfile.mkdtemp(prefix="verify-cmd-")) if own else Path(scratch)
    try:
        began = time.monotonic()
        proc = start(["/bin/sh", "-c", command], "tests", env=env, cwd=cwd, writable=[cwd], scratch=scratch,
                     keep=("KERNELSMITH_TARGET_DIR",), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                     stderr=subprocess.STDOUT, text=True, errors="replace")
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            output, _ = proc.communicate()
            output += f"\n[kernelsmith] killed after {timeout_s:.0f} s"
    finally:
        if own:
            remove_tree(str(scratch))
    result = CommandResult(command=command, exit_code=None if timed_out else proc.returncode,
                           duration=time.monotonic() - began, output_tail=_tail(output),
                           timed_out=timed_out, counts=parse_pytest_counts(output), output=output)
    if junit is not None:
        result.outcomes = parse_junit(junit)
    return result


def why_not_runnable(res: CommandResult, has_cuda: bool) -> str | None:
    """Why a base-side test command tells nothing (so the verdict is could-not-run), or None."""
    out = res.output
    missing = _MISSING_RE.search(out)
    no_gpu = not has_cuda and _NO_GPU_RE.search(out)
    if res.timed_out:
        return f"timed out after {res.duration:.0f} s"
    if res.exit_code == 127 or (res.counts is None and _BAD_CMD_RE.search(out[-2000:])):
        return f"bad command (exit {res.exit_code}): {_last_line(out)}"
    if res.exit_code == 4:  # pytest: usage error, or a test path that does not exist
        return f"bad command (pytest usage error): {_error_line(out)}"
    c = res.counts
    if c is not None and c["passed"] > 0:
        return None
    if no_gpu:
        return "no GPU: the tests need CUDA and none is present"
    if missing:
        return f"missing dependency: {missing.group(1)}"
    if c is None:
        if res.exit_code == 0:
            return "no pytest summary in the output: cannot tell which tests passed"
        return f"did not run (exit {res.exit_code}): {_last_line(out)}"
    if c["skipped"] and not (c["failed"] or c["errors"]):
        return f"every test was skipped ({c['skipped']} skipped)"
    if c["failed"] or c["errors"]:
        return f"no test passes on the base ({c['failed']} failed, {c['errors']} errors)"
    return "no tests ran"


def _error_line(text: str) -> str:
    errors = [ln for ln in text.splitlines() if ln.startswith("ERROR")]
    return errors[0][:300] if errors else _last_line(text)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def regressions(base: CommandResult, winner: CommandResult) -> list[str]:
    """Tests that passed on the base and do not pass with the winner (by id, else by counts)."""
    if base.outcomes and winner.outcomes:
        return sorted(t for t, o in base.outcomes.items()
                      if o == "passed" and winner.outcomes.get(t) != "passed")
    b, w = base.counts or {}, winner.counts or {}
    if winner.timed_out:
        return [f"the test command timed out with the winner after {winner.duration:.0f} s"]
    if w.get("passed", 0) < b.get("passed", 0) or (base.exit_code == 0 and winner.exit_code != 0):
        return [f"{b.get('passed', 0)} passed on the base, {w.get('passed', 0)} with the winner "
                f"(exit {base.exit_code} -> {winner.exit_code})"]
    return []


def verify_run(run_dir: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S, has_cuda: bool | None = None,
               log=print) -> dict:
    """Verify one run directory; writes verify.json and the report section; returns verify.json."""
    from kernelsmith.onboard.config import load_target

    run_dir = Path(run_dir).resolve()
    run = RunSpec.load(run_dir)
    if not Path(run.checkout).is_dir():
        raise ConfigError(run_file(run_dir), f"{run.checkout} no longer exists; restore that checkout (or "
                          "clone the repository there again) and verify again", "checkout")
    if has_cuda is None:
        import torch

        has_cuda = torch.cuda.is_available()
    target = load_target(run.target)
    op = _find_operator(target, run)
    doc = {
        "status": "could-not-run", "regression": False, "reason": None, "run_dir": str(run_dir),
        "target": str(target.path), "op": op.name, "file": op.file, "checkout": run.checkout,
        "base_sha": run.base_sha, "device": "cuda" if has_cuda else "interpret",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "newly_failing": [], "base": None, "winner": None, "sandbox": sandbox_summary(),
    }
    winner_file = run_dir / "winner" / Path(op.file).name
    if not op.test:
        doc["reason"] = f"operator {op.name} has no upstream test command (`test:` in {target.path.name})"
    elif not winner_file.is_file():
        doc["reason"] = f"the run has no winner ({winner_file.relative_to(run_dir)} missing)"
    else:
        _verify_in_worktree(doc, run, target, op, winner_file, timeout_s, has_cuda, log)
    write_outputs(run_dir, doc)
    return doc


def _find_operator(target, run: RunSpec):
    """The run's operator: from the yaml, else from the repo's `.kernelsmith.yml` at the base."""
    if target.has_operator(run.op):
        return target.operator(run.op)
    from kernelsmith.onboard.checkout import Checkout, is_commit
    from kernelsmith.onboard.scan import with_repo_operators

    co = Checkout(Path(run.checkout), run.base_sha, is_commit(run.base_sha))
    return with_repo_operators(target, co).operator(run.op)


def _verify_in_worktree(doc, run: RunSpec, target, op, winner_file, timeout_s, has_cuda, log) -> None:
    """Base and winner, each in a worktree made fresh from the store: the winner is written into a
    tree no test has run in yet, so nothing the base's tests planted (a link at the operator's path,
    a rewritten `.git`) is followed, read back or handed to git."""
    env = safe_env({"KERNELSMITH_TARGET_DIR": str(target.path.parent), "PYTHONDONTWRITEBYTECODE": "1"})
    if not has_cuda:  # kernels run under the Triton interpreter on a CPU machine
        env = device_env(env, "interpret")
    scratch = Path(tempfile.mkdtemp(prefix="verify-", dir=cache_dir()))
    checkout, base_sha = Path(run.checkout), run.base_sha
    try:
        try:
            winner_code = safefs.read_file(winner_file, limit=MAX_WINNER_BYTES)
        except (OSError, safefs.UnsafePath) as e:
            doc["reason"] = f"cannot read the winner {winner_file.name}: {e}"
            return
        with clean_worktree(checkout, base_sha, scratch / "base") as tree:
            base, base_bench = _run_side(op, target, tree, env, timeout_s, log, "base", scratch / "out-base")
        doc["base"] = base.side(base_bench)
        reason = why_not_runnable(base, has_cuda)
        if reason is None and base_bench is not None and base_bench.exit_code != 0:
            reason = f"the benchmark command fails on the base (exit {base_bench.exit_code})"
        if reason is not None:
            doc["reason"] = reason
            doc["winner"] = _not_run(op, "the base could not run")
            return
        with clean_worktree(checkout, base_sha, scratch / "winner") as tree:
            try:
                place_winner(tree, op.file, winner_code)
            except (OSError, safefs.UnsafePath) as e:
                doc["reason"] = f"cannot place the winner at {op.file}: {e}"
                doc["winner"] = _not_run(op, "the winner could not be placed")
                return
            win, win_bench = _run_side(op, target, tree, env, timeout_s, log, "winner",
                                       scratch / "out-winner")
        doc["winner"] = win.side(win_bench)
        lost = regressions(base, win)
        if win_bench is not None and win_bench.exit_code != 0:
            lost.append(f"the benchmark command fails with the winner (exit {win_bench.exit_code})")
        doc["newly_failing"] = lost
        doc["regression"] = bool(lost)
        doc["status"] = "regression" if lost else "pass"
        doc["reason"] = (f"{len(lost)} test(s) passing on the base fail with the winner" if lost
                         else "every test that passed on the base passes with the winner")
    except KernelsmithError as e:
        doc["reason"] = f"cannot prepare a fresh worktree at the base: {e}"
    finally:
        remove_tree(str(scratch))


def place_winner(tree: Path, rel: str, code: bytes) -> None:
    """Write the winner at `tree/rel` without following a link on the way (safefs): `tree` was just
    made by git, but a link the repository itself holds on that path is refused, not followed."""
    parts = safefs.relative_parts(rel)
    root = safefs.open_dir(os.path.realpath(tree))  # made by this process: its own path is trusted
    try:
        parent = safefs.open_subdir(root, parts[:-1]) if len(parts) > 1 else os.dup(root)
        try:
            safefs.write_at(parent, parts[-1], code)
        finally:
            os.close(parent)
    finally:
        os.close(root)


def _run_side(op, target, tree: Path, env: dict, timeout_s: float, log, side: str,
              out: Path) -> tuple[CommandResult, CommandResult | None]:
    """`setup`, then the test and benchmark commands, in the fresh tree of one side."""
    run_setup(target, tree)
    env = venv_env(tree, env)  # what setup installed is in the worktree's own environment
    out.mkdir(parents=True, exist_ok=True)
    log(f"verify: {side}: {op.test}")
    res = run_command(op.test, tree, env, timeout_s, out / "junit.xml", out)
    return res, _bench(op, tree, env, timeout_s, log, side, out)


def preflight(checkout: str | Path, base_sha: str) -> None:
    """Fail now, with one clear line, where verify could not make its worktrees later."""
    from kernelsmith.onboard.checkout import preflight as checkout_preflight

    checkout_preflight(Path(checkout), base_sha)


def _bench(op, tree: Path, env: dict, timeout_s: float, log, side: str,
           scratch: Path) -> CommandResult | None:
    if not op.benchmark:
        return None
    log(f"verify: {side} benchmark: {op.benchmark}")
    return run_command(op.benchmark, tree, env, timeout_s, scratch=scratch)


def _not_run(op, why: str) -> dict:
    return {"command": op.test, "passed": None, "failed": None, "errors": None, "skipped": None,
            "exit_code": None, "duration": 0.0, "timed_out": False, "output_tail": f"not run: {why}",
            "benchmark": None}


def exit_code(doc: dict) -> int:
    """0 pass, 1 regression, 2 could not run."""
    return {"pass": 0, "regression": 1}.get(doc["status"], 2)


def write_outputs(run_dir: Path, doc: dict) -> None:
    """Write verify.json and replace (or append) the "Upstream tests" section of report.md."""
    (run_dir / "verify.json").write_text(json.dumps(doc, indent=2) + "\n")
    report = run_dir / "report.md"
    text = report.read_text() if report.exists() else ""
    report.write_text(replace_section(text, render_section(doc)))


SECTION_TITLE = "## Upstream tests"


def replace_section(text: str, section: str) -> str:
    """`text` with its "## Upstream tests" section replaced by `section` (appended when absent)."""
    pattern = re.compile(rf"^{re.escape(SECTION_TITLE)}\s*$.*?(?=^## |\Z)", re.M | re.S)
    section = section.rstrip() + "\n"
    if pattern.search(text):
        return pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    return (text.rstrip() + "\n\n" if text.strip() else "") + section


def _cell(v) -> str:
    return "-" if v is None else str(v)


def render_section(doc: dict) -> str:
    """The markdown "Upstream tests" section for a verify.json document."""
    words = {"pass": "**pass**", "regression": "**regression**", "could-not-run": "**could not run**"}
    lines = [SECTION_TITLE, "",
             f"Status: {words.get(doc['status'], doc['status'])} - {doc.get('reason') or ''}".rstrip(" -"),
             "", f"Checkout at base `{str(doc.get('base_sha'))[:12]}`, device: {doc.get('device')}, "
                 f"verified {doc.get('created_at')}.", ""]
    if (doc.get("sandbox") or {}).get("enabled") is False:
        lines += [f"**Warning: {doc['sandbox'].get('note')}.**", ""]
    sides = [(name, doc.get(name)) for name in ("base", "winner") if doc.get(name)]
    if sides:
        lines += ["| side | command | passed | failed | errors | skipped | duration |",
                  "|---|---|---|---|---|---|---|"]
        for name, s in sides:
            lines.append(f"| {name} | `{s['command']}` | {_cell(s['passed'])} | {_cell(s['failed'])} | "
                         f"{_cell(s['errors'])} | {_cell(s.get('skipped'))} | {s['duration']:.1f} s |")
        lines.append("")
    if doc.get("newly_failing"):
        lines += ["Passing on the base, not with the winner:", ""]
        lines += [f"- `{t}`" for t in doc["newly_failing"][:50]] + [""]
    for name, s in sides:
        bench = s.get("benchmark")
        if bench:
            lines += [f"<details><summary>benchmark on the {name}: `{bench['command']}` "
                      f"(exit {bench['exit_code']}, {bench['duration']:.1f} s)</summary>", "", "```",
                      bench["output_tail"].replace("```", "'''"), "```", "", "</details>", ""]
    for name, s in sides:
        if doc["status"] != "pass" or name == "winner":
            lines += [f"<details><summary>test output on the {name} (tail)</summary>", "", "```",
                      s["output_tail"].replace("```", "'''"), "```", "", "</details>", ""]
    return "\n".join(lines)

