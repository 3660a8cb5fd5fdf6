"""The run directory as publishing reads it: hostile input, of which only a few parts are used.

The run directory was written by the GPU job after it ran target code and generated kernels, so
anything in it may be forged. Publishing takes from it only: the winner's content for the one file
the target yaml names (bounded, must parse as Python), numbers (types and ranges checked), a few
names (strict patterns; a rewrite's kernel must be a function of the winner) and the verify record
(status checked). Paths, titles, bodies, targets and repositories are never read from it. Every
file is opened without following links, component by component under the run directory: a
symlink, a hardlink (more than one link), a non-regular file or an oversized one is refused.

`python -m bot.artifact stage RUN_DIR DEST` copies only such plain files (the workflow uploads DEST).
"""

from __future__ import annotations

import ast
import errno
import json
import math
import os
import re
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kernelsmith.errors import KernelsmithError
from kernelsmith.safefs import UnsafePath, read_at
from kernelsmith.search.mutators.rewrites.explain import AXIAL, KNOBBED, TRANSFORMS

MAX_JSON_BYTES = 4 << 20
MAX_WINNER_BYTES = 1 << 20
MAX_STAGED_BYTES = 1 << 30
MAX_SHAPES = 64
MAX_SPEEDUP = 1e4
MAX_MS = 1e7
MAX_COUNT = 10**9
SHA_RE = re.compile(r"[0-9a-f]{40}\Z")
KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}\Z")
VALUE_RE = re.compile(r"[A-Za-z0-9_.+-]{1,40}\Z")
LABEL_RE = re.compile(r"[A-Za-z0-9 _.,+()/-]{1,80}\Z")  # device name, driver and library versions
REASON_RE = re.compile(r"[a-z][a-z0-9_]{0,39}\Z")
KERNEL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")  # a Python identifier (ASCII), <= 64 chars
MAX_REWRITES, MAX_AXIS, MAX_KNOB = 8, 2, 65536
VERIFY_STATUSES = ("pass", "regression", "could-not-run")


class PublishError(KernelsmithError):
    """The run cannot be published (not verified, too slow, missing files)."""


class UnsafeArtifact(PublishError):
    """A run-directory file is not a plain file inside it, or does not hold what publishing accepts.

    Messages name the file and field, never the hostile value itself (they are posted as replies)."""


def _open_dir(parent_fd: int | None, name: str | os.PathLike) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    return os.open(name, flags, dir_fd=parent_fd) if parent_fd is not None else os.open(name, flags)


def _check_rel(rel: str) -> tuple[str, ...]:
    p = PurePosixPath(rel)
    if p.is_absolute() or not p.parts or any(x in ("", ".", "..") for x in p.parts):
        raise UnsafeArtifact(f"{rel}: not a path inside the run directory")
    return p.parts


def read_plain(root: Path, rel: str, limit: int) -> bytes | None:
    """The bytes of `root/rel`, None when absent; UnsafeArtifact for a link, a non-regular file,
    a hardlinked one, a path that leaves `root`, or more than `limit` bytes."""
    parts = _check_rel(rel)
    try:
        if stat.S_ISLNK(os.lstat(root).st_mode):
            raise UnsafeArtifact(f"{root}: the run directory is a symlink; refused")
        fd = _open_dir(None, root)
    except FileNotFoundError:
        return None
    try:
        for i, name in enumerate(parts[:-1]):
            try:
                nxt = _open_dir(fd, name)
            except FileNotFoundError:
                return None
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join(parts[:i + 1])
                    raise UnsafeArtifact(f"{where}: a symlink or not a folder; refused") from None
                raise
            os.close(fd)
            fd = nxt
        try:
            return read_at(fd, parts[-1], limit)
        except FileNotFoundError:
            return None
        except UnsafePath as e:
            raise UnsafeArtifact(f"{rel}: {str(e).split(': ', 1)[-1]}") from None
    finally:
        os.close(fd)


def _json(root: Path, rel: str) -> dict | None:
    raw = read_plain(root, rel, MAX_JSON_BYTES)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise UnsafeArtifact(f"{rel}: not valid JSON") from None
    if not isinstance(data, dict):
        raise UnsafeArtifact(f"{rel}: must hold a JSON object")
    return data


def _number(value, where: str, low: float, high: float, *, integer: bool = False, optional: bool = True):
    if value is None and optional:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise UnsafeArtifact(f"{where} must be {'an integer' if integer else 'a number'}, "
                             f"got {type(value).__name__}")
    if not (math.isfinite(value) and low <= value <= high):
        raise UnsafeArtifact(f"{where} must lie in [{low:g}, {high:g}], got {value!r}")
    return value if integer else float(value)


def _name(value, where: str, pattern: re.Pattern, optional: bool = True):
    if value is None and optional:
        return None
    if not isinstance(value, str) or not pattern.match(value):
        raise UnsafeArtifact(f"{where} is not an accepted name (pattern {pattern.pattern})")
    return value


def _bool(value, where: str, default: bool | None = None):
    if value is None and default is not None:
        return default
    if not isinstance(value, bool):
        raise UnsafeArtifact(f"{where} must be true or false, got {type(value).__name__}")
    return value


def _shape(raw, where: str) -> dict:
    if not isinstance(raw, dict) or not raw or len(raw) > 16:
        raise UnsafeArtifact(f"{where} must be a mapping of 1 to 16 fields")
    out = {}
    for k, v in raw.items():
        _name(k, f"{where} key", KEY_RE, optional=False)
        if isinstance(v, int) and not isinstance(v, bool):
            out[k] = _number(v, f"{where}.{k}", -(10**15), 10**15, integer=True, optional=False)
        elif isinstance(v, float):
            out[k] = _number(v, f"{where}.{k}", -1e15, 1e15, optional=False)
        else:
            out[k] = _name(v, f"{where}.{k}", VALUE_RE, optional=False)
    return out


def _shape_row(raw, where: str) -> dict:
    if not isinstance(raw, dict):
        raise UnsafeArtifact(f"{where} must be a mapping")
    ci = raw.get("ci95")
    if ci is not None:
        if not isinstance(ci, list) or len(ci) != 2:
            raise UnsafeArtifact(f"{where}.ci95 must be [low, high]")
        ci = [_number(x, f"{where}.ci95", 0.0, MAX_SPEEDUP) for x in ci]
    return {"shape": _shape(raw.get("shape"), f"{where}.shape"),
            "baseline_ms": _number(raw.get("baseline_ms"), f"{where}.baseline_ms", 0.0, MAX_MS),
            "winner_ms": _number(raw.get("winner_ms"), f"{where}.winner_ms", 0.0, MAX_MS),
            "speedup": _number(raw.get("speedup"), f"{where}.speedup", 0.0, MAX_SPEEDUP),
            "ci95": ci,
            "pct_roofline": _number(raw.get("pct_roofline"), f"{where}.pct_roofline", 0.0, 1e6),
            "max_abs_err": _number(raw.get("max_abs_err"), f"{where}.max_abs_err", 0.0, 1e30)}


def _side(raw, where: str) -> dict | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise UnsafeArtifact(f"{where} must be a mapping")
    return {k: _number(raw.get(k), f"{where}.{k}", 0, MAX_COUNT, integer=True)
            for k in ("passed", "failed", "errors")}


@dataclass
class Evidence:
    """What publishing accepts from a run directory: validated numbers, names and the verify record."""

    path: Path
    finished: bool = False                   # result.json present
    base_sha: str | None = None
    geomean: float | None = None
    timed: bool = False
    shapes: list[dict] = field(default_factory=list)
    device: dict = field(default_factory=dict)   # name, driver, torch, triton: LABEL_RE or None
    counts: dict = field(default_factory=dict)   # proposals, evaluations, accepted, wall_s
    rejected: dict = field(default_factory=dict)  # reason -> count
    winner: dict | None = None               # {"id": int, "parent": int | None}
    rewrites: list[dict] = field(default_factory=list)  # the winner's: transform, kernel, axis, knobs
    replay: dict | None = None               # a rebase's outcome: applied, accepted, reason, error
    verify_status: str | None = None
    verify_sides: dict = field(default_factory=dict)  # base / winner: passed, failed, errors

    def summary(self) -> dict:
        """The result fields the state keeps (kernelsmith.onboard.state.summarize_result's input)."""
        return {"geomean_speedup": self.geomean, "timed": self.timed,
                "accepted": self.counts.get("accepted"), "evaluations": self.counts.get("evaluations"),
                "winner": self.winner, "base_sha": self.base_sha}


def load_evidence(run_dir: str | os.PathLike) -> Evidence:
    """Read and validate result.json and verify.json of a run directory (see the module doc)."""
    root = Path(run_dir)
    ev = Evidence(path=root)
    result = _json(root, "result.json")
    if result is not None:
        _read_result(ev, result)
    verify = _json(root, "verify.json")
    if verify is not None:
        ev.verify_status = verify.get("status")
        if ev.verify_status not in VERIFY_STATUSES:
            raise UnsafeArtifact(f"verify.json: status must be one of {', '.join(VERIFY_STATUSES)}")
        failed = ev.verify_status == "regression"
        if _bool(verify.get("regression"), "verify.json: regression", failed) != failed:
            raise UnsafeArtifact("verify.json: regression disagrees with status")
        ev.verify_sides = {k: _side(verify.get(k), f"verify.json: {k}") for k in ("base", "winner")}
    return ev


def _read_result(ev: Evidence, result: dict) -> None:
    w = "result.json:"
    ev.finished = True
    ev.base_sha = _name(result.get("base_sha"), f"{w} base_sha", SHA_RE)
    ev.geomean = _number(result.get("geomean_speedup"), f"{w} geomean_speedup", 0.0, MAX_SPEEDUP)
    if ev.geomean == 0.0:
        raise UnsafeArtifact(f"{w} geomean_speedup must be positive")
    ev.timed = _bool(result.get("timed"), f"{w} timed", ev.geomean is not None)
    shapes = result.get("shapes") or []
    if not isinstance(shapes, list) or len(shapes) > MAX_SHAPES:
        raise UnsafeArtifact(f"{w} shapes must be a list of at most {MAX_SHAPES}")
    ev.shapes = [_shape_row(s, f"{w} shapes[{i}]") for i, s in enumerate(shapes)]
    dev = result.get("device") or {}
    if not isinstance(dev, dict):
        raise UnsafeArtifact(f"{w} device must be a mapping")
    # Unrecognised text is dropped ("n/a" in the body), not an error: it is decoration, not evidence.
    ev.device = {k: dev.get(k) if isinstance(dev.get(k), str) and LABEL_RE.match(dev.get(k)) else None
                 for k in ("name", "driver", "torch", "triton")}
    ev.counts = {k: _number(result.get(k), f"{w} {k}", 0, MAX_COUNT, integer=True)
                 for k in ("proposals", "evaluations", "accepted")}
    ev.counts["wall_s"] = _number(result.get("wall_s"), f"{w} wall_s", 0.0, 1e8)
    rejected = result.get("rejected") or {}
    if not isinstance(rejected, dict) or len(rejected) > 64:
        raise UnsafeArtifact(f"{w} rejected must be a mapping of reason to count")
    ev.rejected = {_name(k, f"{w} rejected key", REASON_RE, optional=False):
                   _number(v, f"{w} rejected.{k}", 0, MAX_COUNT, integer=True, optional=False)
                   for k, v in rejected.items()}
    winner = result.get("winner")
    if winner:
        if not isinstance(winner, dict):
            raise UnsafeArtifact(f"{w} winner must be a mapping")
        ev.winner = {k: _number(winner.get(k), f"{w} winner.{k}", 0, MAX_COUNT, integer=True)
                     for k in ("id", "parent")}
        ev.rewrites = _rewrites(winner.get("rewrites"), f"{w} winner.rewrites")
    replay = result.get("replay")
    if replay is not None:
        if not isinstance(replay, dict):
            raise UnsafeArtifact(f"{w} replay must be a mapping")
        error = replay.get("error")
        ev.replay = {"applied": _bool(replay.get("applied"), f"{w} replay.applied", False),
                     "accepted": _bool(replay.get("accepted"), f"{w} replay.accepted", False),
                     "reason": _name(replay.get("reason"), f"{w} replay.reason", REASON_RE),
                     # Shown only inside a code block (bot/prbody.py fence); bounded here.
                     "error": error[:2000] if isinstance(error, str) else None}


def _rewrites(raw, where: str) -> list[dict]:
    """winner.rewrites: fields only, each checked (the PR body renders its sentence from them)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_REWRITES:
        raise UnsafeArtifact(f"{where} must be a list of at most {MAX_REWRITES}")
    out = []
    for i, r in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(r, dict):
            raise UnsafeArtifact(f"{at} must be a mapping")
        if not isinstance(r.get("transform"), str) or r["transform"] not in TRANSFORMS:
            raise UnsafeArtifact(f"{at}.transform must be one of {', '.join(TRANSFORMS)}")
        transform = r["transform"]
        kernel = _name(r.get("kernel"), f"{at}.kernel", KERNEL_RE, optional=False)
        axis = _number(r.get("axis"), f"{at}.axis", 0, MAX_AXIS, integer=True)
        if (axis is None) == (transform in AXIAL):
            raise UnsafeArtifact(f"{at}.axis must be {'an axis' if axis is None else 'null'} for {transform}")
        knobs = r.get("knobs", {})
        count = 1 if transform in KNOBBED else 0  # each transformation adds one launcher literal or none
        if not isinstance(knobs, dict) or len(knobs) != count:
            raise UnsafeArtifact(f"{at}.knobs must be a mapping of {count} knob(s) for {transform}")
        knobs = {_name(k, f"{at}.knobs key", KEY_RE, optional=False):
                 _number(v, f"{at}.knobs.{k}", 1, MAX_KNOB, integer=True, optional=False)
                 for k, v in knobs.items()}
        out.append({"transform": transform, "kernel": kernel, "axis": axis, "knobs": knobs})
    return out


def check_rewrite_kernels(ev: Evidence, winner_code: str) -> None:
    """UnsafeArtifact unless every kernel `winner.rewrites` names is a function the winner defines."""
    tree = ast.parse(winner_code)  # read_winner checked that it parses
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    for i, r in enumerate(ev.rewrites):
        if r["kernel"] not in defined:
            raise UnsafeArtifact(f"result.json: winner.rewrites[{i}].kernel is not a function defined in "
                                 "the winner's file")


def read_winner(run_dir: str | os.PathLike, file_rel: str) -> str | None:
    """winner/<basename of the yaml's file>: UTF-8 Python source that parses, at most MAX_WINNER_BYTES;
    None when the run has none."""
    name = PurePosixPath(file_rel).name
    raw = read_plain(Path(run_dir), f"winner/{name}", MAX_WINNER_BYTES)
    if raw is None:
        return None
    try:
        code = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UnsafeArtifact(f"winner/{name}: not UTF-8 text") from None
    try:
        ast.parse(code, filename=name)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise UnsafeArtifact(f"winner/{name}: does not parse as Python; refused") from None
    return code


def stage_plain_files(src: Path, dest: Path, log=None) -> list[str]:
    """Copy the regular, singly-linked files under `src` to `dest` (symlinks, hardlinks, devices and
    anything over MAX_STAGED_BYTES in all are left out and named); returns the copied paths."""
    log = log or (lambda text: print(text, file=sys.stderr))
    copied, total = [], 0
    if not src.is_dir() or src.is_symlink():
        log(f"stage: {src} is not a folder; nothing staged")
        return copied
    for folder, dirs, files in os.walk(src, followlinks=False):
        here = Path(folder)
        for d in list(dirs):
            if (here / d).is_symlink():
                log(f"stage: left out {(here / d).relative_to(src)} (a symlink)")
                dirs.remove(d)
        for name in sorted(files):
            rel = (here / name).relative_to(src).as_posix()
            try:
                data = read_plain(src, rel, MAX_STAGED_BYTES - total)
            except (UnsafeArtifact, OSError) as e:
                log(f"stage: left out {rel} ({e})")
                continue
            if data is None:
                continue
            total += len(data)
            out = dest / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            copied.append(rel)
    return copied


def main(argv: list[str] | None = None) -> int:
    """`python -m bot.artifact stage RUN_DIR DEST`: what the workflow uploads."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "stage":
        print("usage: python -m bot.artifact stage RUN_DIR DEST", file=sys.stderr)
        return 2
    dest = Path(args[2])
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    copied = stage_plain_files(Path(args[1]), dest)
    print(f"staged {len(copied)} plain files from {args[1]} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
