"""`kernelsmith harness check|new TARGET OP`: validate a harness, or write a skeleton for one."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    """Add the `harness` subcommand with its `check` and `new` actions."""
    p = subparsers.add_parser("harness", help="check a harness before any search, or write a new one",
                              description=__doc__)
    sub = p.add_subparsers(dest="action", required=True)
    c = sub.add_parser("check", help="validate a harness: exit 0 sound, 1 problems, 2 config error",
                       description="Seeded determinism and seed sensitivity of make_inputs, a reference "
                       "that leaves its inputs alone, OUTPUTS/INPLACE naming real inputs, negative controls "
                       "(zeros, a dropped term, a 1% perturbation, an unwritten output) failing under the "
                       "tolerance, the base's error well inside it, bytes_moved/flops positive, VARY "
                       "present; then the base through the real referee. One line per problem: the check "
                       "and the fix.")
    c.add_argument("target", help="target yaml path or name under the targets folder")
    c.add_argument("op", help="operator name in the target")
    c.add_argument("--checkout", help="use this folder as the target's source instead of a clone")
    c.add_argument("--device", default="auto", choices=["auto", "cuda", "interpret"])
    c.add_argument("--timeout", type=float, default=None, help="wall-clock seconds for the referee's run")
    c.add_argument("--no-sandbox", action="store_true",
                   help="run the base and the harness's checks WITHOUT the sandbox (no user namespaces); "
                        "every output then says so")
    c.set_defaults(func=run_check)
    n = sub.add_parser("new", help="write a harness skeleton from the entry's signature (never overwrites)",
                       description="Writes the harness file the operator's yaml entry names, from the entry "
                       "function's signature (and body): shape fields for its tensors and sizes, constants "
                       "for its other scalars, enum defaults left to the entry, a seeded make_inputs, a "
                       "reference stub whose TODO `harness check` reports. Exit 0, or 2 (file exists, no "
                       "such operator or entry).")
    n.add_argument("target", help="target yaml path or name under the targets folder")
    n.add_argument("op", help="operator name in the target (its yaml entry names the harness path)")
    n.add_argument("--checkout", help="use this folder as the target's source instead of a clone")
    n.set_defaults(func=run_new)


def run_check(args: argparse.Namespace) -> int:
    """Print one line per problem; 0 sound, 1 problems (config errors raise -> 2)."""
    from kernelsmith.errors import ConfigError
    from kernelsmith.onboard.harness_check import check_harness
    from kernelsmith.onboard.task import load_task

    # The harness is target code: imported only in check_harness's sandboxed child, never here.
    task = load_task(args.target, args.op, args.checkout, getattr(args, "targets", None),
                     harness=None)
    try:
        report = check_harness(task, args.device, args.timeout)
    except ValueError as e:
        raise ConfigError("--device", str(e)) from None
    for line in report.lines():
        print(line)
    return 0 if report.sound else 1


def run_new(args: argparse.Namespace) -> int:
    """Write the skeleton and say what to do next."""
    from kernelsmith.harness.new import write_skeleton
    from kernelsmith.launch.follow import HelperReach, Sources
    from kernelsmith.onboard.checkout import prepare_checkout
    from kernelsmith.onboard.config import load_target, resolve_target

    target = load_target(resolve_target(args.target, getattr(args, "targets", None)))
    target.operator(args.op)  # an unknown operator is a config error before any clone
    co = prepare_checkout(target, args.checkout, setup=False)
    sources = Sources(co.path, target.operator(args.op).file)
    path = write_skeleton(target, args.op, co.path, lambda code, tree: HelperReach(sources, code, tree))
    print(f"wrote {path}")
    from kernelsmith.commands.scan import where_args
    from kernelsmith.reproduce import harness_line

    check = harness_line("check", args.op, **where_args(args))
    print(f"next: fill in its TODOs (shapes, make_inputs, reference), then run `{check}`")
    return 0
