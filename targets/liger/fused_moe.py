"""Harness for Liger-Kernel's mixture-of-experts MLP as models call it:
LigerFusedMoEFunction.apply(x, gate_up_proj, down_proj, top_k_index, top_k_weights).

Each token goes to top_k of `experts` SwiGLU experts: out[t] = sum_k w[t, k] * down[e] @
(silu(gate[e] @ x[t]) * (up[e] @ x[t])), e = top_k_index[t, k]. Six launches: three routing kernels
(a histogram, prefix sums, a sort of the (token, k) pairs by expert), two grouped GEMMs with tl.dot
over 64-row tiles of one expert's tokens (gather + up projection + SwiGLU, then the down
projection) and a weighted gather-sum per token. The GEMMs and the gather-sum are
`@triton.autotune`d (BLOCK_N, BLOCK_K, num_warps, num_stages; LIGER_FUSED_MOE_AUTOTUNE=0 pins one
config); the rows per tile are the module's `BLOCK_M_TOKEN = 64`.

The forward saves the pre-activations (x @ gate_up_proj[e]^T per (token, k), in expert-sorted
rows) for the backward pass: `call` returns them beside the output, so a candidate that skips or
garbles them fails here rather than in the backward pass.
"""

import torch

# Expert layouts of Mixtral-8x7B, Qwen3-30B-A3B, OLMoE-1B-7B and gpt-oss-20b; the last with few tokens.
SHAPES = [
    {"tokens": 4096, "experts": 8, "top_k": 2, "hidden": 4096, "inter": 14336, "dtype": "bfloat16"},
    {"tokens": 4096, "experts": 128, "top_k": 8, "hidden": 2048, "inter": 768, "dtype": "bfloat16"},
    {"tokens": 8192, "experts": 64, "top_k": 8, "hidden": 2048, "inter": 1024, "dtype": "bfloat16"},
    {"tokens": 4096, "experts": 32, "top_k": 4, "hidden": 2880, "inter": 2880, "dtype": "bfloat16"},
    {"tokens": 256, "experts": 128, "top_k": 8, "hidden": 2048, "inter": 768, "dtype": "bfloat16"},
]
# Upstream's smallest case, and odd sizes with top_k = 3. The routing sort covers 1024 (token, k)
# slots whatever the sizes; under the interpreter the autotuner keeps its first config.
CPU_SHAPES = [
    {"tokens": 7, "experts": 4, "top_k": 2, "hidden": 64, "inter": 32, "dtype": "float16"},
    {"tokens": 10, "experts": 5, "top_k": 3, "hidden": 40, "inter": 24, "dtype": "float32"},
]
OUTPUTS = None  # what `call` returns: (output, pre-activations)
VARY = {"tokens": [1, 9, 70], "inter": [16, 40, 96]}


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """x ~ N(0, 1); expert weights scaled by 1/sqrt(fan-in) (outputs of order one); top_k distinct
    experts per token from random router logits (int32), their softmaxed scores as weights."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    t, e, k, h, i = shape["tokens"], shape["experts"], shape["top_k"], shape["hidden"], shape["inter"]
    x = torch.randn(t, h, generator=g, device=device).to(dtype)
    gate_up = (torch.randn(e, 2 * i, h, generator=g, device=device) / h ** 0.5).to(dtype)
    down = (torch.randn(e, h, i, generator=g, device=device) / i ** 0.5).to(dtype)
    logits = torch.randn(t, e, generator=g, device=device)
    index = torch.topk(logits, k, dim=-1).indices.to(torch.int32)
    weights = torch.softmax(torch.gather(logits, 1, index.long()), dim=-1).to(dtype)
    return {"x": x, "gate_up_proj": gate_up, "down_proj": down, "top_k_index": index,
            "top_k_weights": weights}


def call(entry, inputs):
    """The forward with x requiring grad (as in training, so the pre-activations are saved);
    returns (output, pre-activations): the fourth tensor the forward saves."""
    out = entry(**{**inputs, "x": inputs["x"].detach().requires_grad_()})
    return out.detach(), out.grad_fn.saved_tensors[3]


def reference(x, gate_up_proj, down_proj, top_k_index, top_k_weights):
    """(output, pre-activations) in float32, rounded where the kernels store: the pre-activations,
    the SwiGLU product and each expert's output in x's dtype. Pre-activation rows are sorted by
    expert, (token, k) pairs in order within one (the routing kernels' stable sort)."""
    dtype = x.dtype
    t, k = top_k_index.shape
    inter = gate_up_proj.shape[1] // 2
    flat = top_k_index.flatten().long()
    order = torch.argsort(flat, stable=True)
    pre = torch.empty(t * k, 2 * inter, device=x.device)
    expert_out = torch.empty(t * k, x.shape[1], device=x.device)  # by (token, k)
    for e in flat.unique().tolist():
        pairs = order[flat[order] == e]
        rows = torch.searchsorted(flat[order], torch.tensor([e, e + 1], device=x.device))
        h = x[pairs // k].float() @ gate_up_proj[e].float().T
        pre[rows[0]:rows[1]] = h
        act = (torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]).to(dtype).float()
        expert_out[pairs] = (act @ down_proj[e].float().T).to(dtype).float()
    weighted = expert_out.view(t, k, -1) * top_k_weights.float()[:, :, None]
    return weighted.sum(1).to(dtype), pre.to(dtype)


def bytes_moved(shape: dict) -> int:
    """Read x and the weights of the experts the tokens reach (all of them once tokens x top_k
    covers them), the routing indices and weights; write the output and the pre-activations."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    t, e, k, h, i = shape["tokens"], shape["experts"], shape["top_k"], shape["hidden"], shape["inter"]
    return size * (2 * t * h + min(e, t * k) * 3 * i * h + t * k + t * k * 2 * i) + 4 * t * k


def flops(shape: dict) -> int:
    """Gate, up and down projections of every (token, k) pair."""
    return 2 * shape["tokens"] * shape["top_k"] * 3 * shape["inter"] * shape["hidden"]
