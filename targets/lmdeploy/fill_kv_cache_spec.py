"""LMDeploy fill_kv_cache, variant `spec` (`fill_kv_cache@spec` in lmdeploy.yaml).

Another shape mix than the operator's harness: a few new tokens per sequence (speculative
decoding's verify steps, 2 to 8 tokens), one prefill of 4 x 1024 tokens after long histories,
a single KV head (multi-query attention) with head_dim 256, head_dim 64, cache blocks of 32, 128
and 256 tokens, and a 100000-token history. Inputs, reference, bytes_moved, OUTPUTS, INPLACE,
TOLERANCE and VARY are the operator's harness's (fill_kv_cache.py beside this file); only the
shapes differ.
"""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(f"{__name__}_base",
                                               Path(__file__).with_name("fill_kv_cache.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

make_inputs, reference, bytes_moved = _base.make_inputs, _base.reference, _base.bytes_moved
OUTPUTS, INPLACE, TOLERANCE, VARY = _base.OUTPUTS, _base.INPLACE, _base.TOLERANCE, _base.VARY

SHAPES = [
    {"batch": 64, "q_per_seq": 4, "max_history": 2048, "block_size": 64, "heads": 8, "q_heads": 32,
     "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 32, "q_per_seq": 8, "max_history": 4096, "block_size": 128, "heads": 1, "q_heads": 8,
     "head_dim": 256, "dtype": "float16"},
    {"batch": 128, "q_per_seq": 2, "max_history": 1024, "block_size": 32, "heads": 2, "q_heads": 16,
     "head_dim": 64, "dtype": "bfloat16"},
    {"batch": 4, "q_per_seq": 1024, "max_history": 6144, "block_size": 64, "heads": 16, "q_heads": 64,
     "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 2, "q_per_seq": 1, "max_history": 100000, "block_size": 256, "heads": 8, "q_heads": 64,
     "head_dim": 128, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"batch": 2, "q_per_seq": 3, "max_history": 11, "block_size": 8, "heads": 1, "q_heads": 2,
     "head_dim": 20, "dtype": "float16"},
    {"batch": 4, "q_per_seq": 2, "max_history": 5, "block_size": 2, "heads": 3, "q_heads": 3,
     "head_dim": 8, "dtype": "float32"},
]
