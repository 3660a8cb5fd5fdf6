"""Run directories (docs/design.md): run.json, archive.sqlite, winner/, result.json, report files."""

from __future__ import annotations

import errno
import json
import os
import platform
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.runspec import RunSpec


@dataclass
class RunDir:
    """A run directory as read back: its settings, its JSON files and the winning code."""

    path: Path
    run: RunSpec
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
    """Read a run directory; ConfigError when its run.json is missing or not a run.json."""
    path = Path(run_dir).resolve()
    run = RunSpec.load(path)
    winner = path / "winner" / Path(run.file).name
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
