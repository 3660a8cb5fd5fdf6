"""The user docs stay readable: a README under 150 lines, no table row over 200 characters, a short
results page, relative links that resolve, scripts/ holding the user's scripts only, and no word of
the project's work sessions in the product or its docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
USER_SCRIPTS = {"demo.sh", "test.sh", "setup.sh", "release_checkouts.sh"}
SESSION = re.compile(r"\bsessions? [0-9]", re.IGNORECASE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readme_is_under_150_lines():
    assert len(_lines(ROOT / "README.md")) < 150


def test_the_results_page_is_under_200_lines():
    assert len(_lines(ROOT / "docs" / "results.md")) < 200


def test_no_table_row_in_the_readme_or_docs_is_over_200_characters():
    long = [f"{path.relative_to(ROOT)}:{n} ({len(line)} characters)"
            for path in USER_DOCS for n, line in enumerate(_lines(path), 1)
            if line.lstrip().startswith("|") and len(line) > 200]
    assert not long, long


def test_relative_links_in_the_readme_and_docs_resolve():
    broken = []
    for path in USER_DOCS:
        for n, line in enumerate(_lines(path), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):
                    continue  # https:, mailto:
                file, _, anchor = target.partition("#")
                dest = (path.parent / file).resolve() if file else path
                if not dest.is_file():
                    broken.append(f"{path.relative_to(ROOT)}:{n}: {target}")
                elif anchor and dest.suffix == ".md":
                    headings = {_slug(h.lstrip("#")) for h in _lines(dest) if h.startswith("#")}
                    if anchor not in headings:
                        broken.append(f"{path.relative_to(ROOT)}:{n}: {target} (no such heading)")
    assert not broken, broken


def test_the_readmes_two_commands_are_the_user_scripts():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert {p.name for p in (ROOT / "scripts").iterdir()} == USER_SCRIPTS


def test_no_session_numbers_in_the_product_or_its_docs():
    text = {".py", ".md", ".txt", ".yml", ".yaml"}
    files = [p for top in ("kernelsmith", "bot") for p in (ROOT / top).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.suffix in text]
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in [*files, *USER_DOCS]
            for n, line in enumerate(_lines(path), 1) if SESSION.search(line)]
    assert not hits, "\n".join(hits)
