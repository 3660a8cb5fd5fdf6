"""What a sandbox profile may hold and reach beyond its mounts: the host memory cap of the
candidate profile (a setting), the cores left for compile pools, whether Unix sockets may be made,
and which folders are emptied."""

from __future__ import annotations

import os
import re
import stat
import sys

from kernelsmith.errors import ConfigError

MEMORY_ENV = "KERNELSMITH_CANDIDATE_MEMORY"
# A referee worker under the interpreter holds about 0.6 GiB of heap (torch, Triton, the harness);
# a CUDA worker more. 16 GiB leaves ample room and still stops a candidate from taking the host.
DEFAULT_MEMORY = 16 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*\Z", re.I)
# Folders where sockets of the host's services live (Docker, D-Bus, systemd, Ray, X11, tmux):
# emptied in every profile; /tmp also where Unix sockets stay allowed (see unix_sockets).
RUNTIME_FOLDERS = ("/run", "/var/run")
# An absolute path inside a command line (a shell command, a JSON spec): up to a quote, space or
# shell operator.
_PATH_IN_TEXT = re.compile(r"(?<![\w.~-])(/[^\s'\"`;|&<>(){}$,]+)")


def parse_size(text: str) -> int | None:
    """Bytes from "16G", "512M", "1.5GiB" or a plain number; None for "none", "off" or "0"."""
    if text.strip().lower() in ("none", "off", "0", "unlimited"):
        return None
    m = _SIZE.match(text)
    if not m:
        raise ValueError(text)
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def candidate_memory_bytes(env: dict[str, str] | None = None) -> int | None:
    """The host memory cap (RLIMIT_DATA) of each process in the candidate profile: $KERNELSMITH_
    CANDIDATE_MEMORY ("8G", "none") or DEFAULT_MEMORY."""
    value = (os.environ if env is None else env).get(MEMORY_ENV)
    if value is None or not value.strip():
        return DEFAULT_MEMORY
    try:
        cap = parse_size(value)
    except ValueError:
        raise ConfigError(f"${MEMORY_ENV}", f"{value[:40]!r} is not a size such as 16G, 512M or none") \
            from None
    if cap is not None and cap < 256 << 20:
        raise ConfigError(f"${MEMORY_ENV}", f"{value[:40]!r} is below 256M, too little for a worker "
                          "to import torch")
    return cap


def spare_cores(reserved: int, cap: int, cores: int | None = None) -> int:
    """Cores left for compiling once `reserved` busy processes have one each: at least 1, at most
    `cap` (`cores`: the machine's count by default)."""
    return max(1, min(cap, (cores or os.cpu_count() or 2) - reserved))


def format_size(n: int) -> str:
    """16.0 GiB."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def unix_sockets(profile: str) -> bool:
    """Whether code in `profile` may make Unix sockets. Only upstream tests may: they run servers
    and pools that use them (multiprocessing's forkserver and fd sharing, ZMQ's ipc:// in SGLang);
    there /tmp is emptied too, so the host's listeners there and in /run are out of reach."""
    return profile == "tests"


def cover(profile: str) -> list[str]:
    """The folders emptied (an empty tmpfs over each) in `profile`."""
    return [*RUNTIME_FOLDERS, *(["/tmp"] if profile in ("tests", "setup") else [])]


def keep_paths(env: dict[str, str], argv: list[str] = ()) -> list[str]:
    """Paths that must stay visible if they lie in an emptied folder: those the command line names
    (that exist), the Python in use, PATH's entries (a bin folder with its environment),
    VIRTUAL_ENV, PYTHONPATH, HOME and the target's folder."""
    out = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    for arg in argv:
        out += _PATH_IN_TEXT.findall(arg)
    for name in ("PATH", "PYTHONPATH"):
        for entry in env.get(name, "").split(os.pathsep):
            if entry.startswith("/"):
                out.append(os.path.dirname(entry) if os.path.basename(entry) == "bin" else entry)
    for name in ("VIRTUAL_ENV", "HOME", "KERNELSMITH_TARGET_DIR"):
        if env.get(name, "").startswith("/"):
            out.append(env[name])
    return sorted({p for p in out if p and p != "/" and os.path.exists(p) and not _is_socket(p)})


def _is_socket(path: str) -> bool:
    """A socket is never kept, even where a command names it."""
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False
