"""`kernelsmith` command line: one subcommand per module in kernelsmith/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys

from kernelsmith.errors import KernelsmithError

# Each module defines `register(subparsers)`, which adds its parser and sets `func(args) -> int`.
COMMANDS = ["checkout", "scan", "evaluate", "optimize", "sweep", "verify", "report", "export", "bench",
            "harness"]
# Commands that run untrusted code (candidates, a target's setup and tests, harnesses): in the
# sandbox only. `harness check` runs the base through the referee (`harness new` only reads
# source); `export` reads the harness's facts (harness/gather.py).
UNTRUSTED = ("scan", "evaluate", "optimize", "sweep", "verify", "bench", "harness", "export")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(prog="kernelsmith", description=__doc__)
    parser.add_argument("--targets", help="folder of target yamls (default $KERNELSMITH_TARGETS or targets/)")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"kernelsmith.commands.{name}").register(sub)
    for name in UNTRUSTED:
        if name == "harness":  # its `check` action adds the option itself (commands/harness.py)
            continue
        sub.choices[name].add_argument(
            "--no-sandbox", action="store_true",
            help="run candidate code, harnesses, setup and tests WITHOUT the sandbox (when this machine "
                 "cannot build it: no user namespaces); every output then says so")
    return parser


def _sandbox_for(args) -> None:
    """Refuse early when the sandbox is needed and cannot be built; honour --no-sandbox loudly."""
    from kernelsmith import sandbox

    if getattr(args, "no_sandbox", False):
        sandbox.disable()
        print(f"kernelsmith: WARNING: {sandbox.NO_SANDBOX_NOTE}", file=sys.stderr)
    elif args.command in UNTRUSTED and not (args.command == "scan" and getattr(args, "static", False)) \
            and not (args.command == "harness" and args.action == "new"):
        sandbox.require()
    if args.command in UNTRUSTED:
        # Before anything runs target code (setup, harnesses, candidates): an LLM key goes to the
        # broker process (search/mutators/broker.py); then every credential leaves this process's
        # environment and /proc/self/environ.
        if _uses_llm(args):
            from kernelsmith.search.mutators.llm_settings import start_from_environment

            start_from_environment()
        sandbox.drop_secrets_from_environ()


def _uses_llm(args) -> bool:
    from kernelsmith.search.mutators import uses_llm

    if args.command == "optimize":
        return uses_llm(args.mutator) and args.replay is None
    return args.command == "bench" and args.mutator is not None and uses_llm(args.mutator)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; usage and config errors exit 2 with one clear line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from kernelsmith import sandbox

    try:
        _sandbox_for(args)
        return int(args.func(args) or 0)
    except KernelsmithError as e:
        print(f"kernelsmith: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelsmith: interrupted", file=sys.stderr)
        return 130
    finally:
        sandbox.enable()  # --no-sandbox holds for this command only (tests call main() in-process)
        if args.command in UNTRUSTED and _uses_llm(args):
            from kernelsmith.search.mutators.broker import stop_default

            stop_default()


if __name__ == "__main__":
    sys.exit(main())
