"""LMDeploy multinomial_sampling, variant `offblock` (`multinomial_sampling@offblock` in lmdeploy.yaml).

Another shape mix than the operator's harness: a vocabulary off the 128-token block (GPT-2's
50257) and others in neither of the operator's other harnesses (SmolLM's 49152, 65536, Mistral
Nemo's 131072, Llama 4's 202048), float16 and float32 scores, flat, peaked and mixed rows.
Inputs, reference, bytes_moved and VARY are the operator's harness's (multinomial_sampling.py
beside this file); only the shapes differ.
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
    {"batch": 2, "vocab": 50257, "dist": "flat", "indices": True, "dtype": "float32"},
    {"batch": 96, "vocab": 65536, "dist": "mixed", "indices": True, "dtype": "float16"},
    {"batch": 384, "vocab": 49152, "dist": "peaked", "indices": True, "dtype": "float16"},
    {"batch": 32, "vocab": 202048, "dist": "flat", "indices": True, "dtype": "float32"},
    {"batch": 160, "vocab": 131072, "dist": "mixed", "indices": False, "dtype": "float32"},
]
CPU_SHAPES = [
    {"batch": 3, "vocab": 150, "dist": "flat", "indices": True, "dtype": "float16"},
    {"batch": 2, "vocab": 384, "dist": "mixed", "indices": False, "dtype": "float32"},
]
