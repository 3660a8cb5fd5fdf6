"""`kernelsmith-bot`: the GitHub Actions entry (`run`) and `publish RUN_DIR [--dry-run]`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kernelsmith.errors import KernelsmithError


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of kernelsmith-bot."""
    parser = argparse.ArgumentParser(prog="kernelsmith-bot", description=__doc__)
    parser.add_argument("--targets", help="folder of target yamls (default $KERNELSMITH_TARGETS or targets/)")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="handle the Actions event in GITHUB_EVENT_NAME / GITHUB_EVENT_PATH")
    run.add_argument("--stage", choices=("all", "gate", "publish"), default="all",
                     help="gate: answer the event and write the work list to GITHUB_OUTPUT; publish: "
                          "publish the run dirs of that list (KERNELSMITH_WORK); all: everything here")
    run.add_argument("--runs", default="runs", help="folder of run directories, one per <target>-<op>")
    run.add_argument("--dry-run", action="store_true",
                     help="write the PRs it would open; change nothing remote")
    run.set_defaults(func=cmd_run)
    pub = sub.add_parser("publish", help="open or update the PR for a verified run directory")
    pub.add_argument("run_dir")
    # Never read from the run directory: what code under test wrote there must not pick the repo or file.
    pub.add_argument("--target", required=True, help="target name (or yaml path)")
    pub.add_argument("--op", required=True, help="the operator (in the yaml, or the repo's .kernelsmith.yml)")
    pub.add_argument("--dry-run", action="store_true",
                     help="write title, body and diff to the step summary and RUN_DIR/pr-preview.md only")
    pub.set_defaults(func=cmd_publish)
    return parser


def _truthy(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def cmd_run(args) -> int:
    """Handle one Actions event: the gate, publish or all stages (bot/run.py)."""
    from kernelsmith.onboard.config import targets_dir

    from .actions import ActionsEnv
    from .auth import GATE_PERMISSIONS, PUBLISH_PERMISSIONS, GitHubAuth
    from .engine import Engine
    from .phases.gate import read_event, write_work_list
    from .run import Bot
    from .work import from_json

    env = ActionsEnv.from_env()
    dry = args.dry_run
    if env.event_name == "workflow_dispatch":
        dry = dry or _truthy((read_event(env).get("inputs") or {}).get("dry_run"))
    auth = GitHubAuth.from_env(permissions=GATE_PERMISSIONS if args.stage == "gate" else PUBLISH_PERMISSIONS)
    bot = Bot(env, auth, Engine(targets_dir(args.targets)), targets=args.targets, runs_dir=Path(args.runs),
              dry_run=dry)
    if args.stage == "gate":
        write_work_list(env, bot.gate())
        return 0
    if args.stage == "publish":
        return bot.publish_stage(from_json(os.environ.get("KERNELSMITH_WORK")))
    return bot.run_all()


def cmd_publish(args) -> int:
    """Publish one run directory (or preview it with --dry-run) through the publish phase."""
    from .actions import ActionsEnv
    from .context import Context
    from .pullrequest import PublishError, publish_spec

    env = ActionsEnv.from_env()
    try:
        spec = publish_spec(args.target, args.op, args.targets, allow_path=True)
        if args.dry_run:  # no credentials needed: a dry run makes no request
            ctx = Context(env, None, targets=args.targets, dry_run=True)
        else:
            from .auth import PUBLISH_PERMISSIONS, GitHubAuth

            ctx = Context(env, GitHubAuth.from_env(permissions=PUBLISH_PERMISSIONS), targets=args.targets)
        from .phases.publish import publish_dir

        outcome = publish_dir(ctx, spec, Path(args.run_dir))
    except PublishError as e:
        print(f"kernelsmith-bot: not published: {e}", file=sys.stderr)
        return 1
    print(outcome.message)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the kernelsmith-bot console script; errors are one line, exit 1."""
    args = build_parser().parse_args(argv)
    # The bot holds GitHub tokens; the target code it starts must not read them from /proc.
    from kernelsmith.sandbox import hide_environ

    hide_environ()
    try:
        return int(args.func(args) or 0)
    except KernelsmithError as e:
        print(f"kernelsmith-bot: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("kernelsmith-bot: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
