"""Harness facts kept between commands, keyed by the content of everything the harness read.

Gathering a harness's facts (harness/gather.py) costs a sandboxed child that imports torch and
torch._dynamo (FakeTensorMode needs it): seconds on every `optimize`, `--resume`, `evaluate` and
`export`. The child records, with an audit hook, every file its harness code opened and every
folder it listed (`ReadLog`); the parent keeps the facts in cache_dir()/harness-facts/, one file
per (harness path and content, variant, working folder, Python, torch), beside the sha256 of each
file read and of each folder's listing, which the parent reads itself (never through a link:
kernelsmith/safefs.py). A later command uses the kept facts only while every one of those digests
still matches; anything else (a changed or missing file, an entry that does not parse) gathers
anew. Kept only with the sandbox on: that folder is then writable by trusted processes alone, and
what is read from it is checked as the child's answer is (HarnessFacts.from_json). Not covered: what
the harness reads from its environment variables or through native code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
from pathlib import Path

from kernelsmith import safefs
from kernelsmith.harness.facts import HarnessFacts, MalformedFacts
from kernelsmith.paths import cache_dir

FORMAT = 1  # of an entry; a new one makes every kept entry a miss
STORE = "harness-facts"
MAX_READS = 4096  # files and folders one child may name (more: its facts are not kept)
MAX_READ_BYTES = 256 << 20  # bytes the parent digests for one entry (more: not kept)
MAX_ENTRY_BYTES = 16 << 20
MAX_ENTRIES = 256  # kept entries; the oldest go first
_KINDS = ("file", "dir")


class ReadLog:
    """In the child: the files opened and folders listed while `recording` (an audit hook; it
    cannot be removed, so it stays on and records only in between)."""

    def __init__(self, skip: list[str]):
        self.skip = [os.path.join(os.path.abspath(s), "") for s in skip if s]
        self.seen: dict[tuple[str, str], None] = {}
        self.recording = False
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.recording or event not in ("open", "os.listdir", "os.scandir"):
            return
        try:
            path = args[0] if args else "."
            path = "." if path is None else os.fsdecode(path) if isinstance(path, (str, bytes)) else None
            if path is None:  # a descriptor: what it names was opened (and recorded) before
                return
            path = os.path.abspath(path)
            if "__pycache__" in Path(path).parts or any(path.startswith(s) for s in self.skip):
                return  # bytecode follows its source; the private scratch is the harness's own
            self.seen[("file" if event == "open" else "dir", path)] = None
        except Exception:  # noqa: BLE001 - recording must never change what the harness does
            self.seen[("file", "<unrecorded>")] = None

    def answer(self, package: Path) -> list[list[str]] | None:
        """What was recorded, with the kernelsmith modules this child runs (their code makes the
        facts too); None when too many to keep."""
        files = {("file", str(Path(m.__file__).resolve())) for m in list(sys.modules.values())
                 if isinstance(getattr(m, "__file__", None), str)
                 and Path(m.__file__).resolve().is_relative_to(package)}
        reads = sorted({*self.seen, *files})
        return [list(r) for r in reads] if len(reads) <= MAX_READS else None


def checked_reads(reads) -> list[tuple[str, str]] | None:
    """The child's reads, if they are a list of (kind, absolute path) within the limits."""
    if not isinstance(reads, list) or len(reads) > MAX_READS:
        return None
    out = []
    for r in reads:
        if not (isinstance(r, list) and len(r) == 2 and r[0] in _KINDS and isinstance(r[1], str)
                and 0 < len(r[1]) <= 4096 and os.path.isabs(r[1]) and "\0" not in r[1]):
            return None
        out.append((r[0], r[1]))
    return out


def _digests(reads: list[tuple[str, str]], before_ns: int | None = None) -> list[str] | None:
    """The sha256 of each file and each folder's listing, read here without following links; None
    when one cannot be read, the total is over MAX_READ_BYTES, or (with `before_ns`) one changed
    at or after that time (its content may not be what the child saw)."""
    out, total = [], 0
    for kind, path in reads:
        try:
            fd = safefs.open_dir(path) if kind == "dir" else None
            try:
                if kind == "dir":
                    st = os.fstat(fd)
                    # bytecode caches come and go with any import; they never decide which module loads
                    data = "\0".join(sorted(n for n in os.listdir(fd) if n != "__pycache__")).encode()
                else:
                    data = safefs.read_file(path, MAX_READ_BYTES - total)
                    st = os.stat(path, follow_symlinks=False)
            finally:
                if fd is not None:
                    os.close(fd)
        except (OSError, safefs.UnsafePath, UnicodeEncodeError):
            return None
        total += len(data)
        if total > MAX_READ_BYTES or (before_ns is not None and st.st_mtime_ns >= before_ns) \
                or (kind == "file" and not stat.S_ISREG(st.st_mode)):
            return None
        out.append(hashlib.sha256(data).hexdigest())
    return out


@functools.cache
def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "none"


def entry_name(path: Path, digest: str, variant: str | None, cwd: Path) -> str:
    """The entry's file name: what the facts depend on besides the files the child reads."""
    key = [FORMAT, str(path), digest, variant, str(cwd), sys.version, sys.executable, _torch_version()]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest() + ".json"


def load(name: str, path: Path) -> HarnessFacts | None:
    """The kept facts under `name` while every file and folder they were gathered from is as it
    was; None otherwise."""
    try:
        entry = json.loads(safefs.read_file(_folder() / name, MAX_ENTRY_BYTES))
        reads = checked_reads(entry["reads"])
        if reads is None or not isinstance(entry["digests"], list) or _digests(reads) != entry["digests"]:
            return None
        return HarnessFacts.from_json(entry["facts"], path)
    except (OSError, safefs.UnsafePath, ValueError, KeyError, TypeError, RecursionError, MalformedFacts):
        return None


def save(name: str, facts: HarnessFacts, reads, started_ns: int) -> None:
    """Keep `facts` under `name` with the digests of the child's `reads` (nothing when they are
    missing, unreadable, or changed since `started_ns`, the child's start)."""
    reads = checked_reads(reads)
    digests = None if reads is None else _digests(reads, before_ns=started_ns)
    if digests is None:
        return
    folder = _folder()
    data = json.dumps({"reads": [list(r) for r in reads], "digests": digests, "facts": facts.to_json()})
    if len(data) > MAX_ENTRY_BYTES:
        return
    try:
        safefs.write_file(folder / name, data, mode=0o600)
        _prune(folder)
    except (OSError, safefs.UnsafePath):
        pass  # a cache that cannot be written costs the next command a child, nothing else


def _folder() -> Path:
    # The cache's own location is the user's choice (it may lie behind a link); below it, no link.
    return cache_dir().resolve() / STORE


def _prune(folder: Path) -> None:
    entries = []
    for p in folder.iterdir():
        try:
            entries.append((p.lstat().st_mtime_ns, p))
        except FileNotFoundError:
            continue
    for _, p in sorted(entries)[:max(0, len(entries) - MAX_ENTRIES)]:
        p.unlink(missing_ok=True)
