"""The pull request of a verified run: what publishing trusts (`PublishSpec`), whether the run is
publishable, the PR it drafts, and a dry run's preview. bot/phases/publish.py drives it and
bot/remote.py pushes it.

What is published is decided by trusted inputs only: the target and operator come from the gate's
work item (or the person at the terminal), the repository, base branch and file to replace from the
target yaml in the targets folder (or the repo's `.kernelsmith.yml` on its base branch). The run
directory is hostile input (bot/artifact.py): it supplies the winner's content for exactly that
file, numbers and the verify record, nothing else. Only a run whose verify status is "pass" and
whose geomean speedup meets the operator's `min_speedup` is published. The branch is
`kernelsmith/<target>/<op>` on the target repo (or its `fork`) with one bot-authored commit; the PR
body is rendered here (bot/prbody.py) and ends with the bot's marker; a later run updates the same
PR in place. `--dry-run` writes the PR it would open to the run directory and the step summary and
makes no request at all.
"""

from __future__ import annotations

import copy
import difflib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from kernelsmith.errors import KernelsmithError
from kernelsmith.onboard.config import (
    DEFAULT_MIN_SPEEDUP,
    Target,
    load_target,
    merge_repo_operators,
    parse_yaml,
)

from .actions import write_summary
from .artifact import (
    LABEL_RE,
    MAX_JSON_BYTES,
    Evidence,
    PublishError,
    check_rewrite_kernels,
    load_evidence,
    read_plain,
    read_winner,
)
from .prbody import NAME_RE, fence, marker, read_marker, render_body, with_marker

__all__ = ["BRANCH_PREFIX", "PublishError", "PublishSpec", "marker", "read_marker", "publish_spec", "draft",
           "dry_run"]

BRANCH_PREFIX = "kernelsmith/"
MAX_BODY = 60000  # GitHub refuses bodies over 65536 characters
PREVIEW = "pr-preview.md"
REPO_CONFIG = ".kernelsmith.yml"


@dataclass(frozen=True)
class PublishSpec:
    """What publishing trusts: the work item's target and operator, and the yaml's settings for it."""

    target: Target
    op: str
    file: str | None            # None: the operator is in the repo's .kernelsmith.yml (read at publish)
    min_speedup: float
    branch_target: str
    test: str | None = None
    benchmark: str | None = None

    @property
    def repo(self) -> str:
        """owner/name of the repository the PR goes to (the target yaml's `repo`)."""
        return self.target.repo


def _named_yaml(name: str, targets: str | None) -> Path:
    from kernelsmith.onboard.config import targets_dir

    if not _is_name(name):
        raise PublishError(f"{name!r} is not a target name")
    folder = targets_dir(targets)
    for suffix in (".yaml", ".yml"):
        if (folder / f"{name}{suffix}").is_file():
            return folder / f"{name}{suffix}"
    raise PublishError(f"no target named {name!r} in {folder}")


def _is_name(text) -> bool:
    return isinstance(text, str) and bool(NAME_RE.match(text))


def publish_spec(target: str, op: str, targets: str | None = None, *, repo: str | None = None,
                 allow_path: bool = False) -> PublishSpec:
    """The trusted side of publishing for `target`/`op` (a name in the targets folder; a yaml path
    too when `allow_path`, for a person at the terminal). `repo`, when given, must match the yaml."""
    if allow_path and Path(target).suffix in (".yaml", ".yml"):
        t = load_target(target)
    else:
        t = load_target(_named_yaml(target, targets))
    if not _is_name(op):
        raise PublishError(f"{op!r} is not an operator name")
    if repo is not None and repo != t.repo:
        raise PublishError(f"the work item names repository {repo} but {t.path.name} says {t.repo}")
    for o in t.operators:
        if o.name == op:
            return _checked(PublishSpec(t, op, o.file, o.min_speedup, t.name, o.test, o.benchmark))
    if op in t.broken:  # in the yaml, but not loadable: its own error, not "not found"
        raise PublishError(str(t.broken[op]))
    # An operator of the repo's own .kernelsmith.yml carries the repo name as its branch target.
    return PublishSpec(t, op, None, DEFAULT_MIN_SPEEDUP, t.repo.split("/")[1])


def with_repo_config(spec: PublishSpec, text: str | None) -> PublishSpec:
    """Resolve an operator of the repo's `.kernelsmith.yml` (its text on the base branch)."""
    if spec.file is not None:
        return spec
    where = spec.target.path.parent / f"{spec.target.repo}:{spec.target.base}:{REPO_CONFIG}"
    if text is not None:
        merged = copy.copy(spec.target)
        merged.operators = list(spec.target.operators)
        try:
            merge_repo_operators(merged, where, parse_yaml(text, where))
        except KernelsmithError as e:
            raise PublishError(str(e)) from None
        for o in merged.operators:
            if o.name == spec.op:
                return _checked(replace(spec, file=o.file, min_speedup=o.min_speedup, test=o.test,
                                        benchmark=o.benchmark))
    raise PublishError(f"operator {spec.op!r} is neither in {spec.target.path.name} nor in the "
                       f"{REPO_CONFIG} of {spec.repo} on `{spec.target.base}`")


def _checked(spec: PublishSpec) -> PublishSpec:
    if not spec.file.endswith(".py"):
        raise PublishError(f"operator {spec.op} names {spec.file}: publishing replaces Python files only")
    return spec


@dataclass
class PullRequestDraft:
    """What the bot would put on GitHub for one run."""

    repo: str
    push_repo: str
    branch: str
    base: str
    title: str
    body: str
    diff: str
    labels: list[str]
    target: str
    op: str
    file: str
    base_sha: str
    winner_code: str
    geomean: float


@dataclass
class Outcome:
    """The result of publishing: action is opened, updated, unchanged, blocked, capped or dry-run."""

    action: str
    message: str
    target: str = ""
    op: str = ""
    pr_number: int | None = None
    pr_url: str | None = None
    head_sha: str | None = None
    source_hash: str | None = None
    details: dict = field(default_factory=dict)


def check_publishable(ev: Evidence, winner_code: str | None, min_speedup: float) -> None:
    """Raise PublishError unless the run is verified ("pass"), timed, has a winner and is fast enough."""
    where = ev.path
    if not ev.finished:
        raise PublishError(f"{where}: no result.json; the run did not finish")
    if ev.verify_status is None:
        raise PublishError(f"{where}: not verified; run `kernelsmith verify {where}` first")
    if ev.verify_status != "pass":
        raise PublishError(f"{where}: verify status is {ev.verify_status!r}, not 'pass'; "
                           "nothing is published")
    if not ev.winner or winner_code is None:
        raise PublishError(f"{where}: the run has no winner")
    check_rewrite_kernels(ev, winner_code)  # the PR body names them: each must be in the winner
    if ev.base_sha is None:
        raise PublishError(f"{where}: result.json has no base_sha")
    if ev.geomean is None or not ev.timed:
        raise PublishError(f"{where}: the run was not timed (no GPU); there is no speedup to claim")
    if ev.geomean < min_speedup:
        raise PublishError(f"{where}: geomean speedup {ev.geomean:.2f}x is below "
                           f"min_speedup {min_speedup:.2f}x")


def unified_diff(old: str, new: str, file_rel: str) -> str:
    """The change as a unified diff (a/ and b/ prefixes, as git writes it)."""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{file_rel}",
                                        f"b/{file_rel}"))


def draft(spec: PublishSpec, ev: Evidence, winner_code: str, diff: str) -> PullRequestDraft:
    """The PR for a publishable run (check_publishable first): everything but the numbers is trusted."""
    device = ev.device.get("name") if LABEL_RE.match(ev.device.get("name") or "") else "GPU"
    body = render_body(repo=spec.repo, base=spec.target.base, file=spec.file, target=spec.target.name,
                       op=spec.op, ev=ev, diff=diff, test=spec.test, benchmark=spec.benchmark,
                       max_chars=MAX_BODY)
    return PullRequestDraft(
        repo=spec.repo, push_repo=spec.target.fork or spec.repo,
        branch=f"{BRANCH_PREFIX}{spec.branch_target}/{spec.op}", base=spec.target.base,
        title=f"kernelsmith: {spec.op} {ev.geomean:.2f}x faster on {device}", body=body, diff=diff,
        labels=list(spec.target.labels), target=spec.branch_target, op=spec.op, file=spec.file,
        base_sha=ev.base_sha, winner_code=winner_code, geomean=ev.geomean,
    )


def commit_message(d: PullRequestDraft) -> str:
    """The bot commit's message."""
    return (f"kernelsmith: faster {d.op} ({d.geomean:.2f}x geomean)\n\n"
            f"Replaces {d.file} with the verified winner of a kernelsmith run on {d.base_sha[:12]}.\n")


def preview_text(d: PullRequestDraft, body: str) -> str:
    """The dry-run preview: title, where it would go, body and diff."""
    return (f"# Dry run: {d.title}\n\n"
            f"Would push `{d.branch}` to `{d.push_repo}` and open or update a PR into `{d.repo}:{d.base}`"
            f" with labels {', '.join(f'`{x}`' for x in d.labels) or 'none'}.\n\n"
            f"## Body\n\n{body}\n\n## Diff (as the run recorded it; publishing recomputes it from the base)"
            f"\n\n{fence(d.diff, 'diff')}\n")


def dry_run(spec: PublishSpec, run_dir: str | Path, summary: str | None) -> Outcome:
    """Write the would-be PR to RUN_DIR/pr-preview.md and the step summary; no network at all.

    Without network the base file cannot be read: the diff shown is the run's own winner.diff
    (plain file, bounded, fenced), and an operator only in `.kernelsmith.yml` cannot be previewed."""
    run_dir = Path(run_dir)
    if spec.file is None:
        raise PublishError(f"operator {spec.op!r} is not in {spec.target.path.name}; a dry run cannot read "
                           f"the {REPO_CONFIG} of {spec.repo} (it makes no request)")
    ev = load_evidence(run_dir)
    winner = read_winner(run_dir, spec.file)
    check_publishable(ev, winner, spec.min_speedup)
    raw = read_plain(run_dir, "winner/winner.diff", MAX_JSON_BYTES) or b""
    d = draft(spec, ev, winner, raw.decode("utf-8", "replace"))
    text = preview_text(d, with_marker(d.body, marker(d.target, d.op, None, d.base_sha)))
    _write_new(run_dir / PREVIEW, text)
    write_summary(summary, text)
    return Outcome("dry-run", f"dry run: wrote {run_dir / PREVIEW}", d.target, d.op)


def _write_new(path: Path, text: str) -> None:
    """Write a fresh file: whatever the run directory had at that name (a planted symlink) goes first."""
    if path.is_symlink() or path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
