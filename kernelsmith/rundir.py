"""Run directories (docs/design.md): run.json, archive.sqlite, winner/, result.json, report files."""

from __future__ import annotations

import errno
import json
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kernelsmith.errors import ConfigError


@dataclass
class RunDir:
    """A run directory as read back: its JSON files and the winning code."""

    path: Path
    run: dict
    result: dict | None
    verify: dict | None
    winner_code: str | None

    @property
    def archive_path(self) -> Path:
        """The run's archive.sqlite."""
        return self.path / "archive.sqlite"


def _read_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(path, f"invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "must hold a JSON object")
    return data


def load_run(run_dir: str | os.PathLike) -> RunDir:
    """Read a run directory; ConfigError when it has no run.json."""
    path = Path(run_dir).resolve()
    run = _read_json(path / "run.json")
    if run is None:
        raise ConfigError(path / "run.json", "not found: not a kernelsmith run directory")
    for key in ("target", "op", "file"):
        if key not in run:
            raise ConfigError(path / "run.json", "missing required field", key)
    winner = path / "winner" / Path(run["file"]).name
    return RunDir(
        path=path,
        run=run,
        result=_read_json(path / "result.json"),
        verify=_read_json(path / "verify.json"),
        winner_code=winner.read_text() if winner.is_file() else None,
    )


def write_json(path: Path, data) -> None:
    """Write JSON atomically (a temporary file renamed over the target)."""
    write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write a text file atomically; a failure (full disk, no permission) is a ConfigError naming
    the file, and the old file, if any, is left as it was."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        todo = "free disk space" if e.errno == errno.ENOSPC else "make the run directory writable"
        raise ConfigError(path, f"cannot be written ({e.strerror or e}); {todo}, then run the command "
                          "again (an optimize run continues with --resume)") from None


def default_run_dir(target_name: str, op: str) -> Path:
    """runs/<target>-<op>-<UTC time> under the current folder."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{target_name}-{op}-{stamp}"


def versions() -> dict:
    """kernelsmith, python, torch and triton versions (torch/triton None when absent)."""
    from kernelsmith import __version__

    out = {"kernelsmith": __version__, "python": platform.python_version(), "torch": None, "triton": None}
    for mod in ("torch", "triton"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            pass
    return out


def run_json(
    task,
    *,
    seed: int,
    budget: int | None,
    minutes: float | None,
    mutator: str,
    device: str,
    gpus: list,
    argv: list[str] | None,
) -> dict:
    """The run.json record of a new run (docs/design.md, Run directory, lists the keys)."""
    return {
        "target": str(task.target.path),
        "op": task.operator.name,
        "repo": task.target.repo,
        "file": task.operator.file,
        "checkout": str(task.root),
        "base_sha": task.base_sha,
        "base_release": getattr(task, "base_release", None),
        "seed": seed,
        "budget": budget,
        "minutes": minutes,
        "mutator": mutator,
        "device": device,
        "gpus": gpus,
        "argv": list(argv if argv is not None else sys.argv),
        "versions": versions(),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


# run.json fields a resume reads as numbers or lists: (allowed types, what they must be).
_FIELDS = {
    "seed": ((int,), "an integer"),
    "budget": ((int, type(None)), "an integer or null"),
    "minutes": ((int, float, type(None)), "a number or null"),
    "islands": ((int, type(None)), "an integer or null"),
    "exploit": ((int, float, type(None)), "a number or null"),
    "stagnation": ((int, type(None)), "an integer or null"),
    "pipeline": ((int, type(None)), "an integer or null"),
    "batch": ((int, type(None)), "an integer or null"),
    "mutator": ((str,), "a string"),
    "device": ((str,), "a string"),
    "checkout": ((str,), "a string"),
    "base_sha": ((str,), "a string"),
}


def check_run_fields(run: dict, path: Path) -> None:
    """ConfigError naming run.json and the field when a field a resume relies on is missing or of
    the wrong type (JSON true is no integer; gpus is a list of device indices or nulls)."""
    for key, (kinds, what) in _FIELDS.items():
        if key in ("seed", "mutator", "device", "checkout", "base_sha") and key not in run:
            raise ConfigError(path, "missing required field", key)
        value = run.get(key)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise ConfigError(path, f"must be {what}, not {json.dumps(value)}; restore it or start a "
                              "new run", key)
    gpus = run.get("gpus")
    if not isinstance(gpus, list) or not gpus or any(
            g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 0) for g in gpus):
        raise ConfigError(path, f"must be a list of device indices, not {json.dumps(gpus)}; restore it "
                          "or start a new run", "gpus")
