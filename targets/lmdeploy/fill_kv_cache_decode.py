"""LMDeploy fill_kv_cache, variant `decode` (`fill_kv_cache@decode` in lmdeploy.yaml).

Another shape mix than the operator's harness: decode steps only (one new token per sequence, the
kernel's decoding path) at large batches with long histories, over other model geometries: 4 KV
heads under 28 query heads (Qwen 2 7B), head_dim 256 (Gemma 2), 2 KV heads, cache blocks of 16
and 128 tokens, and batch 512 with 2048 tokens of history each (a cache of about 4.5 GB).
Inputs, reference, bytes_moved, OUTPUTS, INPLACE, TOLERANCE and VARY are the operator's
harness's (fill_kv_cache.py beside this file); only the shapes differ.
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
    {"batch": 512, "q_per_seq": 1, "min_history": 2048, "max_history": 2048, "block_size": 64, "heads": 8,
     "q_heads": 32, "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 256, "q_per_seq": 1, "max_history": 8192, "block_size": 128, "heads": 4, "q_heads": 28,
     "head_dim": 128, "dtype": "bfloat16"},
    {"batch": 128, "q_per_seq": 1, "max_history": 4096, "block_size": 64, "heads": 8, "q_heads": 16,
     "head_dim": 256, "dtype": "bfloat16"},
    {"batch": 32, "q_per_seq": 1, "max_history": 32768, "block_size": 64, "heads": 8, "q_heads": 64,
     "head_dim": 128, "dtype": "float16"},
    {"batch": 16, "q_per_seq": 1, "max_history": 1024, "block_size": 16, "heads": 2, "q_heads": 16,
     "head_dim": 128, "dtype": "bfloat16"},
]
CPU_SHAPES = [
    {"batch": 5, "q_per_seq": 1, "min_history": 6, "max_history": 6, "block_size": 4, "heads": 1,
     "q_heads": 3, "head_dim": 16, "dtype": "float16"},
    {"batch": 3, "q_per_seq": 1, "max_history": 40, "block_size": 16, "heads": 2, "q_heads": 8,
     "head_dim": 32, "dtype": "float32"},
]
