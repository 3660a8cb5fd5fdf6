"""The harness variants the search's rules are tuned on, reported on, and held out: the one place
that names them (issue 42, "Rules tuned on more than one harness").

For each of the four heaviest operators measured from outside (multinomial_sampling and
fill_kv_cache of LMDeploy, merge_state and act_quant of SGLang), the operator's own harness (""),
and two variants its harness declares (`VARIANTS`; run as `OP@VARIANT`). Rules are tuned on
`tune`, measured on `report` as well, and `held_out` is not run or read until the rules are final:
dev/gpu/search_vs_sweep.sh runs it only when asked (SVS_SET=held-out).

    python3 dev/variants.py [tune|report|held-out|measured|all]   # target:op[@variant], one a line
"""

from __future__ import annotations

import sys

OPERATORS = {
    "lmdeploy:multinomial_sampling": {"tune": "", "report": "peaked", "held_out": "offblock"},
    "lmdeploy:fill_kv_cache": {"tune": "", "report": "decode", "held_out": "spec"},
    "sglang:merge_state": {"tune": "", "report": "long", "held_out": "oddheads"},
    "sglang:act_quant": {"tune": "", "report": "moe", "held_out": "dtypes"},
}
ROLES = ("tune", "report", "held_out")
# What a name on the command line stands for: "measured" is what the "Show" table reports
# (tuning and reporting variants); the held-out one only on its own.
SETS = {"tune": ("tune",), "report": ("report",), "held-out": ("held_out",),
        "measured": ("tune", "report"), "all": ROLES}


def operator_name(op: str, variant: str) -> str:
    """The OP argument of a kernelsmith command for `op` with `variant` ("" is its own harness)."""
    return f"{op}@{variant}" if variant else op


def pairs(which: str = "measured") -> list[str]:
    """`target:OP[@VARIANT]` of every operator, for the roles `which` names (SETS)."""
    return [f"{pair.split(':')[0]}:{operator_name(pair.split(':')[1], roles[role])}"
            for pair, roles in OPERATORS.items() for role in SETS[which]]


def main(argv: list[str]) -> int:
    """Print the pairs of one set, one a line."""
    which = argv[0] if argv else "measured"
    if which not in SETS or len(argv) > 1:
        print(f"usage: python3 dev/variants.py [{'|'.join(SETS)}]", file=sys.stderr)
        return 2
    print("\n".join(pairs(which)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
