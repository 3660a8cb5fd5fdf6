"""The harness's facts for the search and `export`, gathered in one sandboxed child per command.

`gather` (the parent) starts `python -m kernelsmith.harness.gather SPEC` through harness/box.py, in
the sandbox's "harness" profile (nothing writable but a private scratch, no network, no secrets),
under a wall clock. The child (`main`) imports the harness, calls `make_inputs(shape, "cpu", 0)`
under torch's FakeTensorMode for every listed shape (SHAPES and CPU_SHAPES: what the search uses on
"cuda" and "interpret"), and prints one JSON line: the facts harness/facts.py checks and rebuilds. A
harness that does not load answers {"config_error": ...}; one that crashes, hangs or answers
malformed data is one error naming the harness file. The facts are kept between commands while
every file the harness read is unchanged (harness/factstore.py).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.harness import factstore
from kernelsmith.harness.facts import MAX_TEXT, REFERENCE_LIMIT, HarnessFacts, MalformedFacts, shape_key
from kernelsmith.sandbox.spawn import private_stdout

FACTS_TIMEOUT_S = 300.0  # importing torch and the harness on a busy machine (as harnessbox's loads)
# Facts already gathered in this process, by (harness path, its content's sha256, variant, cwd,
# sandboxed?): `export` of several runs of one operator, and the tests, start one child per
# harness, not per call.
_GATHERED: dict[tuple, HarnessFacts] = {}
_LOCK = threading.Lock()


class HarnessFactsError(KernelsmithError):
    """The harness's facts could not be gathered (its child crashed, hung or answered malformed data)."""


# -- the child ----------------------------------------------------------------------------------
def describe(value) -> dict:
    """One input's metadata: a tensor's shape, stride and dtype, a scalar's value, else its type."""
    import torch

    if isinstance(value, torch.Tensor):
        dims = [int(d) for d in value.shape]
        try:
            stride = [int(s) for s in value.stride()]
        except (RuntimeError, NotImplementedError):  # a sparse or nested tensor: its sizes still count
            stride = [1] * len(dims)
        return {"kind": "tensor", "shape": dims, "stride": stride,
                "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, torch.dtype):
        return {"kind": "dtype", "value": str(value).removeprefix("torch.")}
    kind = {type(None): "none", bool: "bool", int: "int", float: "float", str: "str"}.get(type(value))
    if kind is None or (kind == "int" and not -(1 << 63) <= value < 1 << 63) \
            or (kind == "str" and len(value) > MAX_TEXT):
        return {"kind": "other", "type": type(value).__name__[:100]}
    return {"kind": kind, "value": value}


def _plain_list(h, attr: str, value) -> list:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as e:
        raise ConfigError(h.path, f"must hold plain values (numbers, strings, lists): {e}", attr) from None


def collect(path: str, variant: str | None = None, reads: factstore.ReadLog | None = None) -> dict:
    """The facts of the harness at `path` with the shapes of `variant` (this runs the harness: call
    it only in the sandbox); `reads` records what the harness's code opens meanwhile."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from kernelsmith.harness.model import load_harness

    # The first FakeTensorMode imports torch._dynamo, a thousand files that are torch's, not the
    # harness's reads.
    FakeTensorMode()
    if reads is not None:
        reads.recording = True
    h = load_harness(path, variant)
    records, seen = [], set()
    for shape in h.shapes + h.cpu_shapes:
        key = shape_key(_plain_list(h, "SHAPES", shape))
        if key in seen:
            continue
        seen.add(key)
        try:
            with FakeTensorMode():
                made = h.make_inputs(dict(shape), "cpu", 0)
            if not isinstance(made, dict):
                raise TypeError(f"make_inputs returned {type(made).__name__}, not a dict")
            described = {str(k): describe(v) for k, v in made.items()}
            records.append({"shape": json.loads(key), "inputs": described})
        except Exception as e:  # noqa: BLE001 - fake tensors cannot run it: the search keys no tables on it
            records.append({"shape": json.loads(key), "error": f"{type(e).__name__}: {e}"[:MAX_TEXT]})
    try:
        src = inspect.getsource(h.reference)
    except (OSError, TypeError):
        src = None
    return {"shapes": _plain_list(h, "SHAPES", h.shapes),
            "cpu_shapes": _plain_list(h, "CPU_SHAPES", h.cpu_shapes), "outputs": h.outputs,
            "positions": h.positions, "call": h.call is not None,
            "vary": _plain_list(h, "VARY", h.vary),
            "reference_source": src if src is None or len(src) <= REFERENCE_LIMIT else None,
            "inputs": records}


def main() -> int:
    """Gather the facts for the spec in argv[1]; the answer goes to a private copy of stdout."""
    answer = private_stdout()  # what the harness prints goes to stderr, never into the answer
    spec = json.loads(sys.argv[1])
    reads = factstore.ReadLog(skip=[os.environ.get("TMPDIR", "")])
    try:
        facts = collect(spec["harness"], spec.get("variant"), reads)
        reads.recording = False
        result = {"facts": facts, "reads": reads.answer(Path(__file__).resolve().parents[1])}
    except ConfigError as e:  # the harness does not import or lacks a required name
        result = {"config_error": {"message": e.message, "field": e.field}}
    except Exception as e:  # noqa: BLE001 - the harness itself failed
        traceback.print_exc()
        result = {"config_error": {"message": f"{type(e).__name__}: {e}"[:MAX_TEXT], "field": None}}
    answer.write(json.dumps(result) + "\n")
    answer.flush()
    return 0


# -- the parent ---------------------------------------------------------------------------------
def gather(harness: str | Path, cwd: str | Path, timeout_s: float | None = None,
           variant: str | None = None) -> HarnessFacts:
    """The facts of `harness` with the shapes of `variant`, from one child in the sandbox ("harness"
    profile); ConfigError when the harness does not load, HarnessFactsError (naming it) when its
    child crashes, hangs or answers malformed data. One child per harness file's content, variant
    (and cwd) per process; with the sandbox on, none while the facts kept by an earlier command
    still hold (harness/factstore.py)."""
    from kernelsmith import sandbox

    path = Path(harness).resolve()
    if not path.is_file():
        raise ConfigError(path, "harness file not found")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    folder = Path(cwd).resolve()
    key = (str(path), digest, variant, str(folder), sandbox.enabled())
    with _LOCK:
        if key not in _GATHERED:
            name = factstore.entry_name(path, digest, variant, folder) if sandbox.enabled() else None
            facts = None if name is None else factstore.load(name, path)
            if facts is None:
                started = time.time_ns()
                facts, reads = _gather(path, cwd, timeout_s, variant)
                if name is not None:
                    factstore.save(name, facts, reads, started)
            _GATHERED[key] = facts
        return copy.deepcopy(_GATHERED[key])


def _gather(path: Path, cwd: str | Path, timeout_s: float | None,
            variant: str | None) -> tuple[HarnessFacts, object]:
    """(the facts, what the child says its harness read) from one sandboxed child."""
    from kernelsmith.harness.box import HarnessChildError, config_error, run_child, shown

    try:
        answer = run_child({"harness": str(path), "variant": variant}, harness=path, cwd=cwd, device=None,
                           timeout_s=FACTS_TIMEOUT_S if timeout_s is None else timeout_s,
                           what="harness facts", module="kernelsmith.harness.gather")
        error = config_error(answer, path)
        if error is not None:
            raise error
        return HarnessFacts.from_json(answer.get("facts"), path), answer.get("reads")
    except HarnessChildError as e:
        raise HarnessFactsError(f"{e} (the search reads the harness's shapes and input sizes in this child; "
                                "`kernelsmith harness check` runs it too)") from None
    except MalformedFacts as e:
        raise HarnessFactsError(f"{path}: the harness facts process answered malformed data "
                                f"({shown(e, 300)})") from None


if __name__ == "__main__":
    sys.exit(main())
