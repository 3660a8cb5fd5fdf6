"""Whether fused_neighborhood_attention's positional `num_warps` / `num_stages` reach the launch.

Liger-Kernel 0.8.5 passes them by position into kernel parameters of those names; Triton's
JITFunction.run takes launch options from keyword arguments only (triton 3.9 jit.py `_pack_args`:
`backend.parse_options(kwargs)`), so the compiled kernels should show the defaults (4 warps,
3 stages) whatever the entry computes. Prints each compiled kernel's metadata.
    python3 dev/gpu/liger_nat_warps.py [CHECKOUT]     # default .carry/liger
"""

import sys
from pathlib import Path

import torch

from kernelsmith.loader import load_operator_module

root = Path(sys.argv[1] if len(sys.argv) > 1 else ".carry/liger")
mod = load_operator_module(root, "src/liger_kernel/ops/fused_neighborhood_attention.py", tag="w")
for seq in (256, 2048):  # calculate_settings: 4 then 8 warps; num_stages 2 then 4
    q, k, v = (torch.randn(1, 4, seq, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mod.fused_neighborhood_attention_forward(q, k, v, 7, 1, None)
    torch.cuda.synchronize()
    for name in ("_neighborhood_mask_kernel", "_fused_neighborhood_attention_qk_kernel",
                 "_fused_neighborhood_attention_av_kernel"):
        fn = getattr(mod, name)
        for cache in fn.device_caches.values():
            for compiled in cache[0].values():
                md = compiled.metadata
                print(f"seq={seq} {name}: compiled num_warps={md.num_warps} num_stages={md.num_stages}")
