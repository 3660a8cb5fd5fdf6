"""`kernelsmith-bot`: the GitHub Actions entry (`run`) and `publish RUN_DIR [--dry-run]`."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
from dataclasses import asdict
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


def _write_output(path: str | None, name: str, value: str) -> None:
    if not path:
        print(f"{name}={value}")
        return
    delim = f"ks_{secrets.token_hex(8)}"
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{name}<<{delim}\n{value}\n{delim}\n")


def cmd_run(args) -> int:
    """Handle one Actions event."""
    from .app import ActionsEnv, Bot, WorkItem
    from .auth import GATE_PERMISSIONS, PUBLISH_PERMISSIONS, GitHubAuth
    from .engine import Engine
    from .publish import write_summary

    env = ActionsEnv.from_env()
    dry = args.dry_run
    if env.event_name == "workflow_dispatch" and env.event_path and Path(env.event_path).is_file():
        inputs = json.loads(Path(env.event_path).read_text()).get("inputs") or {}
        dry = dry or _truthy(inputs.get("dry_run"))
    auth = GitHubAuth.from_env(permissions=GATE_PERMISSIONS if args.stage == "gate" else PUBLISH_PERMISSIONS)
    from kernelsmith.target.config import targets_dir

    engine = Engine(targets_dir(args.targets))
    bot = Bot(env, auth, engine, targets=args.targets, runs_dir=Path(args.runs), dry_run=dry)
    if args.stage == "gate":
        items = bot.gate()
        _write_output(env.output, "work", json.dumps([asdict(i) for i in items]))
        _write_output(env.output, "count", str(len(items)))
        lines = [f"- `{i.target}/{i.op}` ({', '.join(i.notes) or 'on request'})" for i in items]
        text = "\n".join(lines) or "nothing to do"
        write_summary(env.step_summary, "**kernelsmith** work list:\n" + text)
        return 0
    if args.stage == "publish":
        raw = os.environ.get("KERNELSMITH_WORK") or "[]"
        items = [WorkItem(**d) for d in json.loads(raw)]
        return bot.publish_stage(items)
    return bot.run_all()


def cmd_publish(args) -> int:
    """Publish one run directory (or preview it with --dry-run)."""
    from .publish import PublishError, dry_run, publish_spec

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    try:
        spec = publish_spec(args.target, args.op, args.targets, allow_path=True)
        if args.dry_run:
            outcome = dry_run(spec, Path(args.run_dir), summary)
        else:
            outcome = _publish_and_record(spec, Path(args.run_dir), summary)
    except PublishError as e:
        print(f"kernelsmith-bot: not published: {e}", file=sys.stderr)
        return 1
    print(outcome.message)
    return 0


def _publish_and_record(spec, run_dir: Path, summary):
    from kernelsmith.target.state import load_state, save_state

    from . import dashboard, prs
    from .app import ActionsEnv
    from .auth import PUBLISH_PERMISSIONS, GitHubAuth
    from .remote import publish_remote

    env = ActionsEnv.from_env()
    auth = GitHubAuth.from_env(permissions=PUBLISH_PERMISSIONS)
    outcome = publish_remote(spec, run_dir, auth, env.server_url, summary=summary)
    target = spec.target
    repo = auth.repo(target.repo)
    state = load_state()
    issue = dashboard.find_dashboard(repo, auth.identity(target.repo))
    if issue is not None:
        dashboard.merge_into(state, dashboard.read_block(issue.body))
    prs.refresh(state, repo, dashboard.repo_keys([target]))
    prs.record_outcome(state, outcome.target, outcome.op, outcome)
    save_state(state)
    dashboard.sync(repo, [target], state, None, env.run_url, auth.identity(target.repo))
    return outcome


def main(argv: list[str] | None = None) -> int:
    """Entry point of the kernelsmith-bot console script; errors are one line, exit 1."""
    args = build_parser().parse_args(argv)
    # The bot holds GitHub tokens; the target code it starts must not read them from /proc.
    from kernelsmith.referee.process import hide_environ

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
