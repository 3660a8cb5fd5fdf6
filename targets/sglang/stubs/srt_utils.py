"""Stand-in for `sglang.srt.utils`, which SGLang's kernel files import only for platform flags.

`sglang.srt.utils` imports a large part of the SGLang runtime; the kernel files named in
targets/sglang.yaml use just `is_hip()` from it, answered here the way SGLang answers it
(python/sglang/srt/utils/common.py in sglang 0.5.23).
"""

import torch


def is_hip() -> bool:
    """Whether torch was built for ROCm."""
    return torch.version.hip is not None

