import os

import torch

# Without CUDA the kernels run under the Triton interpreter (set before any @triton.jit runs).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
