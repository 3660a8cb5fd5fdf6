"""Harness for LMDeploy's fused_single_group_topk_router (192 experts, top-8, noaux_tc routing)."""

import torch

SHAPES = [
    {"tokens": 1, "dtype": "float32"},
    {"tokens": 64, "dtype": "float32"},
    {"tokens": 1024, "dtype": "float32"},
    {"tokens": 8192, "dtype": "float32"},
    {"tokens": 32768, "dtype": "float32"},
]
CPU_SHAPES = [{"tokens": 3, "dtype": "float32"}, {"tokens": 1, "dtype": "float32"}]
OUTPUTS = None
VARY = {"tokens": [1, 7, 333, 5000]}
EXPERTS, TOP_K, SCALE = 192, 8, 2.5


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """Scores and bias whose sums are all distinct per row, so the top-8 ids are unambiguous.

    choice = scores + bias is 1 + (a permutation of the experts + u) / 192 with u in [0.1, 0.9]:
    neighbours differ by at least 0.2/192, far beyond float32 rounding, so ids compare exactly.
    """
    g = torch.Generator(device=device).manual_seed(seed)
    t = shape["tokens"]
    ranks = torch.argsort(torch.rand(t, EXPERTS, generator=g, device=device), dim=-1).double()
    u = torch.rand(t, EXPERTS, generator=g, device=device, dtype=torch.float64)
    choice = 1.0 + (ranks + 0.1 + 0.8 * u) / EXPERTS
    bias = 0.5 * (torch.rand(EXPERTS, generator=g, device=device, dtype=torch.float64) - 0.5)
    scores = (choice - bias).float()
    return {"scores": scores.to(device), "bias": bias.float().to(device), "num_experts": EXPERTS,
            "top_k": TOP_K, "routed_scaling_factor": SCALE}


def reference(scores, bias, num_experts, top_k, routed_scaling_factor):
    """Top-k of scores + bias (descending); weights are the chosen raw scores, renormalised."""
    ids = torch.topk(scores.double() + bias.double(), top_k, dim=-1, sorted=True).indices
    weights = scores.gather(1, ids).double()
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * routed_scaling_factor
    return weights.float(), ids.to(torch.int64)


def bytes_moved(shape: dict) -> int:
    """Read the scores and the bias, write weights (fp32) and ids (int64)."""
    return 4 * shape["tokens"] * EXPERTS + 4 * EXPERTS + shape["tokens"] * TOP_K * (4 + 8)
