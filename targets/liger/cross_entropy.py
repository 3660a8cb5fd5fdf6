"""Harness for Liger-Kernel's cross_entropy_forward: the training loss of a language model head.

As LigerCrossEntropyFunction.forward calls it in training: the logits require grad, so the kernel
also writes d loss / d logits into them (its HAS_GRADIENTS path, the one training runs). `call`
hands the entry a view of the logits that requires grad and returns what is compared: the mean
loss and the gradient left in the logits (INPLACE). The entry returns (loss, z_loss,
token_accuracy, predicted_tokens, logits); the Nones and the view are not compared. Rows whose
target is `ignore_index` (-100) count for nothing and get a zero gradient. num_warps is 32 on the
H100/H200, 8 for 16-bit logits on Blackwell (a branch in the entry); BLOCK_SIZE is
min(32768, next_power_of_2(V)).
"""

import torch

SHAPES = [
    {"rows": 4096, "vocab": 32000, "dtype": "bfloat16"},  # Llama 2
    {"rows": 8192, "vocab": 128256, "dtype": "bfloat16"},  # Llama 3
    {"rows": 2048, "vocab": 151936, "dtype": "bfloat16"},  # Qwen 2
    {"rows": 2048, "vocab": 50257, "dtype": "float32"},  # GPT-2, float32 logits
]
CPU_SHAPES = [
    {"rows": 4, "vocab": 200, "dtype": "float16"},
    {"rows": 3, "vocab": 130, "dtype": "float32"},
]
OUTPUTS = None  # what `call` returns: (loss, gradient)
INPLACE = ["_input"]  # the logits: the kernel overwrites them with the gradient
# The gradient is about 1 / (vocab * rows) per element: tolerances relative to each element (an
# absolute one would pass zeros). float16 keeps an atol of its subnormal spacing (6e-8).
TOLERANCE = {"bfloat16": {"atol": 0.0, "rtol": 1e-2}, "float16": {"atol": 1e-7, "rtol": 1e-2},
             "float32": {"atol": 0.0, "rtol": 1e-5}}
VARY = {"rows": [1, 5, 9], "vocab": [100, 1000, 3000]}
IGNORE = -100


def make_inputs(shape: dict, device: str, seed: int) -> dict:
    """Logits [rows, vocab] (2 * N(0, 1)), targets with about one row in eight ignored (never the
    first: the mean needs a row that counts); no weights, smoothing, z-loss or softcap."""
    g = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape["dtype"])
    n, v = shape["rows"], shape["vocab"]
    logits = (2.0 * torch.randn(n, v, generator=g, device=device)).to(dtype)
    target = torch.randint(0, v, (n,), generator=g, device=device)
    ignored = torch.rand(n, generator=g, device=device) < 1 / 8
    ignored[0] = False
    target[ignored] = IGNORE
    return {"_input": logits, "target": target, "weight": None, "ignore_index": IGNORE,
            "lse_square_scale": 0.0, "label_smoothing": 0.0, "reduction": "mean", "softcap": None,
            "return_z_loss": False}


def call(entry, inputs):
    """The entry on logits that require grad (a view: the gradient lands in the input); returns
    (the loss, the logits holding the gradient)."""
    logits = inputs["_input"]
    loss = entry(**{**inputs, "_input": logits.detach().requires_grad_()})[0]
    return loss, logits


def reference(_input, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap,
              return_z_loss):
    """Mean cross entropy over the rows that count, and its gradient (softmax - one_hot) / count
    (zero on ignored rows), in float64, cast to the logits' dtype."""
    x = _input.double()
    keep = target != ignore_index
    count = keep.sum()
    safe = torch.where(keep, target, 0)
    logp = torch.log_softmax(x, dim=-1)
    loss = -(logp.gather(1, safe[:, None]).squeeze(1) * keep).sum() / count
    grad = (logp.exp() - torch.nn.functional.one_hot(safe, x.shape[1])) / count
    grad = grad * keep[:, None]
    return loss.to(_input.dtype), grad.to(_input.dtype)


def bytes_moved(shape: dict) -> int:
    """Read the logits and write their gradient once, read the targets, write a loss per row."""
    size = torch.finfo(getattr(torch, shape["dtype"])).bits // 8
    n, v = shape["rows"], shape["vocab"]
    return 2 * size * n * v + 8 * n + size * n
