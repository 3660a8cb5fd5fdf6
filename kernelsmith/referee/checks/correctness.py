"""Correctness helpers: seeds, fresh shapes, poisoning, output collection and comparison."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

import torch

INT_SENTINEL = -0x5A5A5A5A  # written into integer outputs before a call; clamped to the dtype
_FP8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
        if hasattr(torch, n)}
# Large outputs are compared in slices, so their temporaries stay bounded on the device (memory.py
# plans no room for them): elements compared with the reference at once (float32 copies of 256 MiB),
# and bytes compared bit for bit at once.
COMPARE_CHUNK = 1 << 26
EQUAL_CHUNK = 1 << 28


def derive_seed(run_seed: int, candidate_id: int, *parts) -> int:
    """A 31-bit seed from the run seed, a candidate id (or another tag, such as "listed" for the
    per-run inputs of input_cache.py) and further parts such as the trial."""
    text = ":".join(str(p) for p in (run_seed, candidate_id, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") & 0x7FFFFFFF


FRESH_SHAPE_COUNT = {"cuda": 3}  # fresh shapes per candidate; 2 elsewhere (the interpreter is slow)


def fresh_shapes_for(harness, device: str, run_seed: int, candidate_id: int) -> list[dict]:
    """The fresh shapes the referee checks candidate `candidate_id` on, on `device`."""
    return fresh_shapes(harness.shapes_for(device), harness.vary, run_seed, candidate_id,
                        FRESH_SHAPE_COUNT.get(device, 2))


def fresh_shapes(shapes: list[dict], vary: dict[str, list], run_seed: int, candidate_id: int,
                 count: int) -> list[dict]:
    """Up to `count` new shapes: listed shapes with the VARY fields redrawn (never one of `shapes`)."""
    if not vary or not shapes:
        return []
    rng = random.Random(derive_seed(run_seed, candidate_id, "fresh"))
    out: list[dict] = []
    for _ in range(count * 20):
        if len(out) >= count:
            break
        shape = dict(rng.choice(shapes))
        for key, values in vary.items():
            shape[key] = rng.choice(values)
        if shape not in shapes and shape not in out:
            out.append(shape)
    return out


def tensors_of(inputs: dict) -> dict[str, torch.Tensor]:
    """The tensor-valued entries of an inputs dict."""
    return {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}


def clone_inputs(inputs: dict) -> dict:
    """A deep copy of the tensors (same strides), other values shared."""
    return {k: (_clone_strided(v) if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


def _clone_strided(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def kept_storages(namespace: dict | None, depth: int = 2) -> set[int]:
    """Storage addresses of the tensors a module keeps in its globals (in dicts, lists and tuples too)."""
    found: set[int] = set()

    def visit(value, level):
        if isinstance(value, torch.Tensor):
            found.add(value.untyped_storage().data_ptr())
        elif level < depth and isinstance(value, dict):
            for v in list(value.values())[:256]:
                visit(v, level + 1)
        elif level < depth and isinstance(value, (list, tuple)):
            for v in value[:256]:
                visit(v, level + 1)

    for value in list((namespace or {}).values()):
        if isinstance(value, (torch.Tensor, dict, list, tuple)) and value is not namespace:
            visit(value, 1)
    found.discard(0)
    return found


def poison(t: torch.Tensor, value: float | None = None) -> None:
    """Fill `t` so unwritten elements are visible: NaN for floats, a sentinel for integers."""
    if t.is_floating_point() or t.is_complex():
        if t.dtype in _FP8:
            # 0x7F is NaN in e4m3fn and e5m2; the "fnuz" formats have a single NaN, 0x80.
            t.view(torch.uint8).fill_(0x80 if "fnuz" in str(t.dtype) else 0x7F)
        else:
            t.fill_(float("nan") if value is None else value)
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        info = torch.iinfo(t.dtype)
        t.fill_(max(info.min, min(info.max, INT_SENTINEL)))


def dirty_allocator(device: str, value: float, sizes: list[int] = (), mib: int = 64) -> None:
    """Fill and free memory so buffers the entry allocates itself start as garbage.

    Blocks of the outputs' own byte sizes are what an allocator hands out next (CPU malloc free
    lists, CUDA's small pool); on CUDA a large block also seeds the caching allocator's big pool.
    """
    blocks = []
    try:
        for nbytes in sizes:
            for _ in range(3):
                blocks.append(torch.empty(max(1, -(-nbytes // 4)), dtype=torch.float32, device=device))
        if device == "cuda":
            blocks.append(torch.empty(mib * (1 << 20) // 4, dtype=torch.float32, device=device))
        for b in blocks:
            b.fill_(value)
    except RuntimeError:
        pass
    del blocks


def _flat(t: torch.Tensor) -> torch.Tensor:
    """`t` as a 1-D tensor with unit stride (a one-element slice can keep any stride, which a
    dtype view refuses)."""
    v = t.detach().contiguous().reshape(-1)
    return v if v.numel() == 0 or v.stride(0) == 1 else v.new_empty(v.shape).copy_(v)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN payloads included) of two tensors of the same dtype and shape."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    av, bv = _flat(a), _flat(b).to(a.device)
    if av.dtype != torch.bool:
        av, bv = av.view(torch.uint8), bv.view(torch.uint8)
    # In slices: on CUDA torch.equal makes a bool tensor of its inputs' length.
    return all(bool(torch.equal(av[i:i + EQUAL_CHUNK], bv[i:i + EQUAL_CHUNK]))
               for i in range(0, av.numel(), EQUAL_CHUNK))


def as_tuple(value) -> tuple:
    """A return value as a tuple of outputs."""
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)


@dataclass
class Check:
    """The result of comparing one output with the reference."""

    problem: str | None  # a violation name, or None when the output is correct
    message: str = ""
    max_abs_err: float = 0.0
    mean_abs_err: float = 0.0


def common_view(out: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Both tensors cast to the wider of their dtypes (floats at least float32, fp8 included)."""
    def widened(d):  # torch does not promote fp8: compare it as float32
        return torch.float32 if d in _FP8 else d

    wide = torch.promote_types(widened(out.dtype), widened(expected.dtype))
    if wide.is_floating_point or wide.is_complex:
        if not wide.is_complex and wide != torch.float64:
            wide = torch.float32
    return out.detach().to(wide), expected.detach().to(wide)


def compare(out, expected: torch.Tensor, tol: tuple[float, float], name: str,
            like: torch.Tensor | None = None) -> Check:
    """Compare one output with the reference: type, then dtype and shape against `like` (the base's
    output: upstream behaviour is the interface; the reference itself when absent), then values
    against the reference under `tol` after a cast to their common precision."""
    if not isinstance(out, torch.Tensor):
        return Check("incorrect", f"{name}: expected a tensor, got {type(out).__name__}")
    if type(out) is not torch.Tensor:
        return Check("tensor_subclass", f"{name}: returned a {type(out).__name__}, not a plain torch.Tensor")
    like = expected if like is None else like
    whose = "the reference's" if like is expected else "the base's"
    if out.dtype != like.dtype:
        return Check("dtype_mismatch", f"{name}: dtype {out.dtype}, expected {like.dtype} ({whose})")
    if tuple(out.shape) != tuple(like.shape):
        return Check("shape_mismatch",
                     f"{name}: shape {tuple(out.shape)}, expected {tuple(like.shape)} ({whose})")
    if tuple(expected.shape) != tuple(out.shape):
        return Check("shape_mismatch", f"{name}: shape {tuple(out.shape)} (the base's too), but the "
                     f"reference returns {tuple(expected.shape)}")
    if out.device != expected.device:
        return Check("incorrect", f"{name}: on {out.device}, expected {expected.device}")
    if not (out.is_floating_point() or out.is_complex()):
        o, e = common_view(out, expected)
        if torch.equal(o, e):
            return Check(None)
        bad = int((o != e).sum())
        return Check("incorrect", f"{name}: {bad} of {out.numel()} elements differ (exact match required)")
    if not (expected.is_floating_point() or expected.is_complex()):
        expected = expected.to(out.dtype)
    if out.numel() == 0:
        return Check(None)
    atol, rtol = tol
    flat_out, flat_expected = out.detach().reshape(-1), expected.detach().reshape(-1)
    parts = []
    # In chunks: in one piece the float32 temporaries of a multi-gigabyte output (a paged KV cache)
    # would take several times its size on the device at once.
    for at in range(0, flat_out.numel(), COMPARE_CHUNK):
        o, e = common_view(flat_out[at:at + COMPARE_CHUNK], flat_expected[at:at + COMPARE_CHUNK])
        diff = (o - e).abs()
        finite = torch.isfinite(diff)
        kept = torch.where(finite, diff, diff.new_zeros(()))  # errors >= 0: zeros change no max or sum
        far = ~torch.isclose(o, e, atol=atol, rtol=rtol, equal_nan=True)
        unwritten = torch.isnan(o) & ~torch.isnan(e)
        parts.append(torch.stack([kept.max().double(), kept.sum().double(), finite.sum().double(),
                                  unwritten.sum().double(), far.sum().double()]))
    # Every statistic on the device, then one copy to the host: one wait for the device, not five.
    stats = torch.stack(parts)
    stats = torch.cat([stats[:, :1].max(0).values, stats[:, 1:].sum(0)])
    max_err, total, n_finite, n_nan, bad = stats.tolist()
    mean_err = total / n_finite if n_finite else 0.0
    if n_nan:
        return Check("unwritten_output", f"{name}: {int(n_nan)} of {out.numel()} elements are NaN where the "
                     "reference is finite (left unwritten, or read uninitialised memory)", max_err, mean_err)
    if bad:
        return Check("incorrect", f"{name}: {int(bad)} of {out.numel()} elements outside atol={atol:g}, "
                     f"rtol={rtol:g} (max abs err {max_err:.3g})", max_err, mean_err)
    return Check(None, "", max_err, mean_err)


def unwritten_hint(name: str, base_out: torch.Tensor, expected: torch.Tensor, inplace: list[str]) -> str:
    """Advice for an unwritten-output rejection when the base itself leaves those elements unwritten."""
    if name in inplace or not (base_out.is_floating_point() and expected.shape == base_out.shape):
        return ""
    holes = torch.isnan(base_out.detach().float()) & ~torch.isnan(expected.detach().float())
    if not bool(holes.any()):
        return ""
    return (f". The base leaves {int(holes.sum())} of them unwritten too: if the entry fills only part of "
            f"{name!r} (a cache written at some slots), list {name!r} in the harness's INPLACE so the "
            "referee keeps its contents instead of poisoning it")


_LOWER = {
    torch.float32: (torch.bfloat16, torch.float16),
    torch.float64: (torch.float32, torch.bfloat16, torch.float16),
    torch.float16: tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)),
    torch.bfloat16: tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)),
}


_HEAD = 1 << 16  # elements looked at first by _representable_in


def _representable_in(t: torch.Tensor, lower: torch.dtype) -> bool:
    """Whether `t` has 16 finite values or more, all exactly representable in `lower`."""
    t = t.detach()
    if t.numel() > 4 * _HEAD:
        # One value that does not fit decides: an output at full precision shows one among its
        # first elements, so the whole tensor is read only when those all fit (same answer).
        _, differs = _fit(t.reshape(-1)[:_HEAD], lower)
        if differs:
            return False
    count, differs = _fit(t, lower)
    return count >= 16 and not differs


def _fit(t: torch.Tensor, lower: torch.dtype) -> tuple[int, int]:
    """(finite values, whether any finite value changes on a round trip through `lower`)."""
    finite = torch.isfinite(t)
    kept = torch.where(finite, t, t.new_zeros(()))  # zero round-trips: the non-finite change nothing
    differs = (kept.to(lower).to(t.dtype) != kept).any()
    count, differs = torch.stack([finite.sum(), differs.long()]).tolist()  # one wait for the device
    return count, differs


def precision_downgrade(out: torch.Tensor, expected: torch.Tensor, cand_mean_err: float,
                        base_mean_err: float | None) -> str | None:
    """A message when the output was computed at lower precision than its dtype, else None.

    Either every value fits a narrower float type while the reference's do not, or the mean error
    is well beyond both the base's and the output dtype's own rounding.
    """
    if not (isinstance(out, torch.Tensor) and out.is_floating_point()) or out.shape != expected.shape:
        return None
    def own(e: torch.Tensor) -> torch.Tensor:  # a higher-precision reference, at the output's precision
        return e.detach().to(out.dtype) if e.dtype != out.dtype else e.detach()

    for lower in _LOWER.get(out.dtype, ()):
        if _representable_in(out, lower) and not _representable_in(own(expected), lower):
            return f"every output value is exactly representable in {lower}: computed at lower precision"
    if base_mean_err is None or not cand_mean_err > 4 * base_mean_err:
        return None
    # The floor reads the whole reference: only for an error already beyond the base's.
    scale = float(own(expected).float().abs().mean()) if expected.numel() else 0.0
    floor = 2 * torch.finfo(out.dtype).eps * scale
    if cand_mean_err > floor:
        return (f"mean abs error {cand_mean_err:.3g} is {cand_mean_err / max(base_mean_err, 1e-30):.1f}x the "
                f"base's ({base_mean_err:.3g}): lower-precision arithmetic")
    return None
