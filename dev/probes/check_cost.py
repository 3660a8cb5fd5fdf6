"""What the judge's own correctness checks cost on the device, by check and tensor size: the
comparison with the reference, the lower-precision test, bitwise equality and the input cache's
fingerprint, each timed alone (triton.testing.do_bench, median) on one output-sized tensor pair.

    python3 dev/probes/check_cost.py [--numel N ...] [--dtype float16 ...]
"""

from __future__ import annotations

import argparse
import json

import torch
import triton.testing

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks import input_cache


def _time(fn) -> float:
    """Median milliseconds of `fn()` on the device (Triton's do_bench: warm-up, then repetitions)."""
    return triton.testing.do_bench(fn, warmup=5, rep=50, return_mode="median")


def _costs(o: torch.Tensor, e: torch.Tensor) -> dict[str, float]:
    """Milliseconds of each check on output `o` against reference `e`."""
    tol = (1e-2, 1e-2)
    return {"compare_ms": _time(lambda: C.compare(o, e, tol, "out")),
            "precision_downgrade_ms": _time(lambda: C.precision_downgrade(o, e, 1e-3, 1e-3)),
            "same_bits_ms": _time(lambda: C.same_bits(o, e)),
            "checksum_ms": _time(lambda: input_cache.fingerprints([o])),
            "clone_ms": _time(lambda: o.clone())}


def main() -> None:
    """Print one JSON line per (numel, dtype)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, nargs="*", default=[8192 * 14336, 4096 * 11008, 256 * 14336])
    p.add_argument("--dtype", nargs="*", default=["float16", "bfloat16", "float32"])
    args = p.parse_args()
    for n in args.numel:
        for name in args.dtype:
            dtype = getattr(torch, name)
            e = torch.randn(n, device="cuda").to(dtype)
            o = (e.float() + 1e-3 * torch.randn(n, device="cuda")).to(dtype)
            row = {"numel": n, "dtype": name, "mib": round(o.numel() * o.element_size() / 2**20, 1)}
            row.update(_costs(o, e))
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}),
                  flush=True)


if __name__ == "__main__":
    main()
