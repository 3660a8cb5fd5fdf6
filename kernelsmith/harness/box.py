"""Harness code runs only in a sandboxed child: `harness check`'s probe and `scan`'s harness loads.

A harness (and the operator it calls) is target-repository code. The child
(`python -m kernelsmith.onboard.harness_probe SPEC`) runs it inside the sandbox's "harness" profile
(kernelsmith/sandbox/: nothing writable but a private scratch, no network, no secrets, no ancestor
visible; every process it starts dies with it), under a wall clock. What comes back is hostile
input: one JSON line whose types are checked here, and text made printable and short before it is
shown. A child that crashes, hangs or answers malformed data is one error naming the harness file.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.sandbox.spawn import device_env, how_it_ended, kill_group, start_python
from kernelsmith.scratch import remove_tree

LOAD_TIMEOUT_S = 300.0  # importing torch and the harness on a busy machine
LOAD_PARALLEL = 4  # harness loads of one scan at a time (each child imports torch)
STDOUT_CAP = 4 << 20  # bytes of the answer channel kept
STDERR_CAP = 64 << 10  # bytes of the child's stderr tail kept
EXIT_GRACE_S = 2.0  # after the child exits, how long its pipes may stay open (--no-sandbox: a daemon)
MAX_PROBLEMS = 2000
TEXT_LIMIT = 1000  # characters of one problem's text shown
_FIELD_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\[\]]{0,100}\Z")


class HarnessChildError(Exception):
    """The harness's child died, hung or answered malformed data; the message names the harness."""

    def __init__(self, message: str, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


def shown(text: object, limit: int = TEXT_LIMIT) -> str:
    """Untrusted text made safe to print: one line, control and invisible characters escaped
    (no terminal escape sequences, no bidi overrides), at most `limit` characters."""
    text = str(text)
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    if len(out) > limit:
        out = f"{out[:limit]}... ({len(out) - limit} more characters)"
    return out


def _collect(proc: subprocess.Popen, timeout_s: float) -> tuple[bytes, bytes, bool]:
    """(the last STDOUT_CAP bytes of stdout, the last STDERR_CAP of stderr, timed out?) of `proc`;
    its process group is killed at the deadline."""
    caps = {proc.stdout: STDOUT_CAP, proc.stderr: STDERR_CAP}
    data = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    deadline = time.monotonic() + timeout_s
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for f in caps:
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if proc.poll() is not None:
                deadline = min(deadline, now + EXIT_GRACE_S)
            left = deadline - now
            if left <= 0:
                timed_out = proc.poll() is None
                break
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = data[key.fileobj]
                buf += chunk
                del buf[:max(0, len(buf) - caps[key.fileobj])]
    kill_group(proc.pid)  # a hang, or anything it left running (--no-sandbox)
    proc.wait()
    for f in caps:
        f.close()
    return bytes(data[proc.stdout]), bytes(data[proc.stderr]), timed_out


def run_child(spec: dict, *, harness: str | Path, cwd: str | Path, device: str | None,
              timeout_s: float, what: str, module: str = "kernelsmith.onboard.harness_probe") -> dict:
    """Run `module` (harnessprobe, or harnessfacts) on `spec` in the "harness" sandbox; its answer
    (a dict) or HarnessChildError naming `harness` (`what`: the child's job, for the message)."""
    scratch = Path(tempfile.mkdtemp(prefix="kernelsmith-harness-"))
    try:
        proc = start_python(module, [json.dumps(spec)], "harness", env=device_env(dict(os.environ), device),
                            cwd=cwd, scratch=scratch, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
        out, err, timed_out = _collect(proc, timeout_s)
    finally:
        remove_tree(str(scratch))
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.strip()]
    tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-5:])
    tail = f": {shown(tail[-1500:], 1500)}" if tail else ""
    if timed_out:
        raise HarnessChildError(f"{harness}: the {what} did not finish in {timeout_s:.0f} s (killed){tail}",
                                timed_out=True)
    try:
        answer = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError, RecursionError):
        answer = None
    if not isinstance(answer, dict):
        ended = how_it_ended(proc.returncode) + ("" if proc.returncode < 0 else " without an answer")
        raise HarnessChildError(f"{harness}: the {what} process {ended}{tail}")
    return answer


def config_error(answer: dict, harness: str | Path) -> ConfigError | None:
    """The ConfigError the child reported (the harness failed to import or validate), or None."""
    err = answer.get("config_error")
    if err is None:
        return None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str):
        raise HarnessChildError(f"{harness}: the harness's child answered a malformed config_error")
    field = err.get("field")
    field = field if isinstance(field, str) and _FIELD_RE.match(field) else None
    return ConfigError(Path(harness).resolve(), shown(err["message"]), field)


def checked_probe(answer: dict, harness: str | Path) -> tuple[list[list[str]], int]:
    """(problems, passed) of a probe's answer, types and sizes checked, text made printable;
    ConfigError when the harness itself cannot be loaded."""
    error = config_error(answer, harness)
    if error is not None:
        raise error
    problems, passed = answer.get("problems"), answer.get("passed")
    ok = (isinstance(problems, list) and len(problems) <= MAX_PROBLEMS
          and all(isinstance(p, list) and len(p) == 3 and all(isinstance(s, str) for s in p)
                  for p in problems)
          and isinstance(passed, int) and not isinstance(passed, bool) and 0 <= passed <= 10**6)
    if not ok:
        raise HarnessChildError(f"{harness}: the harness check process answered malformed data")
    return [[shown(s) for s in p] for p in problems], passed


def _load_one(harness: str, cwd: str | Path, timeout_s: float) -> str | None:
    if not Path(harness).is_file():  # as load_harness says it, without starting a child
        return str(ConfigError(Path(harness).resolve(), "harness file not found"))
    try:
        answer = run_child({"load_only": True, "harness": harness}, harness=harness, cwd=cwd, device=None,
                           timeout_s=timeout_s, what="harness load")
        error = config_error(answer, harness)
        if error is not None:
            return str(error)
        if answer.get("loaded") is not True:
            raise HarnessChildError(f"{harness}: the harness load process answered malformed data")
    except HarnessChildError as e:
        return str(e)
    return None


def load_harnesses(harnesses: list[str | Path], cwd: str | Path,
                   timeout_s: float | None = None) -> list[str | None]:
    """Import and validate each harness in a sandboxed child of its own: per harness None (it
    loads) or the problem, naming its file (a crash or a hang affects only its own harness)."""
    timeout_s = LOAD_TIMEOUT_S if timeout_s is None else timeout_s
    if not harnesses:
        return []
    with ThreadPoolExecutor(max_workers=min(LOAD_PARALLEL, len(harnesses))) as pool:
        return list(pool.map(lambda h: _load_one(str(h), cwd, timeout_s), harnesses))
