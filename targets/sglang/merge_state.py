"""Harness for SGLang's merge_state_triton: merge two partial attention results by their LSE."""

import torch

SHAPES = [
    {"tokens": 1, "heads": 32, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 256, "heads": 32, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 4096, "heads": 32, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 16384, "heads": 16, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 4096, "heads": 128, "head_dim": 64, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 3, "heads": 2, "head_dim": 32, "dtype": "float16"},
    {"tokens": 2, "heads": 3, "head_dim": 24, "dtype": "float32"},
]
# Other shape mixes of the same kernel: `merge_state@NAME` runs the operator with one in place of
# SHAPES and CPU_SHAPES (docs/targets.md, Harness variants).
VARIANTS = {
    # long: mostly long chunked-prefill merges, over other attention geometries: 128 heads of 128
    # (DeepSeek's MLA), 8 heads at 32768 tokens, head_dim 256 (Gemma) and 96 (Phi-3, not a power of two:
    # the kernel masks its padded lanes), float16 and bfloat16, and one short step of 8 tokens.
    "long": {"shapes": [
        {"tokens": 8192, "heads": 128, "head_dim": 128, "dtype": "bfloat16"},
        {"tokens": 32768, "heads": 8, "head_dim": 128, "dtype": "bfloat16"},
        {"tokens": 16384, "heads": 16, "head_dim": 256, "dtype": "bfloat16"},
        {"tokens": 2048, "heads": 32, "head_dim": 96, "dtype": "float16"},
        {"tokens": 8, "heads": 64, "head_dim": 128, "dtype": "bfloat16"},
    ], "cpu_shapes": [
        {"tokens": 6, "heads": 4, "head_dim": 48, "dtype": "float16"},
        {"tokens": 2, "heads": 2, "head_dim": 64, "dtype": "float32"},
    ]},
    # oddheads: head counts and sizes in neither of the operator's other harnesses (28 heads of 128 as in
    # Qwen 2 7B, 40 heads of 128, 96 heads of 80, 12 heads of 64), token counts from 2 to 24576, float16
    # and bfloat16.
    "oddheads": {"shapes": [
        {"tokens": 2, "heads": 28, "head_dim": 128, "dtype": "bfloat16"},
        {"tokens": 700, "heads": 40, "head_dim": 128, "dtype": "float16"},
        {"tokens": 6000, "heads": 96, "head_dim": 80, "dtype": "bfloat16"},
        {"tokens": 24576, "heads": 12, "head_dim": 64, "dtype": "float16"},
    ], "cpu_shapes": [
        {"tokens": 5, "heads": 3, "head_dim": 40, "dtype": "float16"},
        {"tokens": 1, "heads": 6, "head_dim": 16, "dtype": "float32"},
    ]},
}
OUTPUTS = ["output", "output_lse"]
VARY = {"tokens": [1, 7, 333, 5000], "heads": [1, 5, 32], "head_dim": [24, 64, 128]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """Two partial outputs [tokens, heads, dim] with float32 LSEs [tokens, heads]; output buffers.

    About 1 in 16 LSEs is +inf (SGLang's marker of an empty part, merged as weight zero).
    """
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, h, d = shape["tokens"], shape["heads"], shape["head_dim"]
    lse = 4.0 * torch.randn(2, t, h, generator=g, device=device)
    empty = torch.rand(2, t, h, generator=g, device=device) < 1 / 16
    empty[1] &= ~empty[0]  # never both parts empty at once
    lse[empty] = float("inf")
    to = dict(device=device, dtype=dtype)
    return {
        "prefix_output": torch.randn(t, h, d, generator=g, device=device).to(**to),
        "prefix_lse": lse[0].to(device),
        "suffix_output": torch.randn(t, h, d, generator=g, device=device).to(**to),
        "suffix_lse": lse[1].to(device),
        "output": torch.empty(t, h, d, **to),
        "output_lse": torch.empty(t, h, device=device, dtype=torch.float32),
    }


def reference(prefix_output, prefix_lse, suffix_output, suffix_lse, output, output_lse):
    """Softmax-weighted sum of the two parts (an +inf LSE counts as an empty part)."""
    p = torch.where(torch.isinf(prefix_lse) & (prefix_lse > 0), float("-inf"), prefix_lse).double()
    s = torch.where(torch.isinf(suffix_lse) & (suffix_lse > 0), float("-inf"), suffix_lse).double()
    m = torch.maximum(p, s)
    pe, se = torch.exp(p - m), torch.exp(s - m)
    total = pe + se
    merged = (prefix_output.double() * (pe / total)[..., None]
              + suffix_output.double() * (se / total)[..., None])
    return merged.to(prefix_output.dtype), (torch.log(total) + m).float()


def bytes_moved(shape: dict) -> int:
    """Read both parts and LSEs, write the merged output and LSE."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    n = shape["tokens"] * shape["heads"]
    return 3 * size * n * shape["head_dim"] + 3 * 4 * n
