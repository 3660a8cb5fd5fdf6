"""`kernelsmith-bot publish RUN_DIR`: open or update the one pull request of a verified run.

Only a run whose verify status is "pass" and whose geomean speedup meets the operator's
`min_speedup` is published. The branch is `kernelsmith/<target>/<op>` on the target repo (or its
`fork`) with one bot-authored commit holding the winner; the PR body is the run's report.md plus a
hidden marker; a later run updates the same PR in place. `--dry-run` writes the PR it would open
to the run directory and the step summary and makes no request at all.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.config import DEFAULT_MIN_SPEEDUP, Target, load_target, resolve_target
from kernelsmith.errors import ConfigError, KernelsmithError

BRANCH_PREFIX = "kernelsmith/"
MARKER_RE = re.compile(r"<!-- kernelsmith:pr (\{.*?\}) -->")
MAX_BODY = 60000  # GitHub refuses bodies over 65536 characters
PREVIEW = "pr-preview.md"


class PublishError(KernelsmithError):
    """The run cannot be published (not verified, too slow, missing files)."""


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


def find_target(rd, targets: str | None = None) -> Target:
    """The run's target yaml: result.json/run.json `target` if that file exists, else by its name."""
    recorded = (rd.result or {}).get("target") or rd.run.get("target")
    if not recorded:
        raise ConfigError(Path(rd.path) / "run.json", "missing required field", "target")
    if Path(recorded).is_file():
        return load_target(recorded)
    # A run made on another machine: its absolute path is elsewhere; its stem names the target here.
    return load_target(resolve_target(Path(recorded).stem, targets))


def operator_settings(target: Target, op: str) -> tuple[str, float]:
    """(branch target name, min_speedup): an op only in the repo's `.kernelsmith.yml` uses the repo name."""
    for o in target.operators:
        if o.name == op:
            return target.name, o.min_speedup
    return target.repo.split("/")[1], DEFAULT_MIN_SPEEDUP


def check_publishable(rd, min_speedup: float) -> None:
    """Raise PublishError unless the run is verified ("pass") and fast enough."""
    where = Path(rd.path)
    if rd.result is None:
        raise PublishError(f"{where}: no result.json; the run did not finish")
    if rd.verify is None:
        raise PublishError(f"{where}: not verified; run `kernelsmith verify {where}` first")
    status = rd.verify.get("status")
    if status != "pass":
        raise PublishError(f"{where}: verify status is {status!r}, not 'pass'; nothing is published")
    if not rd.result.get("winner") or rd.winner_code is None:
        raise PublishError(f"{where}: the run has no winner")
    geomean = rd.result.get("geomean_speedup")
    if geomean is None or not rd.result.get("timed", True):
        raise PublishError(f"{where}: the run was not timed (no GPU); there is no speedup to claim")
    if geomean < min_speedup:
        raise PublishError(f"{where}: geomean speedup {geomean:.2f}x is below min_speedup {min_speedup:.2f}x")


def marker(target: str, op: str, source_hash: str | None, base_sha: str) -> str:
    """The hidden line that identifies the operator (and its source) in a bot PR body."""
    data = {"target": target, "op": op, "source_hash": source_hash, "base_sha": base_sha}
    return f"<!-- kernelsmith:pr {json.dumps(data, sort_keys=True)} -->"


def read_marker(body: str | None) -> dict | None:
    """The data of a bot PR's hidden marker, or None."""
    m = MARKER_RE.search(body or "")
    if not m:
        return None
    try:
        data = json.loads(m.group(1))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def draft(rd, targets: str | None = None) -> PullRequestDraft:
    """Build the PR for a publishable run (raises PublishError when it is not publishable)."""
    target = find_target(rd, targets)
    op = rd.run.get("op") or rd.result.get("op")
    branch_target, min_speedup = operator_settings(target, op)
    check_publishable(rd, min_speedup)
    result = rd.result
    winner = result["winner"]
    device = (result.get("device") or {}).get("name") or "GPU"
    geomean = float(result["geomean_speedup"])
    report = Path(rd.path) / "report.md"
    body = report.read_text() if report.is_file() else _fallback_body(result, op)
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY] + "\n\n… (report truncated; the full report is in the run's artifact)\n"
    return PullRequestDraft(
        repo=target.repo, push_repo=target.fork or target.repo,
        branch=f"{BRANCH_PREFIX}{branch_target}/{op}", base=target.base,
        title=f"kernelsmith: {op} {geomean:.2f}x faster on {device}",
        body=body, diff=winner.get("diff") or "", labels=list(target.labels), target=branch_target, op=op,
        file=winner.get("file") or rd.run["file"], base_sha=result.get("base_sha") or rd.run["base_sha"],
        winner_code=rd.winner_code, geomean=geomean,
    )


def _fallback_body(result: dict, op: str) -> str:
    rows = "\n".join(f"| {json.dumps(s.get('shape'))} | {s.get('speedup', 0):.2f}x |"
                     for s in result["shapes"])
    return f"## kernelsmith: faster `{op}`\n\n| shape | speedup |\n|---|---:|\n{rows}\n"


def commit_message(d: PullRequestDraft) -> str:
    """The bot commit's message."""
    return (f"kernelsmith: faster {d.op} ({d.geomean:.2f}x geomean)\n\n"
            f"Replaces {d.file} with the verified winner of a kernelsmith run on {d.base_sha[:12]}.\n")


def preview_text(d: PullRequestDraft, body: str) -> str:
    """The dry-run preview: title, where it would go, body and diff."""
    return (f"# Dry run: {d.title}\n\n"
            f"Would push `{d.branch}` to `{d.push_repo}` and open or update a PR into `{d.repo}:{d.base}`"
            f" with labels {', '.join(f'`{x}`' for x in d.labels) or 'none'}.\n\n"
            f"## Body\n\n{body}\n\n## Diff\n\n```diff\n{d.diff}\n```\n")


def write_summary(path: str | None, text: str) -> None:
    """Append markdown to $GITHUB_STEP_SUMMARY when Actions provides one."""
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text.rstrip() + "\n\n")


def dry_run(rd, targets: str | None, summary: str | None) -> Outcome:
    """Write the would-be PR to RUN_DIR/pr-preview.md and the step summary; no network at all."""
    d = draft(rd, targets)
    src = _local_source_hash(rd)
    body = d.body.rstrip() + "\n\n" + marker(d.target, d.op, src, d.base_sha) + "\n"
    text = preview_text(d, body)
    (Path(rd.path) / PREVIEW).write_text(text)
    write_summary(summary, text)
    return Outcome("dry-run", f"dry run: wrote {Path(rd.path) / PREVIEW}", d.target, d.op, source_hash=src)


def _local_source_hash(rd) -> str | None:
    from kernelsmith.state import source_hash

    base = Path(rd.run.get("checkout") or "/nonexistent") / rd.run.get("file", "")
    return source_hash(base.read_bytes()) if base.is_file() else None
