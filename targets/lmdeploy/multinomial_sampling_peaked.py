"""LMDeploy multinomial_sampling, variant `peaked` (`multinomial_sampling@peaked` in lmdeploy.yaml).

Another shape mix than the operator's harness: decode steps whose rows are mostly peaked (50-99%
of the mass on 1-4 tokens, so the draw lands in the first block and the rest of the walk only
loops), at larger batches, with larger vocabularies (Qwen 2.5's 152064, Gemma's 256000, a padded
100352) and mostly bfloat16 scores. Inputs, reference, bytes_moved and VARY are the operator's
harness's (multinomial_sampling.py beside this file); only the shapes differ.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"{__name__}_base",
                                               Path(__file__).with_name("multinomial_sampling.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs, reference, bytes_moved = _base.make_inputs, _base.reference, _base.bytes_moved
OUTPUTS, VARY = _base.OUTPUTS, _base.VARY

SHAPES = [
    {"batch": 512, "vocab": 32000, "dist": "peaked", "indices": True, "dtype": "float32"},
    {"batch": 128, "vocab": 152064, "dist": "peaked", "indices": True, "dtype": "bfloat16"},
    {"batch": 64, "vocab": 256000, "dist": "peaked", "indices": True, "dtype": "bfloat16"},
    {"batch": 8, "vocab": 128256, "dist": "peaked", "indices": False, "dtype": "float16"},
    {"batch": 256, "vocab": 100352, "dist": "mixed", "indices": True, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"batch": 4, "vocab": 260, "dist": "peaked", "indices": True, "dtype": "float32"},
    {"batch": 2, "vocab": 129, "dist": "peaked", "indices": False, "dtype": "float16"},
]
