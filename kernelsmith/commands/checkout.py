"""`kernelsmith checkout TARGET [--from-package [SPEC]] [--into DIR] [--json]`: a target's source."""

from __future__ import annotations

import argparse
import json

FROM_YAML = ""  # --from-package without SPEC: the yaml's `package:`


def register(subparsers) -> None:
    """Add the `checkout` subcommand."""
    p = subparsers.add_parser(
        "checkout", help="make a checkout of a target (a cached clone, or the files of a released package)",
        description="Prints the folder to pass as --checkout to the other commands. With --from-package "
                    "the checkout is built from the release's wheel (pip download, no dependencies): "
                    "the operator files the yaml names, the files they import and their packages' "
                    "__init__.py, committed as one commit with a fixed author and date (the same id on "
                    "every machine) and cached. Runs on it record the release as their base "
                    "(base_release), not an upstream commit. No target code runs.")
    p.add_argument("target", help="target yaml path or name under the targets folder")
    p.add_argument("--from-package", nargs="?", const=FROM_YAML, default=None, metavar="SPEC",
                   help="build from a release: NAME==VERSION, or the yaml's package: without SPEC")
    p.add_argument("--into", metavar="DIR", help="build the release checkout in DIR (new or empty) instead "
                                                 "of the cache")
    p.add_argument("--wheel", metavar="FILE", help="with --from-package: use this wheel file instead of "
                                                   "downloading one")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Make or reuse the checkout and print where it is and what its base is."""
    from kernelsmith.errors import ConfigError
    from kernelsmith.onboard.config import load_target, resolve_target

    target = load_target(resolve_target(args.target, getattr(args, "targets", None)))
    if args.from_package is None:
        if args.into or args.wheel:
            raise ConfigError("--into/--wheel", "only with --from-package (a clone goes to the cache)")
        from kernelsmith.onboard.checkout import prepare_checkout

        co = prepare_checkout(target, None, setup=False)  # no target code runs here
        out = {"target": target.name, "checkout": str(co.path), "base_sha": co.base_sha, "base_release": None}
        if args.json:
            print(json.dumps(out, indent=2))
        else:
            print(f"{target.name}: {co.path}\nbase: {co.base_sha} (branch {target.base} of {target.repo})")
        return 0
    from kernelsmith.onboard.release import release_checkout

    co = release_checkout(target, args.from_package or None, into=args.into, wheel=args.wheel)
    if args.json:
        print(json.dumps({"target": target.name, **co.to_json()}, indent=2))
    else:
        state = "cached" if co.cached else f"{len(co.files)} files from {co.wheel}"
        print(f"{target.name}: {co.path}\n"
              f"base: the release {co.package} ({state}), commit {co.base_sha}: a release, not an upstream "
              f"commit")
    return 0
