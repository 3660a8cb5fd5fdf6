"""The checks of `kernelsmith harness check` that run the harness and the base: a child process.

`python -m kernelsmith.onboard.harness_probe SPEC_JSON` (spec: root, file, entry, harness, stubs, device)
prints one JSON line {"problems": [[check, message, fix], ...], "passed": N} on a private copy of
stdout; anything the harness or the kernel prints goes to stderr. With {"load_only": true,
"harness": path} it only imports and validates the harness (`scan`): {"loaded": true}. A harness
that does not load answers {"config_error": {"message", "field"}}. harness/box.py starts it, inside
the sandbox (the harness is target code), and checks what it answers. It runs in its own process
also because the interpreter's stand-ins patch process globals (Triton's driver, torch.cuda).
"""

from __future__ import annotations

import json
import sys
import traceback

import torch

from kernelsmith.errors import ConfigError
from kernelsmith.harness.entry import OutputsError
from kernelsmith.harness.model import load_harness
from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks.diagnose import interpreter_failure, likely_fix
from kernelsmith.sandbox.spawn import private_stdout

SEEDS = (101, 101, 202)  # the same seed twice (determinism), then another (sensitivity)
CONTROL_FIX = ("tighten TOLERANCE for this dtype, or draw inputs whose outputs are not all tiny "
               "(the reference should not be all zeros)")


class Probe:
    """Collects problems (check, message, fix) and counts the checks that passed."""

    def __init__(self):
        self.problems: list[list[str]] = []
        self.passed = 0

    def expect(self, ok: bool, check: str, message: str, fix: str) -> bool:
        if ok:
            self.passed += 1
        else:
            self.problems.append([check, message, fix])
        return ok


def _equal(x, y) -> bool:
    """Bitwise for tensors, element by element for lists, tuples and dicts, `==` otherwise."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and C.same_bits(x, y)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(_equal(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_equal(x[k], y[k]) for k in x)
    if callable(x) or callable(y):
        return type(x) is type(y)
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001 - not comparable: no evidence either way
        return True


def _same_inputs(a: dict, b: dict, skip: set[str]) -> bool:
    return set(a) == set(b) and all(_equal(v, b[k]) for k, v in a.items() if k not in skip)


def _differs(a: dict, b: dict, skip: set[str]) -> bool:
    return any(not _equal(v, b.get(k)) for k, v in a.items() if k not in skip)


def controls(b: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Wrong answers the tolerance must reject, built from the base's output `b`."""
    out = []
    if b.is_floating_point():
        f = b.detach().float()
        finite = f[torch.isfinite(f)]
        scale = float(finite.abs().max()) if finite.numel() else 1.0
        scale = scale if scale > 0 else 1.0
        out.append(("zeros", torch.zeros_like(b)))
        # Every other element; a one-element output (a loss with reduction="sum") has that one
        # element off, or the control would equal the base and pass any tolerance.
        odd = torch.arange(f.numel(), device=f.device) % 2
        pattern = (odd if f.numel() > 1 else 1 - odd).reshape(f.shape).to(f.dtype)
        what = "half the elements" if f.numel() > 1 else "the one element"
        out.append((f"a dropped term ({what} off by 5% of the output's scale)",
                    (f - 0.05 * scale * pattern).to(b.dtype)))
        flat = f.reshape(-1).clone()
        k = max(1, flat.numel() // 100)
        idx = flat.abs().nan_to_num(0.0).topk(k).indices
        # Shrunk, never grown (fp8 saturates), by 10% or 4 ulps of the dtype (fp8's ulp is 12.5%).
        off = max(0.1, 4 * torch.finfo(b.dtype).eps)
        flat[idx] = flat[idx] * (1 - off)
        out.append((f"a 1% perturbation (1% of the elements, the largest, off by {off:.0%})",
                    flat.reshape(f.shape).to(b.dtype)))
        holed = f.reshape(-1).clone()
        holed[-1] = float("nan")
        out.append(("an unwritten output (one NaN element)", holed.reshape(f.shape).to(b.dtype)))
    elif b.numel():
        if bool((b != 0).any()):
            out.append(("zeros", torch.zeros_like(b)))
        flat = b.detach().reshape(-1).clone()
        k = max(1, flat.numel() // 100)
        flat[:k] = ~flat[:k] if b.dtype == torch.bool else flat[:k] + 1
        out.append(("a 1% perturbation (1% of the elements changed)", flat.reshape(b.shape)))
    return out


def check_tolerance(p: Probe, h, where: str, b: torch.Tensor, e: torch.Tensor) -> None:
    """The base's error must sit well inside the tolerance, and an override must not be far looser."""
    if not b.is_floating_point():
        return
    name = str(b.dtype).replace("torch.", "")
    atol, rtol = h.tolerance_for(name)
    o, ee = C.common_view(b, e)
    ok = torch.isfinite(o) & torch.isfinite(ee)
    if not bool(ok.any()):
        return
    o, ee = o[ok].double(), ee[ok].double()
    err = (o - ee).abs()
    used = float((err / (atol + rtol * ee.abs())).max()) if (atol or rtol) else 0.0
    p.expect(used <= 0.5, "tolerance", f"{where}: the base's error uses {used:.0%} of the {name} tolerance",
             "a candidate that rounds slightly differently would fail: compute the reference as the kernel "
             f"rounds, or loosen TOLERANCE['{name}']")
    if name in h.tolerance:  # the defaults are pinned (docs/design.md); an override is the harness's choice
        floor = torch.finfo(b.dtype).eps * float(ee.abs().max())
        base_err = max(float(err.max()), floor, 1e-30)
        room = atol + rtol * float(ee.abs().mean())
        p.expect(room <= 100 * base_err, "tolerance",
                 f"{where}: TOLERANCE['{name}'] allows {room:.3g}, {room / base_err:.0f}x the base's error "
                 f"({base_err:.3g})", "tighten it to a few times the base's error")


def probe(spec: dict) -> Probe:
    """Every check on the harness and on the base, shape by shape."""
    from kernelsmith.loader import load_operator_module

    p = Probe()
    h = load_harness(spec["harness"], spec.get("variant"))
    device = spec["device"]
    dev = "cuda" if device == "cuda" else "cpu"
    if device == "interpret":
        from kernelsmith.referee.backend.interpret import InterpretBackend

        InterpretBackend().init_context()
    p.expect(bool(h.vary), "VARY", "VARY is missing: no fresh shapes are checked, so a candidate specialised "
             "to the listed shapes passes", "add VARY = {shape field: [values]} for the sizes that vary")
    for shape in h.shapes + h.cpu_shapes:
        for label, fn in (("bytes_moved", h.bytes_moved), ("flops", h.flops)):
            if fn is not None:
                try:
                    value = fn(shape)
                except Exception as e:  # noqa: BLE001 - reported as a problem
                    value = f"raised {type(e).__name__}: {e}"
                good = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
                p.expect(good, label, f"{label}({shape}) = {value}",
                         "return a positive number for every shape")
    names = list(h.outputs or [])
    if h.outputs is not None:  # with return values compared, INPLACE only has to name tensor inputs
        p.expect(set(h.inplace) <= set(names), "INPLACE", f"INPLACE {h.inplace} names entries missing from "
                 f"OUTPUTS {names}", "list every INPLACE name in OUTPUTS too")
    base_fn = None
    try:
        stubs = {k: v for k, v in (spec.get("stubs") or {}).items()}
        mod = load_operator_module(spec["root"], spec["file"], tag="probe", stubs=stubs)
        base_fn = h.callable_of(mod, spec["entry"])
    except Exception as e:  # noqa: BLE001 - the referee's run reports it with its fix too
        text = traceback.format_exc()
        p.expect(False, "base", f"the base cannot load: {type(e).__name__}: {e}",
                 likely_fix("import_error", text))
    for shape in h.shapes_for(device):
        where = "shape " + ",".join(f"{k}={v}" for k, v in shape.items())
        if not check_shape(p, h, base_fn, shape, where, dev):
            break
    return p


def check_shape(p: Probe, h, base_fn, shape: dict, where: str, dev: str) -> bool:
    """The per-shape checks; False when checking further shapes is pointless (no reference yet)."""
    names = list(h.outputs or [])
    write_only = {n for n in names if n not in h.inplace}
    try:
        a, b, c = (h.make_inputs(shape, dev, s) for s in SEEDS)
    except Exception as e:  # noqa: BLE001
        p.expect(False, "make_inputs", f"{where}: raises {type(e).__name__}: {e}",
                 "make_inputs(shape, device, seed) must build the entry's keyword arguments")
        return True
    p.expect(_same_inputs(a, b, write_only), "seeded determinism", f"{where}: the same seed gives different "
             "inputs", "draw everything from a torch.Generator seeded with `seed`")
    p.expect(_differs(a, c, write_only), "seed sensitivity", f"{where}: different seeds give the same inputs",
             "draw the inputs from a torch.Generator seeded with `seed` (not a fixed seed)")
    for n in names:
        p.expect(isinstance(a.get(n), torch.Tensor), "OUTPUTS",
                 f"{where}: OUTPUTS names {n!r}, which is not a tensor input (inputs: {sorted(a)})",
                 "OUTPUTS/INPLACE must name tensor inputs the entry writes")
    for n in [] if h.outputs is not None else h.inplace:
        p.expect(isinstance(a.get(n), torch.Tensor), "INPLACE",
                 f"{where}: INPLACE names {n!r}, which is not a tensor input (inputs: {sorted(a)})",
                 "INPLACE must name tensor inputs the entry writes")
    before = C.clone_inputs(a)
    try:
        expected = C.as_tuple(h.reference(**a))
    except NotImplementedError:
        p.expect(False, "reference", "reference not written (the skeleton's TODO)",
                 "compute the expected output(s) independently of the kernel")
        return False
    except Exception as e:  # noqa: BLE001
        p.expect(False, "reference", f"{where}: raises {type(e).__name__}: {e}", "fix the reference")
        return True
    changed = [k for k, v in C.tensors_of(before).items() if not C.same_bits(a[k], v)]
    p.expect(not changed, "reference leaves its inputs alone", f"{where}: the reference modified {changed}",
             "work on copies (x.clone(), x.float()) inside reference")
    if base_fn is None or any(not isinstance(a.get(n), torch.Tensor) for n in names):
        return True
    inputs = C.clone_inputs(before)
    for n in write_only:
        if isinstance(inputs.get(n), torch.Tensor):
            C.poison(inputs[n])
    try:
        ret = base_fn(**inputs)
    except OutputsError as e:
        p.expect(False, "OUTPUTS", f"{where}: {e}", "OUTPUTS may name only positions where the entry "
                 "returns a tensor (or a `call(entry, inputs)` hook may return what to compare)")
        return True
    except Exception as e:  # noqa: BLE001
        gap = interpreter_failure(e)
        text = traceback.format_exc() + (f"\n{gap}" if gap else "")
        said = f"{where}: the base raises {type(e).__name__}: {e}" + (f"; {gap}" if gap else "")
        p.expect(False, "base", said, likely_fix("crash", text))
        return True
    outs = C.as_tuple(ret) if not names else tuple(inputs[n] for n in names)
    fix = ("return one tensor per output, in OUTPUTS order (the entry's returned tensors, in order, unless "
           "OUTPUTS names positions or `call` picks them)")
    if not p.expect(len(outs) == len(expected), "reference", f"{where}: reference returns {len(expected)} "
                    f"outputs, the base {len(outs)}", fix):
        return True
    labels = h.output_labels(len(outs))
    for i, (o, e) in enumerate(zip(outs, expected, strict=True)):
        label = f"{where} {labels[i]}"
        if not (isinstance(o, torch.Tensor) and isinstance(e, torch.Tensor)):
            p.expect(False, "reference", f"{label}: not a tensor", "return tensors")
            continue
        tol = h.tolerance_for(str(o.dtype).replace("torch.", ""))
        chk = C.compare(o.clone(), e, tol, label, like=o)
        if chk.problem == "unwritten_output" and names:
            chk.message += C.unwritten_hint(names[i], o, e, h.inplace)
        fix = likely_fix(chk.problem, chk.message)
        if not p.expect(chk.problem is None, "base vs reference", chk.message, fix):
            continue
        for cname, ctrl in controls(o):
            bad = C.compare(ctrl, e, tol, label, like=o).problem
            p.expect(bad is not None, "negative control", f"{label}: {cname} passes the tolerance",
                     CONTROL_FIX)
        check_tolerance(p, h, label, o, e)
    return True


def main() -> int:
    """Run the probe for the spec in argv[1]; the answer goes to the private stdout copy."""
    answer = private_stdout()  # what the harness prints goes to stderr, never into the answer
    spec = json.loads(sys.argv[1])
    try:
        if spec.get("load_only"):
            load_harness(spec["harness"])
            result = {"loaded": True}
        else:
            p = probe(spec)
            result = {"problems": p.problems, "passed": p.passed}
    except ConfigError as e:  # the harness does not import or lacks a required name
        result = {"config_error": {"message": e.message, "field": e.field}}
    except Exception as e:  # noqa: BLE001 - the harness itself failed to run
        result = {"problems": [["harness", f"{type(e).__name__}: {e}", "fix the harness module"]],
                  "passed": 0}
    answer.write(json.dumps(result) + "\n")
    answer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
