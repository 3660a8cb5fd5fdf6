"""Near-duplicate removal: normalized code identity, then edit similarity under the same parent."""

from __future__ import annotations

import difflib
import hashlib
import io
import tokenize

DEFAULT_SIMILARITY = 0.95


def normalize_code(code: str) -> str:
    """Code with comments, blank lines and layout removed (tokens joined by single spaces)."""
    try:
        toks = tokenize.generate_tokens(io.StringIO(code).readline)
        parts = [t.string for t in toks if t.type not in (
            tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER)]
        return " ".join(parts)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(code.split())


def code_key(code: str) -> str:
    """A hash of the normalized code."""
    return hashlib.sha256(normalize_code(code).encode()).hexdigest()[:16]


class NearDuplicates:
    """Remembers kept samples; `seen` says whether a new one repeats or nearly repeats one of them."""

    def __init__(self, similarity: float = DEFAULT_SIMILARITY):
        self.similarity = similarity
        self._pairs: set[tuple[str, str]] = set()
        self._edits: dict[str, list[str]] = {}

    def seen(self, parent_code: str, child_code: str, edit: str) -> str | None:
        """None for a new sample (and remember it); else "duplicate" or "near_duplicate"."""
        pkey, ckey = code_key(parent_code), code_key(child_code)
        if (pkey, ckey) in self._pairs:
            return "duplicate"
        norm_edit = normalize_code(edit)
        for other in self._edits.get(pkey, []):
            m = difflib.SequenceMatcher(None, norm_edit, other, autojunk=False)
            if m.real_quick_ratio() >= self.similarity and m.quick_ratio() >= self.similarity \
                    and m.ratio() >= self.similarity:
                return "near_duplicate"
        self._pairs.add((pkey, ckey))
        self._edits.setdefault(pkey, []).append(norm_edit)
        return None
