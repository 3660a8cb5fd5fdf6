"""What Unsloth's gated-MLP harnesses share: the forwards (swiglu.py, geglu.py, geglu_approx.py:
h = act(gate) * up over [batch, seq_len, hd]) and the in-place backwards (swiglu_backward.py,
geglu_backward.py, geglu_approx_backward.py, over [tokens, hd]). Each keeps its reference; the GELU
ones share their GPU shapes (Gemma's widths), SwiGLU's are Llama's. They import this module
relatively, and the referee pins it with them."""

import torch

FORWARD_CPU_SHAPES = [
    {"batch": 2, "seq_len": 3, "hd": 96, "dtype": "float16"},
    {"batch": 1, "seq_len": 5, "hd": 40, "dtype": "float32"},
]
FORWARD_VARY = {"seq_len": [1, 7, 333], "hd": [40, 1000, 4096]}
BACKWARD_CPU_SHAPES = [
    {"tokens": 6, "hd": 96, "dtype": "float16"},
    {"tokens": 5, "hd": 40, "dtype": "float32"},
]
BACKWARD_VARY = {"tokens": [1, 7, 333], "hd": [40, 1000, 4096]}
GEGLU_FORWARD_SHAPES = [
    {"batch": 1, "seq_len": 1, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 1, "seq_len": 128, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 4, "seq_len": 2048, "hd": 16384, "dtype": "bfloat16"},
    {"batch": 8, "seq_len": 4096, "hd": 9216, "dtype": "bfloat16"},
    {"batch": 2, "seq_len": 2048, "hd": 24576, "dtype": "float16"},
]
GEGLU_BACKWARD_SHAPES = [
    {"tokens": 1, "hd": 16384, "dtype": "bfloat16"},
    {"tokens": 512, "hd": 16384, "dtype": "bfloat16"},
    {"tokens": 8192, "hd": 16384, "dtype": "bfloat16"},
    {"tokens": 32768, "hd": 9216, "dtype": "bfloat16"},
    {"tokens": 4096, "hd": 24576, "dtype": "float16"},
]


def _normal(shape: dict, size: tuple, scales: tuple[float, ...], device: str, seed: int) -> list:
    """Seeded normal tensors of `size`, one per standard deviation in `scales` (drawn in that
    order, scaled in float32), in the shape's dtype."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    return [(s * torch.randn(size, generator=gen, device=device)).to(dtype) for s in scales]


def forward_inputs(shape: dict, device: str, seed: int, names: tuple[str, str]) -> dict:
    """The gate projection (deviation 2: into the activation's curved part) and the up projection,
    [batch, seq_len, hd] each, under the entry's `names` for them."""
    size = (shape["batch"], shape["seq_len"], shape["hd"])
    return dict(zip(names, _normal(shape, size, (2.0, 1.0), device, seed), strict=True))


def gelu_forward_inputs(shape: dict, device: str, seed: int) -> dict:
    """The GELU forwards' inputs: `forward_inputs` under their entries' names, gate and up."""
    return forward_inputs(shape, device, seed, ("gate", "up"))


def backward_inputs(shape: dict, device: str, seed: int) -> dict:
    """The upstream gradient DW and the forward's e (deviation 2) and g, [tokens, hd] each."""
    size = (shape["tokens"], shape["hd"])
    return dict(zip(("DW", "e", "g"), _normal(shape, size, (1.0, 2.0, 1.0), device, seed), strict=True))


def forward_bytes(shape: dict) -> int:
    """Read the two projections once, write h once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return 3 * size * shape["batch"] * shape["seq_len"] * shape["hd"]


def backward_bytes(shape: dict) -> int:
    """Read DW, e and g once, write all three once."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return 6 * size * shape["tokens"] * shape["hd"]
