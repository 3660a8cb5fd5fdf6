"""When the base itself fails: the harness or the environment is at fault, and what to change.

The base (the unmodified upstream file) is trusted, so a rejection of the base is never a verdict
on code: it names the failing check, the shape and the likely fix, for `evaluate`, `optimize`
and `harness check`. A shape that needs more device memory than is free (memory.py) is neither:
the message names the shape, its need and the memory free.
"""

from __future__ import annotations

import os
import re
import traceback

NOT_A_CANDIDATE = "the harness or the environment, not a candidate"
INTERPRETER_GAP = "the Triton interpreter cannot run this"
_GAP_LINE = re.compile(r"^kernel [^\n]*" + re.escape(INTERPRETER_GAP) + r"[^\n]*$", re.M)
_OUTPUTS_LINE = re.compile(r"OutputsError: ([^\n]+)")

# (violation, text pattern or None, likely fix): the first row whose violation and pattern match.
FIXES: list[tuple[str, str | None, str]] = [
    ("crash", re.escape(INTERPRETER_GAP),
     "the kernel fails inside the Triton interpreter at the line named (an operation it lacks, or a "
     "value it handles unlike compiled Triton): run it on a GPU (--device cuda); if the line is yours "
     "to change, check what it does with the inputs make_inputs builds"),
    ("crash", r"OutputsError",
     "OUTPUTS names a position where the entry returns no tensor: name only the positions of tensors "
     "(the skeleton of `kernelsmith harness new` lists what the entry returns), or return what to "
     "compare from a `call(entry, inputs)` hook"),
    ("crash", r"NotImplementedError.*reference|reference.*NotImplementedError|TODO: write the reference",
     "the harness's `reference` is not written yet (the skeleton's TODO): compute the expected "
     "output(s) independently of the kernel, in float32 if you like"),
    ("crash", r"size of tensor \w+ \(\d+\) must match|must match the size|shape .* doesn't match",
     "tensor sizes depend on the seed (a paged cache whose block count follows random lengths): make "
     "every size in make_inputs follow `shape` and `seed` together, so all tensors of one call agree; "
     "the referee's buffers follow each trial's inputs"),
    ("crash", r"active drivers|get_current_target|Torch not compiled with CUDA|no NVIDIA driver|"
              r"Found no NVIDIA driver|CUDA driver",
     "the kernel file asks for a GPU beyond what the interpreter's stand-ins give (active driver, "
     "device properties): add a small stand-in module under the yaml's `stubs:`, or use --device cuda"),
    ("import_error", r"active drivers|get_current_target|Torch not compiled with CUDA|CUDA driver|"
                     r"no NVIDIA driver",
     "the kernel file asks Triton's active driver or torch.cuda for the GPU at import: under the "
     "interpreter kernelsmith gives it a driver stand-in (an H200); a query it still cannot answer "
     "needs a stand-in module under the yaml's `stubs:`, or --device cuda"),
    ("import_error", r"No module named",
     "the kernel file imports a module this environment lacks: list a small stand-in under the yaml's "
     "`stubs:` (module: path), or install the dependency"),
    ("import_error", None,
     "the operator's `file` or its imports cannot load: check `file`, `entry` and `stubs:` in the yaml "
     "and the checkout (--checkout)"),
    ("crash", None,
     "the base raised on this shape: check that make_inputs builds the arguments the entry expects "
     "(names, dtypes, device, contiguity) and that the shape is one the kernel supports"),
    ("dtype_mismatch", None,
     "the outputs' dtypes differ between calls or from what OUTPUTS names: `reference` may compute in "
     "float32 (values are compared after a cast), but OUTPUTS must name the tensors the entry writes"),
    ("shape_mismatch", None,
     "`reference` returns another shape than the base's output: return exactly what the entry returns "
     "(or the OUTPUTS tensors, in that order)"),
    ("unwritten_output", None,
     "the base leaves elements of a write-only output unwritten: if it fills only part of that output "
     "(a cache written at some slots), list the output in INPLACE so it is not poisoned"),
    ("input_mutation", None,
     "the base writes to an input: list it in OUTPUTS (or INPLACE when it also reads it)"),
    ("nondeterministic", None,
     "two runs of the base disagree: with atomics set NONDETERMINISTIC = True; a partly written output "
     "belongs in INPLACE"),
    ("incorrect", None,
     "the base disagrees with `reference` beyond the tolerance: check the reference's math and rounding "
     "order against the kernel (cast where the kernel casts), and TOLERANCE for the output's dtype"),
    ("precision_downgrade", None,
     "the base's outputs all fit a narrower float type: draw inputs that are not exactly representable "
     "(torch.randn, not small integers), or return the reference at the output's precision"),
    ("wrong_on_fresh_shape", r"reference returns",
     "on a VARY shape the reference's output has another shape than the base's: size every tensor that "
     "shares a dimension from the same shape field, so redrawing a VARY field resizes all of them"),
    ("wrong_on_fresh_shape", None,
     "the base fails on a VARY shape: VARY values must be sizes the base supports"),
    ("reused_output", None,
     "the entry returns a buffer it keeps between calls: give the harness a `bind(module)` that calls "
     "the entry and returns a copy, or harness a function whose outputs are fresh"),
    ("timeout", None,
     "the base takes longer than the limit: smaller CPU_SHAPES under the interpreter, or --timeout"),
    ("compile_error", None,
     "the base's kernels do not compile here: check triton's version, or use --device cuda"),
    ("no_kernel_launch", None,
     "the base launches no kernel on this shape: pick shapes that take the kernel path"),
    # The base timed against itself: no forgery, so the machine disturbed one of the two timings.
    ("forged_timing", r"timed again / kept: ([1-9]\d*) / \1\b",
     "the entry waits for the device inside every call (each repetition came late: an `.item()`, "
     "`.cpu()` or synchronize between its kernels), so its times include host work and move with the "
     "machine's load: run it where nothing else uses the GPU or its CPUs (no other search, benchmark "
     "or build), and compare again"),
    ("forged_timing", None,
     "the runner's and the judge's timings of the base itself disagree, so the machine disturbed one "
     "of them: run it where nothing else uses the GPU or its CPUs (no other search, benchmark or "
     "build), and compare again"),
    ("out_of_memory", None,
     "the base's process ran out of host memory: raise $KERNELSMITH_CANDIDATE_MEMORY or use smaller "
     "shapes"),
]
DEVICE_SHORT_FIX = ("a device with more free memory (other processes on it hold some), or a smaller "
                    "shape in SHAPES (this one alone needs more than is free)")
GENERIC = ("the base does something the referee forbids candidates (see the message): check the "
           "harness's inputs and the environment")


def likely_fix(reason: str | None, text: str = "") -> str:
    """The likely fix for the base failing `reason`, given the messages and error text."""
    for name, pattern, fix in FIXES:
        if name == reason and (pattern is None or re.search(pattern, text or "", re.S)):
            return fix
    return GENERIC


def _triton_file(filename: str) -> bool:
    """Whether a traceback frame is Triton's own code (the interpreter, triton.language)."""
    import triton  # imported already: an InterpreterError came from it

    return os.path.realpath(filename).startswith(os.path.dirname(os.path.realpath(triton.__file__)) + os.sep)


def interpreter_failure(exc: BaseException) -> str | None:
    """For an exception raised inside a kernel the Triton interpreter ran, one line naming the
    kernel's file:line and function, the error, and that the interpreter cannot run it; else None."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        inner = e.__cause__ or e.__context__
        if type(e).__name__ == "InterpreterError" and type(e).__module__.startswith("triton") and inner:
            frames = [f for f in traceback.extract_tb(inner.__traceback__) if not _triton_file(f.filename)]
            if frames:
                f = frames[-1]
                what = f"{type(inner).__name__}: {inner}".strip()[:300]
                return f"kernel {f.filename}:{f.lineno} in {f.name}: {what}: {INTERPRETER_GAP}"
        e = inner
    return None


def interpreter_gap_line(text: str) -> str | None:
    """The line `interpreter_failure` wrote into an error text (the last one), or None."""
    found = _GAP_LINE.findall(text or "")
    return found[-1].strip() if found else None


def key_line(text: str) -> str | None:
    """The line of an error text that says why the base failed, where one does: a kernel line the
    interpreter cannot run, or the harness's OUTPUTS naming a position that holds no tensor."""
    found = _OUTPUTS_LINE.findall(text or "")
    return interpreter_gap_line(text) or (found[-1].strip() if found else None)


def _shape_text(shape) -> str:
    if isinstance(shape, dict):
        return ",".join(f"{k}={v}" for k, v in shape.items())
    return "(before any shape: loading the file or the harness)"


def memory_short(short: dict) -> str:
    """Several lines: a shape of the base does not fit the device's free memory."""
    from kernelsmith.referee.memory import format_bytes

    need = short.get("need_bytes")
    lines = ["the referee cannot run the base on one of its shapes: it needs more device memory than "
             "is free (a limit of this device, not a fault of the harness or of the base).",
             "  check: out_of_memory",
             f"  shape: {_shape_text(short.get('shape'))}",
             f"  what: {short.get('what')} needs "
             f"{format_bytes(need) if need is not None else 'more than is free'} of device memory; "
             f"{format_bytes(short.get('free_bytes'))} is free"]
    if short.get("input_set_bytes") is not None:
        lines.append(f"  one input set: {format_bytes(short['input_set_bytes'])}; its outputs: "
                     f"{format_bytes(short.get('output_bytes'))}")
    lines.append(f"  likely fix: {DEVICE_SHORT_FIX}")
    return "\n".join(lines)


def base_failure(verdict) -> str:
    """Several lines: the base failed, so the harness or the environment is at fault, and how (or
    a shape needs more device memory than is free: `memory_short`)."""
    data = verdict.to_json() if hasattr(verdict, "to_json") else dict(verdict or {})
    details = data.get("details") or {}
    if isinstance(details.get("memory_short"), dict):
        return memory_short(details["memory_short"])
    messages = details.get("messages") or []
    reason = data.get("reason") or (data.get("violations") or [None])[0]
    text = "\n".join([*messages, data.get("error") or ""])
    first = (messages[0] if messages else (data.get("error") or "").strip().splitlines()[-1:] or [""])
    first = first if isinstance(first, str) else (first[0] if first else "")
    first = key_line(text) or first
    lines = [f"the referee rejects the base itself: {NOT_A_CANDIDATE}.",
             f"  check: {reason}",
             f"  shape: {_shape_text(details.get('failed_shape'))}"]
    if first:
        lines.append(f"  what: {first.strip()[:400]}")
    lines.append(f"  likely fix: {likely_fix(reason, text)}")
    return "\n".join(lines)
