"""`/kernelsmith ...` comment commands: parsed from the first line only, validated strictly.

The comment is untrusted text. Only its first line is read, split on whitespace (no shell or quote
processing), and every word must be a known command, a known flag with a number in range, or an
operator name of the allowed characters. Everything else in the comment is ignored: it never
reaches a shell, a subprocess argument, the LLM or a log line beyond the reply quoting the command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "/kernelsmith"
MAX_BUDGET = 2000
MAX_MINUTES = 360.0
_OP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")

HELP = f"""\
**kernelsmith** commands (first line of a comment; needs write, maintain or admin permission):

| command | does |
|---|---|
| `/kernelsmith optimize <op> [--budget N] [--minutes M]` | search for a faster `<op>` \
(N proposals, at most {MAX_BUDGET}; M minutes, at most {MAX_MINUTES:g}), verify it, open or update its PR |
| `/kernelsmith rebase` | on a kernelsmith PR: re-apply its winner to the current base, re-measure \
and verify it, and update the PR (or say that it no longer applies) |
| `/kernelsmith ignore <op>` | stop scheduled runs for `<op>` (`optimize` still works on request) |
| `/kernelsmith help` | this message |
"""


class CommandError(ValueError):
    """A comment addressed to the bot that is not a valid command; the message is the reply."""


@dataclass(frozen=True)
class Command:
    """A parsed command: name is optimize, rebase, ignore or help."""

    name: str
    op: str | None = None
    budget: int | None = None
    minutes: float | None = None

    def describe(self) -> str:
        """The command as the bot understood it (safe to quote back: built from validated parts)."""
        parts = [PREFIX, self.name] + ([self.op] if self.op else [])
        if self.budget is not None:
            parts += ["--budget", str(self.budget)]
        if self.minutes is not None:
            parts += ["--minutes", f"{self.minutes:g}"]
        return " ".join(parts)


def is_addressed(body: str | None) -> bool:
    """True when the comment's first non-empty line starts with `/kernelsmith`."""
    words = _first_line(body).split()
    return bool(words) and words[0].lower() == PREFIX


def _first_line(body: str | None) -> str:
    for line in (body or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _number(flag: str, value: str | None, kind, low, high):
    if value is None:
        raise CommandError(f"`{flag}` needs a number.")
    try:
        number = kind(value)
    except ValueError:
        raise CommandError(f"`{flag}` needs a number between {low:g} and {high:g}.") from None
    if not (low <= number <= high):
        raise CommandError(f"`{flag}` must be between {low:g} and {high:g}.")
    return number


def parse_command(body: str | None) -> Command | None:
    """The command in a comment, None when it is not addressed to the bot; CommandError when invalid."""
    if not is_addressed(body):
        return None
    words = _first_line(body).split()[1:]
    if not words:
        return Command("help")
    name, rest = words[0].lower(), words[1:]
    if name == "help":
        return Command("help")
    if name == "rebase":
        if rest:
            raise CommandError("`rebase` takes no arguments; comment it on a kernelsmith pull request.")
        return Command("rebase")
    if name in ("optimize", "ignore"):
        if not rest or rest[0].startswith("--"):
            raise CommandError(f"`{name}` needs an operator name: `{PREFIX} {name} <op>`.")
        op = rest[0]
        if not _OP_RE.match(op):
            raise CommandError("That is not an operator name (letters, digits, `_`, `.`, `-`).")
        if name == "ignore":
            if len(rest) > 1:
                raise CommandError("`ignore` takes one operator name and nothing else.")
            return Command("ignore", op)
        budget = minutes = None
        args = rest[1:]
        i = 0
        while i < len(args):
            flag = args[i].lower()
            value = args[i + 1] if i + 1 < len(args) else None
            if flag == "--budget":
                budget = _number(flag, value, int, 1, MAX_BUDGET)
            elif flag == "--minutes":
                minutes = _number(flag, value, float, 1.0, MAX_MINUTES)
            else:
                raise CommandError("`optimize` takes only `--budget N` and `--minutes M` after the operator.")
            i += 2
        return Command("optimize", op, budget, minutes)
    raise CommandError("Unknown command.")


@dataclass(frozen=True)
class Invalid:
    """A comment addressed to the bot that is not a valid command; `message` is the reply."""

    message: str


def read_command(body: str | None) -> Command | Invalid | None:
    """What a comment asks: a Command, Invalid (addressed to the bot, but not valid), or None
    when it is not addressed to the bot at all. Never raises."""
    try:
        return parse_command(body)
    except CommandError as e:
        return Invalid(str(e))


def addresses_bot(body: str | None) -> bool:
    """Whether a comment is a `/kernelsmith` command at all, valid or not."""
    return read_command(body) is not None
