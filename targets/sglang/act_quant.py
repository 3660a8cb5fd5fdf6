"""Harness for SGLang's act_quant(x, block_size=128): per-(row, 128-column group) FP8 e4m3 quantization.

Returns (y float8_e4m3fn, scales float32 [tokens, hidden / block_size]). The kernel computes
scale = max(amax, 1e-4) * (1 / 448) and y = clamp(x / scale, -448, 448) in float32, then rounds to
fp8 (round to nearest even, as the GPU's cvt.rn.satfinite does); the reference does the same in
torch. Under the interpreter this needs kernelsmith's fp8 cast stand-in: triton 3.9's own
interpreter cast drops the mantissa carry (31.5 becomes 16.0).
"""

import torch

SHAPES = [
    {"tokens": 1, "hidden": 7168, "dtype": "bfloat16"},
    {"tokens": 128, "hidden": 7168, "dtype": "bfloat16"},
    {"tokens": 4096, "hidden": 7168, "dtype": "bfloat16"},
    {"tokens": 16384, "hidden": 2048, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"tokens": 5, "hidden": 256, "dtype": "float32"},
    {"tokens": 3, "hidden": 128, "dtype": "float16"},
]
# Other shape mixes of the same kernel: `act_quant@NAME` runs the operator with one in place of
# SHAPES and CPU_SHAPES (docs/targets.md, Harness variants).
VARIANTS = {
    # moe: more of DeepSeek V3's quantized inputs (18432 wide: the dense MLP's intermediate; 1536: the
    # query's low rank; 2048, an expert's, at 512 tokens) and a 4096-wide float16 input, from 8 to 32768
    # tokens.
    "moe": {"shapes": [
        {"tokens": 8, "hidden": 18432, "dtype": "bfloat16"},
        {"tokens": 512, "hidden": 2048, "dtype": "bfloat16"},
        {"tokens": 2048, "hidden": 18432, "dtype": "bfloat16"},
        {"tokens": 8192, "hidden": 4096, "dtype": "float16"},
        {"tokens": 32768, "hidden": 1536, "dtype": "bfloat16"},
    ], "cpu_shapes": [
        {"tokens": 2, "hidden": 384, "dtype": "float16"},
        {"tokens": 7, "hidden": 128, "dtype": "float32"},
    ]},
    # dtypes: float32 and float16 inputs besides bfloat16, widths in neither of the operator's other
    # harnesses (768, 2560, 5120, 12288) and token counts from 2 to 20000.
    "dtypes": {"shapes": [
        {"tokens": 2, "hidden": 2560, "dtype": "bfloat16"},
        {"tokens": 300, "hidden": 12288, "dtype": "float16"},
        {"tokens": 3000, "hidden": 5120, "dtype": "bfloat16"},
        {"tokens": 20000, "hidden": 768, "dtype": "float32"},
    ], "cpu_shapes": [
        {"tokens": 3, "hidden": 640, "dtype": "float16"},
        {"tokens": 1, "hidden": 256, "dtype": "float32"},
    ]},
}
OUTPUTS = None
VARY = {"tokens": [1, 7, 333, 5000], "hidden": [128, 1024, 7168]}
BLOCK = 128


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x [tokens, hidden] with a spread of magnitudes per group, and the block size."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    x = 3.0 * torch.randn(shape["tokens"], shape["hidden"], generator=g, device=device)
    return {"x": x.to(dtype), "block_size": BLOCK}


def reference(x, block_size):
    """(y, scales) computed as the kernel rounds, in float32 torch."""
    xf = x.float().reshape(x.shape[0], -1, block_size)
    amax = xf.abs().amax(-1).clamp(min=1e-4)
    scale = amax * (1.0 / 448.0)
    y = (xf / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return y.reshape(x.shape), scale


def bytes_moved(shape: dict) -> int:
    """Read x once, write one byte per element and one float32 scale per group."""
    n = shape["tokens"] * shape["hidden"]
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return size * n + n + 4 * (n // BLOCK)
