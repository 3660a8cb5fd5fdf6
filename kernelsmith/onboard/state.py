"""Per-operator state across runs: last optimized source hash, result summary, PR, ignored flag.

One JSON file, `cache_dir()/state.json`, keyed by "<target>/<op>" (the target is the yaml's stem).
Scheduled runs compare an operator's current source hash with the recorded one and skip what has
not changed; the bot mirrors the same dict in a hidden block of its dashboard issue.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.paths import cache_dir
from kernelsmith.runspec import RunSpec

STATE_VERSION = 1


def state_path() -> Path:
    """Where the state file lives: $KERNELSMITH_STATE, else cache_dir()/state.json."""
    explicit = os.environ.get("KERNELSMITH_STATE")
    return Path(explicit) if explicit else cache_dir() / "state.json"


def empty_state() -> dict:
    """A state with no operators recorded."""
    return {"version": STATE_VERSION, "operators": {}}


def load_state(path: str | Path | None = None) -> dict:
    """Read the state file; a missing file is an empty state, a corrupt one an error naming it."""
    path = Path(path) if path is not None else state_path()
    if not path.exists():
        return empty_state()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise KernelsmithError(f"{path}: unreadable state file ({e}); delete it to start over") from None
    return normalize_state(data, path)


def normalize_state(data, where: object = "state") -> dict:
    """Validate a state dict (from the file or the dashboard's hidden block) and fill defaults."""
    if not isinstance(data, dict) or not isinstance(data.get("operators", {}), dict):
        raise KernelsmithError(f"{where}: state must be a mapping with an 'operators' mapping")
    ops = {str(k): dict(v) for k, v in data.get("operators", {}).items() if isinstance(v, dict)}
    return {"version": int(data.get("version", STATE_VERSION)), "operators": ops}


def save_state(state: dict, path: str | Path | None = None) -> Path:
    """Write the state atomically (write a sibling temp file, then rename) and return its path."""
    path = Path(path) if path is not None else state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    state = normalize_state(state)
    fd, tmp = tempfile.mkstemp(prefix=".state-", suffix=".json", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def op_key(target: str, op: str) -> str:
    """The state key of one operator: "<target>/<op>"."""
    return f"{target}/{op}"


def source_hash(text: str | bytes) -> str:
    """The hash scan and state use for an operator's source: sha256 of the file with LF endings."""
    if isinstance(text, str):
        text = text.encode()
    return hashlib.sha256(text.replace(b"\r\n", b"\n")).hexdigest()


def entry(state: dict, target: str, op: str) -> dict:
    """The recorded entry of an operator (an empty dict when never recorded)."""
    return dict(state.get("operators", {}).get(op_key(target, op), {}))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _update(state: dict, target: str, op: str, **fields) -> dict:
    ops = state.setdefault("operators", {})
    current = ops.setdefault(op_key(target, op), {})
    current.update(fields)
    return current


def record_run(state: dict, target: str, op: str, *, source_hash: str, result: dict | None = None,
               run_dir: str | Path | None = None, verify_status: str | None = None) -> dict:
    """Record that `op` was optimized at `source_hash`, with a short result summary."""
    summary = summarize_result(result) if result is not None else None
    return _update(state, target, op, source_hash=source_hash, result=summary,
                   run_dir=str(run_dir) if run_dir is not None else None,
                   verify_status=verify_status, optimized_at=_now())


def record_pr(state: dict, target: str, op: str, *, number: int, url: str, state_name: str = "open") -> dict:
    """Record the pull request opened (or updated) for `op`."""
    return _update(state, target, op, pr={"number": int(number), "url": url, "state": state_name,
                                          "updated_at": _now()})


def set_ignored(state: dict, target: str, op: str, ignored: bool = True) -> dict:
    """Mark `op` ignored (a maintainer said stop) or watched again."""
    return _update(state, target, op, ignored=bool(ignored))


def summarize_result(result: dict) -> dict:
    """The few result.json fields worth keeping between runs."""
    winner = result.get("winner") or None
    return {
        "geomean_speedup": result.get("geomean_speedup"),
        "timed": result.get("timed"),
        "accepted": result.get("accepted"),
        "evaluations": result.get("evaluations"),
        "winner_id": winner.get("id") if isinstance(winner, dict) else None,
        "base_sha": result.get("base_sha"),
    }


def staleness(state: dict, target: str, op: str, current_hash: str) -> tuple[bool, str]:
    """(stale?, why): never optimized, changed since the last run, or unchanged (not stale)."""
    recorded = entry(state, target, op)
    if not recorded.get("source_hash"):
        return True, "never optimized"
    if recorded["source_hash"] != current_hash:
        when = recorded.get("optimized_at") or "the last run"
        return True, f"changed since {when}"
    return False, f"unchanged since {recorded.get('optimized_at') or 'the last run'}"


def record_run_dir(run_dir: str | Path, *, verify_status: str | None = None,
                   path: str | Path | None = None) -> dict:
    """Record a finished run directory (run.json + result.json) in the state file and save it."""
    run_dir = Path(run_dir)
    run = RunSpec.load(run_dir)
    result = None
    if (run_dir / "result.json").exists():
        try:
            result = json.loads((run_dir / "result.json").read_text())
        except ValueError as e:
            raise KernelsmithError(f"{run_dir}/result.json: invalid JSON ({e})") from None
    from kernelsmith.onboard.checkout import read_at_base

    base_code = read_at_base(Path(run.checkout), run.base_sha, run.file)
    if base_code is None:
        raise KernelsmithError(f"{run.checkout}/{run.file}: operator file missing at the base; "
                               "cannot record its source hash")
    state = load_state(path)
    record_run(state, Path(run.target).stem, run.op, source_hash=source_hash(base_code), result=result,
               run_dir=run_dir.resolve(), verify_status=verify_status)
    save_state(state, path)
    return state
