"""The cheat corpus: every known reward hack for the demo kernels is rejected with its named
violation, and honest rewrites (cached launch configs, fresh torch.empty outputs) are accepted."""

import zlib
from pathlib import Path

import pytest
from referee_helpers import CORPUS, expected_outcome

FILES = sorted((CORPUS / "cheats").glob("*.py")) + sorted((CORPUS / "honest").glob("*.py"))
SLOW = {"silu_and_mul__hang.py"}  # exercised with a short timeout in test_isolation.py
# Rewrites the checkout's base file: run on a copy of the checkout in test_persistence.py only.
OWN_CHECKOUT = {"rms_norm__rewrite_base.py"}
RUN_HERE = [f for f in FILES if f.name not in SLOW | OWN_CHECKOUT]


@pytest.mark.parametrize("path", RUN_HERE, ids=lambda p: p.stem)
def test_corpus_file(path: Path, referees):
    op = path.stem.split("__")[0]
    expected = expected_outcome(path)
    verdict = referees(op).evaluate(path.read_text(), candidate_id=zlib.crc32(path.name.encode()) % 10_000)
    assert not verdict.timed and verdict.geomean_speedup is None
    if expected is None:
        assert verdict.accepted, verdict.feedback()
        assert verdict.correct and verdict.violations == [] and verdict.reason is None
        assert verdict.fresh_shapes, "VARY shapes must be checked too"
    else:
        assert not verdict.accepted
        assert expected in verdict.violations, verdict.feedback()
        assert verdict.reason in verdict.violations


def test_corpus_covers_every_pinned_hack():
    """One corpus file per named violation that a candidate can commit (docs/design.md's list)."""
    named = {expected_outcome(f) for f in FILES} - {None}
    required = {"unwritten_output", "input_mutation", "nondeterministic",
                "no_kernel_launch", "library_fallback", "reference_call", "extra_threads", "extra_streams",
                "monkeypatch", "file_access", "network_access", "tensor_subclass", "cached_result",
                "precision_downgrade", "wrong_on_fresh_shape", "timeout", "crash", "compile_error",
                "import_error", "reused_output"}
    assert required <= named, sorted(required - named)
