"""SGLang act_quant, variant `moe` (`act_quant@moe` in sglang.yaml).

Another shape mix than the operator's harness: more of DeepSeek V3's quantized inputs (18432 wide:
the dense MLP's intermediate; 1536: the query's low rank; 2048, an expert's, at 512 tokens) and a
4096-wide float16 input, from 8 to 32768 tokens. Inputs, reference, bytes_moved and VARY are the
operator's harness's (act_quant.py beside this file); only the shapes differ.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"{__name__}_base", Path(__file__).with_name("act_quant.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs, reference, bytes_moved = _base.make_inputs, _base.reference, _base.bytes_moved
OUTPUTS, VARY = _base.OUTPUTS, _base.VARY

SHAPES = [
    {"tokens": 8, "hidden": 18432, "dtype": "bfloat16"},
    {"tokens": 512, "hidden": 2048, "dtype": "bfloat16"},
    {"tokens": 2048, "hidden": 18432, "dtype": "bfloat16"},
    {"tokens": 8192, "hidden": 4096, "dtype": "float16"},
    {"tokens": 32768, "hidden": 1536, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"tokens": 2, "hidden": 384, "dtype": "float16"},
    {"tokens": 7, "hidden": 128, "dtype": "float32"},
]
