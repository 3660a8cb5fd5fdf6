"""Untrusted text made inert in markdown, for report.md and the bot's PR body alike."""

from __future__ import annotations

import re

ZWJ = "\u200d"


def safe_text(text: str, limit: int = 200) -> str:
    """One line of untrusted text made inert in markdown: HTML escaped, mentions, issue references
    and autolinks broken with a zero-width joiner, link and emphasis characters backslash-escaped,
    shortened to `limit` characters."""
    text = " ".join(str(text).split())[:limit]
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"@(?=[A-Za-z0-9_-])", "@" + ZWJ, text)
    text = re.sub(r"#(?=\d)", "#" + ZWJ, text)
    text = re.sub(r"(?i)\b(GH)-(?=\d)", r"\1" + ZWJ + "-", text)
    text = re.sub(r"://", ":" + ZWJ + "//", text)          # no autolinks
    text = re.sub(r"(?i)\bwww\.", lambda m: m.group(0)[:3] + ZWJ + ".", text)
    text = re.sub(r"([\\\[\]()*_~|!])", r"\\\1", text)      # no links, images or emphasis
    return text.replace("`", "'")
