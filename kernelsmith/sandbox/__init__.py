"""One sandbox for all untrusted code, with named profiles.

  candidate  referee workers and the search's compile processes (writable: their work folder and
             Triton's cache folder)
  setup      the target's `setup` command (writable: the checkout it builds in)
  tests      verify's upstream test and benchmark commands (writable: the scratch worktree)
  harness    `harness check`'s probe and `scan`'s harness loads (writable: nothing but the scratch)

Inside every profile (launch.py builds it): new user, mount, PID and network namespaces; every
mount read-only except the profile's folders and a private scratch folder ($TMPDIR; tests,
setup and harness also get private Triton and XDG cache folders there), a private /dev/shm, known credential
files hidden, a fresh /proc that shows only the sandbox's own processes (no ancestor's environ),
loopback only, no capability to undo any of it, and an environment without secrets. Every process
started inside dies with the sandbox. /dev is kept, so GPUs stay usable. No way out through the
file system's sockets: /run and /var/run are empty (and /tmp for tests and setup), and every
profile but tests cannot make a Unix socket (seccomp.py; tests keep them, limits.unix_sockets);
the candidate profile's processes have a host memory cap (limits.py).

Where the kernel cannot build it, `require()` refuses with the missing feature named, unless the
command was given `--no-sandbox` (`disable()`), which its outputs then state (`summary()`).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.sandbox import limits
from kernelsmith.sandbox.environ import (
    drop_secrets_from_environ,
    hide_environ,
    is_secret,
    scrubbed_env,
    secret_files,
)

__all__ = ["PROFILES", "SandboxUnavailable", "disable", "enabled", "require", "summary", "wrap", "probe",
           "scrubbed_env", "hide_environ", "drop_secrets_from_environ", "is_secret", "secret_files"]

PROFILES = ("candidate", "setup", "tests", "harness")
LAUNCHER = Path(__file__).resolve().with_name("launch.py")
SIMULATE_ENV = "KERNELSMITH_SANDBOX_SIMULATE_MISSING"  # tests: the probe fails as if the sysctl were 0
NO_SANDBOX_NOTE = ("--no-sandbox: candidate code, harnesses, the target's setup and its tests ran WITHOUT "
                   "the sandbox (they could write the run directory and the user's files, reach the network "
                   "and read their ancestors' environment)")

_state = {"enabled": True, "reason": None}


class SandboxUnavailable(KernelsmithError):
    """The sandbox cannot be built here and --no-sandbox was not given."""


def disable(reason: str = "--no-sandbox") -> None:
    """Run untrusted code without the sandbox for the rest of this process (--no-sandbox)."""
    _state.update(enabled=False, reason=reason)


def enable() -> None:
    """Back to the default: untrusted code runs only inside the sandbox."""
    _state.update(enabled=True, reason=None)


def enabled() -> bool:
    """Whether untrusted code runs inside the sandbox."""
    return bool(_state["enabled"])


def summary() -> dict:
    """What outputs record: {"enabled": true} or {"enabled": false, "note": why and what it means}."""
    if enabled():
        return {"enabled": True, "isolation": "user+mount+pid+network namespaces, read-only mounts"}
    return {"enabled": False, "note": NO_SANDBOX_NOTE}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def diagnose(error: str, read=_read) -> str:
    """The kernel feature that is missing, named, from the launcher's error and the sysctls."""
    if read("/proc/sys/kernel/unprivileged_userns_clone") == "0":
        what = ("unprivileged user namespaces are off: kernel.unprivileged_userns_clone = 0 "
                "(/proc/sys/kernel/unprivileged_userns_clone; enable with "
                "`sysctl -w kernel.unprivileged_userns_clone=1`)")
    elif read("/proc/sys/user/max_user_namespaces") == "0":
        what = ("user namespaces are off: user.max_user_namespaces = 0 (/proc/sys/user/max_user_namespaces; "
                "enable with `sysctl -w user.max_user_namespaces=15000`)")
    elif read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" and "mount" in error:
        what = ("AppArmor restricts unprivileged user namespaces: "
                "kernel.apparmor_restrict_unprivileged_userns = 1 (set it to 0, or give the Python "
                "interpreter an AppArmor profile with `userns`)")
    elif "/proc" in error and "PID namespace" in error:
        what = error
    elif "unshare" in error:
        what = (f"the kernel refused new namespaces ({error}); it needs CONFIG_USER_NS, CONFIG_PID_NS and "
                "CONFIG_NET_NS and no seccomp policy blocking unshare(2) (Docker's default one does)")
    else:
        what = error or "the sandbox launcher failed without a message"
    return (f"cannot build the sandbox for untrusted code: {what}. Pass --no-sandbox to run without it "
            "(every output then says so).")


@functools.lru_cache(maxsize=1)
def _probe_launcher() -> str | None:
    with tempfile.TemporaryDirectory(prefix="kernelsmith-probe-") as tmp:
        spec = {"probe": True, "writable": [tmp], "hide": secret_files()}
        try:
            proc = subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec), "true"],
                                  capture_output=True, text=True, timeout=60, env=scrubbed_env(), cwd=tmp)
        except (OSError, subprocess.SubprocessError) as e:
            return diagnose(f"the launcher did not run: {e}")
    if proc.returncode == 0:
        return None
    err = proc.stderr.strip().removeprefix("kernelsmith sandbox: ").removeprefix("error ")
    return diagnose(err[-1500:])


def probe() -> str | None:
    """None when the sandbox can be built here, else why not (the missing feature named)."""
    if os.environ.get(SIMULATE_ENV):
        return diagnose("unshare(CLONE_NEWUSER): EPERM (simulated)",
                        read=lambda p: "0" if p.endswith("max_user_namespaces") else None)
    if not sys.platform.startswith("linux"):
        return diagnose("Linux namespaces are needed; this is " + sys.platform)
    return _probe_launcher()


def require() -> None:
    """Raise SandboxUnavailable when the sandbox is required and cannot be built."""
    if enabled():
        problem = probe()
        if problem:
            raise SandboxUnavailable(problem)


def triton_cache_dir(env: dict) -> Path:
    """The folder Triton compiles into under `env` (as Triton resolves it)."""
    if env.get("TRITON_CACHE_DIR"):
        return Path(env["TRITON_CACHE_DIR"])
    home = env.get("TRITON_HOME") or env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".triton" / "cache"


def wrap(argv: list[str], profile: str, *, env: dict, writable=(), scratch: Path | None = None,
         keep: tuple[str, ...] = (), readable=()) -> tuple[list[str], dict]:
    """(argv, env) that run `argv` inside the sandbox `profile`; with the sandbox disabled, argv as
    it is and the same environment. The environment is scrubbed of secrets (`keep` names pass).

    `scratch`: a private writable folder, made $TMPDIR (and, for setup, tests and harness, the home
    of their Triton and XDG caches, so those do not land in the user's own). `readable`: paths the
    command reads that may lie in a folder the profile empties (limits.cover), kept visible.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown sandbox profile {profile!r}")
    env = scrubbed_env(env, keep=keep)
    rw = [Path(w) for w in writable]
    if scratch is not None:
        scratch = Path(scratch)
        scratch.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(scratch)
        rw.append(scratch)
        if profile in ("setup", "tests", "harness"):
            env["TRITON_CACHE_DIR"] = str(scratch / "triton-cache")
            env["XDG_CACHE_HOME"] = str(scratch / "xdg-cache")
    if profile == "candidate":  # candidates compile into Triton's cache (shared with the precompiler)
        cache = triton_cache_dir(env)
        cache.mkdir(parents=True, exist_ok=True)
        rw.append(cache)
    if not enabled():
        return list(argv), env
    require()
    keep = sorted({*limits.keep_paths(env, argv), *map(str, readable)})
    spec = {"profile": profile, "writable": sorted({str(p.resolve()) for p in rw}), "hide": secret_files(),
            "cover": limits.cover(profile), "keep": keep,
            "unix_sockets": limits.unix_sockets(profile),
            "memory_bytes": limits.candidate_memory_bytes() if profile == "candidate" else None}
    return [sys.executable, "-I", "-S", str(LAUNCHER), json.dumps(spec), *argv], env
