"""Harness for LMDeploy's fill_kv_cache: one step's new keys and values written into a paged cache.

The engine calls it in every attention layer (backends/cuda/attention/default.py) with
quant_policy NONE and the default 'bshd' layout, as here:
- `k_states`, `v_states` [tokens, heads, head_dim]: the step's new tokens, sequence after sequence,
  as views into the fused qkv projection output (token stride (q_heads + 2 * heads) * head_dim),
  which is how `split_qkv` hands them over;
- `k_caches`, `v_caches` [num_blocks, block_size, heads, head_dim]: the block pool;
- `block_offsets` [batch, max_blocks] int32: each sequence's blocks, drawn from a shuffled pool
  (rows padded with 0, as the engine pads them); `q_seq_length`, `kv_seq_length` int32 and
  `q_start_loc` int64 (`cumsum - q_seqlens`, as model_inputs.py builds it).
Token j of sequence b has position p = kv_len[b] - q_len[b] + j and lands in block
block_offsets[b, p // block_size], row p % block_size. Nothing else in the caches may change:
they are OUTPUTS and INPLACE, start with random values (old contents), and `reference` returns
them whole, so a kernel that writes a wrong slot, or past a sequence's end, fails.

Sizes follow the seed: the step's token count is fixed by the shape (batch * q_per_seq, split at
random among the sequences, each at least 1; q_per_seq 1 is a decode step, which the kernel
handles on its own path), so `bytes_moved` is exact; the history lengths (min_history, default 0,
to max_history), and with them the block count and the cache size, are drawn. The kernel copies values, so the
outputs must match bitwise (TOLERANCE is exact).
"""

import torch

_GPU = {"block_size": 64, "heads": 8, "q_heads": 32, "head_dim": 128}  # Llama-3-8B-like GQA
SHAPES = [
    {"batch": 64, "q_per_seq": 1, "max_history": 4096, **_GPU, "dtype": "bfloat16"},  # decode
    {"batch": 8, "q_per_seq": 512, "max_history": 2048, **_GPU, "dtype": "bfloat16"},  # chunked prefill
    {"batch": 1, "q_per_seq": 1, "max_history": 8192, **_GPU, "dtype": "bfloat16"},  # decode, one request
    {"batch": 1, "q_per_seq": 4096, "max_history": 0, **_GPU, "dtype": "bfloat16"},  # a whole prompt
    {"batch": 64, "q_per_seq": 128, "max_history": 1024, **_GPU, "dtype": "float16"},
    # A full decode batch: its caches take about 1.2 GB each, and the referee holds several copies.
    {"batch": 512, "q_per_seq": 1, "max_history": 2048, **_GPU, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"batch": 3, "q_per_seq": 1, "max_history": 20, "block_size": 8, "heads": 2, "q_heads": 4,
     "head_dim": 16, "dtype": "float16"},
    # head_dim 12: the kernel's BLOCK_D (16) covers lanes past the head, which it must mask.
    {"batch": 2, "q_per_seq": 7, "max_history": 9, "block_size": 4, "heads": 2, "q_heads": 2,
     "head_dim": 12, "dtype": "float32"},
]
# Other shape mixes of the same kernel: `fill_kv_cache@NAME` runs the operator with one in place of
# SHAPES and CPU_SHAPES (docs/targets.md, Harness variants).
VARIANTS = {
    # decode: decode steps only (one new token per sequence, the kernel's decoding path) at large batches
    # with long histories, over other model geometries: 4 KV heads under 28 query heads (Qwen 2 7B),
    # head_dim 256 (Gemma 2), 2 KV heads, cache blocks of 16 and 128 tokens, and batch 512 with 2048
    # tokens of history each (a cache of about 4.5 GB).
    "decode": {"shapes": [
        {"batch": 512, "q_per_seq": 1, "min_history": 2048, "max_history": 2048, "block_size": 64, "heads": 8,
         "q_heads": 32, "head_dim": 128, "dtype": "bfloat16"},
        {"batch": 256, "q_per_seq": 1, "max_history": 8192, "block_size": 128, "heads": 4, "q_heads": 28,
         "head_dim": 128, "dtype": "bfloat16"},
        {"batch": 128, "q_per_seq": 1, "max_history": 4096, "block_size": 64, "heads": 8, "q_heads": 16,
         "head_dim": 256, "dtype": "bfloat16"},
        {"batch": 32, "q_per_seq": 1, "max_history": 32768, "block_size": 64, "heads": 8, "q_heads": 64,
         "head_dim": 128, "dtype": "float16"},
        {"batch": 16, "q_per_seq": 1, "max_history": 1024, "block_size": 16, "heads": 2, "q_heads": 16,
         "head_dim": 128, "dtype": "bfloat16"},
    ], "cpu_shapes": [
        {"batch": 5, "q_per_seq": 1, "min_history": 6, "max_history": 6, "block_size": 4, "heads": 1,
         "q_heads": 3, "head_dim": 16, "dtype": "float16"},
        {"batch": 3, "q_per_seq": 1, "max_history": 40, "block_size": 16, "heads": 2, "q_heads": 8,
         "head_dim": 32, "dtype": "float32"},
    ]},
    # spec: a few new tokens per sequence (speculative decoding's verify steps, 2 to 8 tokens), one
    # prefill of 4 x 1024 tokens after long histories, a single KV head (multi-query attention) with
    # head_dim 256, head_dim 64, cache blocks of 32, 128 and 256 tokens, and a 100000-token history.
    "spec": {"shapes": [
        {"batch": 64, "q_per_seq": 4, "max_history": 2048, "block_size": 64, "heads": 8, "q_heads": 32,
         "head_dim": 128, "dtype": "bfloat16"},
        {"batch": 32, "q_per_seq": 8, "max_history": 4096, "block_size": 128, "heads": 1, "q_heads": 8,
         "head_dim": 256, "dtype": "float16"},
        {"batch": 128, "q_per_seq": 2, "max_history": 1024, "block_size": 32, "heads": 2, "q_heads": 16,
         "head_dim": 64, "dtype": "bfloat16"},
        {"batch": 4, "q_per_seq": 1024, "max_history": 6144, "block_size": 64, "heads": 16, "q_heads": 64,
         "head_dim": 128, "dtype": "bfloat16"},
        {"batch": 2, "q_per_seq": 1, "max_history": 100000, "block_size": 256, "heads": 8, "q_heads": 64,
         "head_dim": 128, "dtype": "bfloat16"},
    ], "cpu_shapes": [
        {"batch": 2, "q_per_seq": 3, "max_history": 11, "block_size": 8, "heads": 1, "q_heads": 2,
         "head_dim": 20, "dtype": "float16"},
        {"batch": 4, "q_per_seq": 2, "max_history": 5, "block_size": 2, "heads": 3, "q_heads": 3,
         "head_dim": 8, "dtype": "float32"},
    ]},
}
OUTPUTS = ["k_caches", "v_caches"]
INPLACE = ["k_caches", "v_caches"]  # written at the new tokens' slots only
TOLERANCE = {name: {"atol": 0.0, "rtol": 0.0} for name in ("float32", "float16", "bfloat16")}
# Small enough for the interpreter's fresh-shape checks; every field resizes all tensors using it.
VARY = {"batch": [1, 3, 6], "q_per_seq": [1, 2, 5], "heads": [1, 3], "head_dim": [16, 24, 128],
        "block_size": [8, 16, 64]}


def _split(total: int, parts: int, g: torch.Generator) -> torch.Tensor:
    """`total` as `parts` random positive integers (a composition: cut points drawn without repeats)."""
    if parts == 1:
        return torch.tensor([total])
    cuts = (torch.randperm(total - 1, generator=g)[: parts - 1] + 1).sort().values
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([total])]).diff()


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """One step's new k/v (views of a fused qkv row), a shuffled block pool and its block table."""
    meta = torch.Generator().manual_seed(seed)  # lengths and the table: small, drawn on the host
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    batch, bs, heads, d = shape["batch"], shape["block_size"], shape["heads"], shape["head_dim"]
    if shape["q_per_seq"] < 1:
        raise ValueError(f"q_per_seq must be at least 1, got {shape['q_per_seq']}")
    q_lens = _split(batch * shape["q_per_seq"], batch, meta)
    history = torch.randint(shape.get("min_history", 0), shape["max_history"] + 1, (batch,), generator=meta)
    kv_lens = q_lens + history
    blocks = (kv_lens + bs - 1) // bs
    num_blocks = int(blocks.sum()) + batch  # free blocks too: no sequence owns them, none may change
    pool = torch.randperm(num_blocks, generator=meta)
    table = torch.zeros(batch, int(blocks.max()), dtype=torch.int32)
    taken = 0
    for b, n in enumerate(blocks.tolist()):
        table[b, :n] = pool[taken:taken + n]
        taken += n
    tokens, hq = int(q_lens.sum()), shape["q_heads"]
    qkv = torch.randn(tokens, hq + 2 * heads, d, generator=g, device=device).to(dtype)
    cache_shape = (num_blocks, bs, heads, d)
    return {
        "k_states": qkv[:, hq:hq + heads],
        "v_states": qkv[:, hq + heads:],
        "k_caches": torch.randn(cache_shape, generator=g, device=device).to(dtype),
        "v_caches": torch.randn(cache_shape, generator=g, device=device).to(dtype),
        "q_start_loc": (q_lens.cumsum(0) - q_lens).to(device),
        "q_seq_length": q_lens.to(device=device, dtype=torch.int32),
        "kv_seq_length": kv_lens.to(device=device, dtype=torch.int32),
        "max_q_seq_length": int(q_lens.max()),
        "block_offsets": table.to(device),
    }


def reference(k_states, v_states, k_caches, v_caches, q_start_loc, q_seq_length, kv_seq_length,
              max_q_seq_length, block_offsets):
    """Copies of the caches with each new token's key and value at its slot (torch indexing)."""
    dev = k_states.device
    q_lens = q_seq_length.long()
    seq = torch.repeat_interleave(torch.arange(q_lens.numel(), device=dev), q_lens)  # token -> sequence
    within = torch.arange(seq.numel(), device=dev) - (q_lens.cumsum(0) - q_lens)[seq]
    pos = (kv_seq_length.long() - q_lens)[seq] + within  # the token's position in its sequence
    src = q_start_loc.long()[seq] + within  # its row in k_states / v_states
    bs = k_caches.size(1)
    block, row = block_offsets.long()[seq, pos // bs], pos % bs
    k_out, v_out = k_caches.clone(), v_caches.clone()
    k_out[block, row] = k_states[src]
    v_out[block, row] = v_states[src]
    return k_out, v_out


def bytes_moved(shape: dict) -> int:
    """Read the new keys and values once and write them once, plus per sequence its start (int64),
    q and kv lengths (int32) and one block-table entry (int32); the rest of the cache is untouched."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    tokens = shape["batch"] * shape["q_per_seq"]
    return 2 * (2 * tokens * shape["heads"] * shape["head_dim"] * size) + 20 * shape["batch"]
