"""SGLang merge_state_triton, variant `long` (`merge_state@long` in sglang.yaml).

Another shape mix than the operator's harness: mostly long chunked-prefill merges, over other
attention geometries: 128 heads of 128 (DeepSeek's MLA), 8 heads at 32768 tokens, head_dim 256
(Gemma) and 96 (Phi-3, not a power of two: the kernel masks its padded lanes), float16 and
bfloat16, and one short step of 8 tokens. Inputs, reference, bytes_moved, OUTPUTS and VARY are the
operator's harness's (merge_state.py beside this file); only the shapes differ.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"{__name__}_base", Path(__file__).with_name("merge_state.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs, reference, bytes_moved = _base.make_inputs, _base.reference, _base.bytes_moved
OUTPUTS, VARY = _base.OUTPUTS, _base.VARY

SHAPES = [
    {"tokens": 8192, "heads": 128, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 32768, "heads": 8, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 16384, "heads": 16, "head_dim": 256, "dtype": "bfloat16"},
    {"tokens": 2048, "heads": 32, "head_dim": 96, "dtype": "float16"},
    {"tokens": 8, "heads": 64, "head_dim": 128, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"tokens": 6, "heads": 4, "head_dim": 48, "dtype": "float16"},
    {"tokens": 2, "heads": 2, "head_dim": 64, "dtype": "float32"},
]
