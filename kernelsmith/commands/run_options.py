"""The options `optimize` and `sweep` share (what to search, where, on which devices, how candidates
are evaluated), defined once, and the SearchConfig fields they give."""

from __future__ import annotations

import argparse

from kernelsmith.errors import ConfigError

# What each command calls the thing it evaluates, and what its seed fixes.
_WORDS = {
    "optimize": {"unit": "candidate", "run": "search", "seed": "the sequence of proposals", "minutes": ""},
    "sweep": {"unit": "point", "run": "sweep", "seed": "the order the grid is visited in",
              "minutes": " (default: the whole grid)"},
}


def add_run_options(p: argparse.ArgumentParser, what: str) -> None:
    """TARGET, OP and the run options of `what` ("optimize" or "sweep"), in a group of their own
    (-h lists a command's own options after them)."""
    words = _WORDS[what]
    p.add_argument("target", help="target yaml path or name under the targets folder")
    p.add_argument("op", help="operator name in the target")
    g = p.add_argument_group("run options (optimize and sweep)")
    g.add_argument("--checkout", help="use this folder as the target's source (default: cached clone)")
    g.add_argument("--out", help="the run directory (default: runs/<target>-<op>-<time>)")
    g.add_argument("--minutes", type=float, help=f"wall-clock budget in minutes{words['minutes']}")
    g.add_argument("--gpus", help="comma-separated CUDA device indices (default: all visible)")
    g.add_argument("--device", default="auto", choices=("auto", "cuda", "interpret"))
    g.add_argument("--resume", action="store_true",
                   help=f"continue the {words['run']} in --out from its archive")
    g.add_argument("--seed", type=int, default=None,
                   help=f"run seed: fixes {words['seed']} (default 0; a resumed run keeps its own)")
    g.add_argument("--wait", action="store_true",
                   help="when another kernelsmith process holds --out, wait for it to end (default: exit 2)")
    g.add_argument(
        "--compile-limit",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help=f"reject (as a timeout) a {words['unit']} whose kernels take longer than this to compile on "
        "the CPU compile processes (with --ray: each node's own; default 20; 0: no limit)",
    )
    g.add_argument("--no-progress", action="store_true", help="plain log lines instead of a live bar")
    g.add_argument("--ray", metavar="ADDRESS", help="run the evaluator pool on the Ray cluster at ADDRESS "
                   "(host:port, or auto: the one started on this machine); needs kernelsmith[ray]")
    g.add_argument("--workers-per-node", type=int, metavar="N",
                   help="with --ray: N workers on each node (default: one per GPU; CPU nodes need it)")
    g.add_argument("--pipeline", type=int, metavar="N",
                   help="generations in flight (default: 2, or on CUDA enough to keep one compile process "
                   "per spare CPU core busy); a generation does not see the verdicts of the N-1 before it")


def run_config(args: argparse.Namespace) -> dict:
    """The SearchConfig fields of the shared options, checked (ConfigError naming the option; ray
    missing: the install line)."""
    if args.minutes is not None and args.minutes <= 0:
        raise ConfigError("--minutes", "must be positive")
    return {
        "target": args.target,
        "op": args.op,
        "checkout": args.checkout,
        "out": args.out,
        "minutes": args.minutes,
        "gpus": _gpus(args.gpus),
        "device": args.device,
        "resume": args.resume,
        "seed": args.seed,
        "wait": args.wait,
        "progress": not args.no_progress,
        "targets": args.targets,
        "compile_limit": args.compile_limit,
        **_pool_config(args),
    }


def _pool_config(args: argparse.Namespace) -> dict:
    if args.pipeline is not None and not 1 <= args.pipeline <= 16:
        raise ConfigError("--pipeline", "must be between 1 and 16")
    if args.workers_per_node is not None:
        if args.ray is None:
            raise ConfigError("--workers-per-node", "only applies with --ray")
        if args.workers_per_node < 1:
            raise ConfigError("--workers-per-node", "must be at least 1")
    if args.ray is not None:
        if args.gpus is not None:
            raise ConfigError("--gpus", "with --ray the workers are the cluster's GPUs; leave --gpus out")
        from kernelsmith.search.ray_pool import require_ray

        require_ray()
    return {"ray": args.ray, "workers_per_node": args.workers_per_node, "pipeline": args.pipeline}


def _gpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError("--gpus", f"{text!r} is not a comma-separated list of device indices") from None
    if not gpus or any(g < 0 for g in gpus):
        raise ConfigError("--gpus", f"{text!r} names no device")
    return gpus
