"""Stand-in for `lmdeploy.messages`, which LMDeploy's fill_kv_cache.py and its test import only
for the `QuantPolicy` enum.

The real module imports pydantic, the tokenizer (transformers) and the disaggregation config at
its top. The kernel file compares `quant_policy` with `QuantPolicy.NONE`, `INT4`, `INT8`, `FP8`,
`FP8_E5M2` and `TURBO_QUANT`; the members and values below are those of lmdeploy/messages.py at
1263d5cd (an IntEnum, so Triton sees plain ints). Used by the yaml's `stubs:` (the referee, `harness
check`) and by the upstream test command's `--light-stub`; never by the kernels' own code paths.
"""

import enum


class QuantPolicy(enum.IntEnum):
    """Quantization policy of the KV cache (LMDeploy's values)."""

    NONE = 0
    INT4 = 4
    INT8 = 8
    FP8 = 16
    FP8_E5M2 = 17
    TURBO_QUANT = 42
