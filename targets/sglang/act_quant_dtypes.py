"""SGLang act_quant, variant `dtypes` (`act_quant@dtypes` in sglang.yaml).

Another shape mix than the operator's harness: float32 and float16 inputs besides bfloat16, widths
in neither of the operator's other harnesses (768, 2560, 5120, 12288) and token counts from 2 to
20000. Inputs, reference, bytes_moved and VARY are the operator's harness's (act_quant.py
beside this file); only the shapes differ.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"{__name__}_base", Path(__file__).with_name("act_quant.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs, reference, bytes_moved = _base.make_inputs, _base.reference, _base.bytes_moved
OUTPUTS, VARY = _base.OUTPUTS, _base.VARY

SHAPES = [
    {"tokens": 2, "hidden": 2560, "dtype": "bfloat16"},
    {"tokens": 300, "hidden": 12288, "dtype": "float16"},
    {"tokens": 3000, "hidden": 5120, "dtype": "bfloat16"},
    {"tokens": 20000, "hidden": 768, "dtype": "float32"},
]
CPU_SHAPES = [
    {"tokens": 3, "hidden": 640, "dtype": "float16"},
    {"tokens": 1, "hidden": 256, "dtype": "float32"},
]
