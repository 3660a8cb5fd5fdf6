"""A search and its reports, as `optimize` and `sweep` run them: the search writes winner/ and
result.json, then report.md, speedup.png and benchmark.json are rendered from the run directory."""

from __future__ import annotations

from kernelsmith.report import write_reports
from kernelsmith.search.loop import optimize as search
from kernelsmith.search.run_config import SearchConfig, SearchHooks


def optimize(config: SearchConfig, hooks: SearchHooks = SearchHooks()) -> dict:
    """Run or resume a search and render its reports; returns result.json's content."""
    result = search(config, hooks)
    write_reports(result)
    return result.data
