"""A tiny target written the way a new user writes one: kernels in tests/referee/tiny/kern.py,
harnesses given as text, a target yaml in a temporary folder (the harness fairness tests)."""

from pathlib import Path

from kernelsmith.onboard.task import load_task

TINY = Path(__file__).resolve().parent / "tiny"

# A float32 reference for a float16 kernel (how most test suites compute the truth).
FP32_REFERENCE = '''
import torch

SHAPES = [{"n": 4096, "dtype": "float16"}]
CPU_SHAPES = [{"n": 100, "dtype": "float16"}, {"n": 37, "dtype": "float16"}]
OUTPUTS = None
VARY = {"n": [5, 64, 130]}


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["n"], generator=g, device=device).to(getattr(torch, shape["dtype"]))
    return {"x": x}


def reference(x):
    return x.float() * 1.5 + 0.25


def bytes_moved(shape):
    return 4 * shape["n"]
'''

# A paged cache whose block count follows random sequence lengths: sizes depend on the seed, and
# the kernel fills the cache at some slots only.
PAGED_CACHE = '''
import torch

SHAPES = [{"d": 128, "dtype": "float16"}]
CPU_SHAPES = [{"d": 8, "dtype": "float16"}, {"d": 5, "dtype": "float32"}]
OUTPUTS = ["cache"]
INPLACE = ["cache"]
VARY = {"d": [4, 16]}


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    rows = int(torch.randint(2, 7, (1,), generator=g))
    blocks = rows + int(torch.randint(1, 5, (1,), generator=g))
    cache = torch.randn(blocks, shape["d"], generator=g, device=device).to(dtype)
    src = torch.randn(rows, shape["d"], generator=g, device=device).to(dtype)
    slots = torch.randperm(blocks, generator=g, device=device)[:rows].to(torch.int32)
    return {"cache": cache, "src": src, "slots": slots}


def reference(cache, src, slots):
    out = cache.clone()
    out[slots.long()] = src
    return out


def bytes_moved(shape):
    return 8 * shape["d"]
'''


def tiny_task(tmp_path: Path, op: str, entry: str, harness_text: str, kern: str = "kern.py"):
    """A Task for `entry` of tiny/`kern` (copied to tiny/kern.py of a checkout) with this harness."""
    proj = tmp_path / "proj"
    (proj / "tiny").mkdir(parents=True, exist_ok=True)
    (proj / "tiny" / "__init__.py").write_text("")
    (proj / "tiny" / "kern.py").write_text((TINY / kern).read_text())
    targets = tmp_path / "targets"
    (targets / "tiny").mkdir(parents=True, exist_ok=True)
    (targets / "tiny" / f"{op}.py").write_text(harness_text)
    yaml = targets / "tiny.yaml"
    yaml.write_text(f"repo: test/tiny\nclone_url: {proj}\nbase: main\noperators:\n"
                    f"  - name: {op}\n    file: tiny/kern.py\n    entry: {entry}\n"
                    f"    harness: tiny/{op}.py\n")
    return load_task(str(yaml), op, checkout=str(proj))
