"""Harness for LMDeploy's multinomial_sampling(scores, seeds, offsets, indices) (decode sampling).

The kernel walks each row's descending-sorted probabilities, accumulating them in float32, and
returns the original token id where the Philox draw `tl.rand(seed, offset)` lands. Its output is
an integer, compared exactly; a candidate summing in another order (another BLOCK_N, a tree
reduction) must still land on the same token. So every probability here is a whole multiple of
2**-24 and each row sums to at most 1: every partial sum, in any order, is then a multiple of
2**-24 below 2**24 units and exact in float32, and the reference (float64 cumsum + searchsorted)
is the only right answer, whatever the summation order.
"""

import torch

SHAPES = [
    {"batch": 1, "vocab": 151936, "dist": "flat", "indices": True, "dtype": "float32"},
    {"batch": 16, "vocab": 128256, "dist": "mixed", "indices": True, "dtype": "float32"},
    {"batch": 64, "vocab": 32000, "dist": "flat", "indices": True, "dtype": "float32"},
    {"batch": 256, "vocab": 151936, "dist": "mixed", "indices": True, "dtype": "float32"},
    {"batch": 256, "vocab": 32000, "dist": "peaked", "indices": True, "dtype": "float32"},
    {"batch": 128, "vocab": 128256, "dist": "flat", "indices": True, "dtype": "bfloat16"},
    {"batch": 32, "vocab": 32000, "dist": "mixed", "indices": False, "dtype": "float16"},
]
CPU_SHAPES = [
    {"batch": 3, "vocab": 300, "dist": "mixed", "indices": True, "dtype": "float32"},
    {"batch": 2, "vocab": 200, "dist": "flat", "indices": False, "dtype": "float16"},
]
# Other shape mixes of the same kernel: `multinomial_sampling@NAME` runs the operator with one in
# place of SHAPES and CPU_SHAPES (docs/targets.md, Harness variants).
VARIANTS = {
    # peaked: decode steps whose rows are mostly peaked (50-99% of the mass on 1-4 tokens, so the draw
    # lands in the first block and the rest of the walk only loops), at larger batches, with larger
    # vocabularies (Qwen 2.5's 152064, Gemma's 256000, a padded 100352) and mostly bfloat16 scores.
    "peaked": {"shapes": [
        {"batch": 512, "vocab": 32000, "dist": "peaked", "indices": True, "dtype": "float32"},
        {"batch": 128, "vocab": 152064, "dist": "peaked", "indices": True, "dtype": "bfloat16"},
        {"batch": 64, "vocab": 256000, "dist": "peaked", "indices": True, "dtype": "bfloat16"},
        {"batch": 8, "vocab": 128256, "dist": "peaked", "indices": False, "dtype": "float16"},
        {"batch": 256, "vocab": 100352, "dist": "mixed", "indices": True, "dtype": "bfloat16"},
    ], "cpu_shapes": [
        {"batch": 4, "vocab": 260, "dist": "peaked", "indices": True, "dtype": "float32"},
        {"batch": 2, "vocab": 129, "dist": "peaked", "indices": False, "dtype": "float16"},
    ]},
    # offblock: a vocabulary off the 128-token block (GPT-2's 50257) and others in neither of the
    # operator's other harnesses (SmolLM's 49152, 65536, Mistral Nemo's 131072, Llama 4's 202048), float16
    # and float32 scores, flat, peaked and mixed rows.
    "offblock": {"shapes": [
        {"batch": 2, "vocab": 50257, "dist": "flat", "indices": True, "dtype": "float32"},
        {"batch": 96, "vocab": 65536, "dist": "mixed", "indices": True, "dtype": "float16"},
        {"batch": 384, "vocab": 49152, "dist": "peaked", "indices": True, "dtype": "float16"},
        {"batch": 32, "vocab": 202048, "dist": "flat", "indices": True, "dtype": "float32"},
        {"batch": 160, "vocab": 131072, "dist": "mixed", "indices": False, "dtype": "float32"},
    ], "cpu_shapes": [
        {"batch": 3, "vocab": 150, "dist": "flat", "indices": True, "dtype": "float16"},
        {"batch": 2, "vocab": 384, "dist": "mixed", "indices": False, "dtype": "float32"},
    ]},
}
OUTPUTS = None
# Vocab sizes off the 128-element block; small enough for the interpreter's fresh-shape checks.
VARY = {"batch": [1, 2, 5, 33], "vocab": [130, 1000, 2500], "dist": ["peaked", "flat", "mixed"]}

UNIT = 2.0 ** -24  # every probability is a whole number of these
MANTISSA = {"float32": 24, "float16": 11, "bfloat16": 8}  # significant bits of each score dtype
_M32 = 0xFFFFFFFF


def _row_probs(batch: int, vocab: int, dist: str, g: torch.Generator, device: str) -> torch.Tensor:
    """float64 probabilities [batch, vocab], rows in token order (not yet sorted).

    flat: softmax of 0.5 * N(0, 1) logits (the draw lands anywhere, the walk is long);
    peaked: 50-99% of the mass on 1-4 tokens, the rest softmax(2 * N(0, 1)) (a typical decode step);
    mixed: alternating rows of both, as in a batch of different requests.
    """
    flat = torch.softmax(0.5 * torch.randn(batch, vocab, generator=g, device=device,
                                           dtype=torch.float64), dim=-1)
    tail = torch.softmax(2.0 * torch.randn(batch, vocab, generator=g, device=device,
                                           dtype=torch.float64), dim=-1)
    mass = 0.5 + 0.49 * torch.rand(batch, 1, generator=g, device=device, dtype=torch.float64)
    spikes = torch.randint(1, 5, (batch, 1), generator=g, device=device)
    # Up to 4 hot tokens per row at random places (no sort of the whole row: inputs are made for
    # every trial of every candidate, and at 256 x 151936 sorting dominated their cost).
    hot = torch.randint(0, vocab, (batch, 4), generator=g, device=device)
    share = torch.rand(batch, 4, generator=g, device=device, dtype=torch.float64)
    share = torch.where(torch.arange(4, device=device)[None, :] < spikes, share, 0.0)
    share = share / share.sum(-1, keepdim=True)
    peaked = tail * (1 - mass)
    peaked.scatter_add_(1, hot, share * mass)
    if dist == "flat":
        return flat
    if dist == "peaked":
        return peaked
    if dist == "mixed":
        odd = (torch.arange(batch, device=device) % 2 == 1)[:, None]
        return torch.where(odd, peaked, flat)
    raise ValueError(f"multinomial_sampling harness: unknown dist {dist!r}")


def exact_weights(probs: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Integer weights (units of 2**-24, int64) near `probs`, each exact in `dtype`, rows sum <= 2**24.

    Rounding down, then giving each row's shortfall to its largest weight, makes float32 rows sum
    to exactly 2**24 (probability 1); then each weight keeps only the dtype's significant bits
    (truncation toward zero, so a float16/bfloat16 row sums to a little under 1 and a draw beyond
    the total returns the row's first index, as the kernel does). Truncating an integer's low bits
    leaves an integer, so every score stays a multiple of 2**-24.
    """
    units = (probs * 2.0 ** 24).floor().long()
    short = (2 ** 24 - units.sum(-1, keepdim=True)).clamp(min=0)
    units.scatter_add_(1, units.argmax(-1, keepdim=True), short)
    bits = torch.frexp(units.double()).exponent.long()  # bit length of each weight
    drop = (bits - MANTISSA[str(dtype).replace("torch.", "")]).clamp(min=0)
    return (units >> drop) << drop


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """Sorted exact-in-float32 probabilities, their token ids, and one Philox seed/offset per row."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    probs = _row_probs(shape["batch"], shape["vocab"], shape["dist"], g, device)
    units = exact_weights(probs, dtype)
    # As the engine calls it: scores sorted descending, indices = the sort's permutation.
    units, order = torch.sort(units, dim=-1, descending=True, stable=True)
    scores = (units.double() * UNIT).to(dtype)
    # LMDeploy draws seeds below 2**32 and uses the sequence's token count as the offset.
    seeds = torch.randint(0, 2 ** 32, (shape["batch"],), generator=g, device=device)
    offsets = torch.randint(0, 2 ** 20, (shape["batch"],), generator=g, device=device)
    return {"scores": scores, "seeds": seeds, "offsets": offsets,
            "indices": order if shape["indices"] else None}


def philox_uniform(seed: int, offset: int) -> int:
    """The int32 `tl.rand(seed, offset)` scales to [0, 1): Triton's Philox 4x32, 10 rounds.

    The kernel casts the offset to int32 (counter c0 = its low 32 bits, c1..c3 = 0); the int64 seed
    is the key (low word, high word). Triton then reads c0 as int32 and folds negatives with `~x`.
    """
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    c0, c1, c2, c3 = offset & _M32, 0, 0, 0
    for _ in range(10):
        hi_b, lo_b = divmod(0xCD9E8D57 * c2, 1 << 32)
        hi_a, lo_a = divmod(0xD2511F53 * c0, 1 << 32)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + 0x9E3779B9) & _M32, (k1 + 0xBB67AE85) & _M32
    x = c0 - (1 << 32) if c0 >> 31 else c0
    return ~x if x < 0 else x


def uniforms(seeds: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """float32 `tl.rand(seed, offset)` per row, on the CPU: int32 -> float32, times Triton's scale."""
    xs = [philox_uniform(int(s), int(o)) for s, o in zip(seeds.tolist(), offsets.tolist(), strict=True)]
    return torch.tensor(xs, dtype=torch.int32).float() * torch.tensor(4.6566127342e-10, dtype=torch.float32)


def reference(scores, seeds, offsets, indices=None):
    """The first token whose running sum reaches the draw (float64, exact); the row's first if none."""
    u = uniforms(seeds, offsets).double().to(scores.device)
    cum = scores.double().cumsum(-1)
    pos = torch.searchsorted(cum, u[:, None], side="left").squeeze(1)
    pos = torch.where(pos >= scores.shape[1], 0, pos)
    if indices is None:
        return pos
    return indices.gather(1, pos[:, None]).squeeze(1)


def bytes_moved(shape: dict) -> int:
    """What every correct kernel must move: each row's seed, offset, result and first score/index.

    The kernel stops reading a row where its draw lands (the first few tokens on a peaked row), so
    no larger count is a lower bound for every draw: a full read of scores (and indices) here would
    floor honest candidates, and the base too, at a time they beat on peaked rows.
    """
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    return shape["batch"] * (8 + 8 + 8 + size + (8 if shape["indices"] else 0))
