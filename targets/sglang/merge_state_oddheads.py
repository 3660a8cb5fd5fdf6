"""SGLang merge_state_triton, variant `oddheads` (`merge_state@oddheads` in sglang.yaml).

Another shape mix than the operator's harness: head counts and sizes in neither of the operator's
other harnesses (28 heads of 128 as in Qwen 2 7B, 40 heads of 128, 96 heads of 80, 12 heads of
64), token counts from 2 to 24576, float16 and bfloat16. Inputs, reference, bytes_moved, OUTPUTS
and VARY are the operator's harness's (merge_state.py beside this file); only the shapes differ.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"{__name__}_base", Path(__file__).with_name("merge_state.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs, reference, bytes_moved = _base.make_inputs, _base.reference, _base.bytes_moved
OUTPUTS, VARY = _base.OUTPUTS, _base.VARY

SHAPES = [
    {"tokens": 2, "heads": 28, "head_dim": 128, "dtype": "bfloat16"},
    {"tokens": 700, "heads": 40, "head_dim": 128, "dtype": "float16"},
    {"tokens": 6000, "heads": 96, "head_dim": 80, "dtype": "bfloat16"},
    {"tokens": 24576, "heads": 12, "head_dim": 64, "dtype": "float16"},
]
CPU_SHAPES = [
    {"tokens": 5, "heads": 3, "head_dim": 40, "dtype": "float16"},
    {"tokens": 1, "heads": 6, "head_dim": 16, "dtype": "float32"},
]
