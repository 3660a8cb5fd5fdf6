"""The search loop with the model referee (timed path without a GPU): staging, winner, run dir, seeds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import model_referee
import pytest
import torch
from stub_compiler import StubCompiler

from kernelsmith.cli import main
from kernelsmith.commands.run import optimize
from kernelsmith.errors import ConfigError
from kernelsmith.search.archive import Archive, NewRow
from kernelsmith.search.efficiency import compare
from kernelsmith.search.run_config import SearchConfig, SearchHooks
from kernelsmith.search.seeds import FINAL_SEED_OFFSET

ROOT = Path(__file__).resolve().parents[2]
RESULT_KEYS = {
    "target",
    "op",
    "repo",
    "base_sha",
    "device",
    "proposals",
    "evaluations",
    "accepted",
    "rejected",
    "wall_s",
    "winner",
    "shapes",
    "geomean_speedup",
    "timed",
}
RUN_KEYS = {
    "target",
    "op",
    "repo",
    "file",
    "checkout",
    "base_sha",
    "seed",
    "budget",
    "minutes",
    "mutator",
    "device",
    "gpus",
    "argv",
    "versions",
    "created_at",
}


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch says one CUDA device exists; the referee is the model (nothing runs on a GPU)."""
    import kernelsmith.referee.backend as backend

    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    model_referee.CALLS.clear()


STAND_IN = SearchHooks(referee_factory=model_referee.ModelReferee, precompile=False,
                       argv=["kernelsmith", "optimize"])


def _run(tmp_path, name="run", referee_factory=model_referee.ModelReferee, batch=None, **kw):
    """A search of the demo's silu_and_mul judged by `referee_factory` (the model referee), then its
    reports; `kw`: SearchConfig fields."""
    cfg = dict(
        target="demo",
        op="silu_and_mul",
        out=str(tmp_path / name),
        budget=12,
        mutator="params",
        device="cuda",
        gpus=[0],
        progress=False,
        targets=str(ROOT / "targets"),
    )
    cfg.update(kw)
    hooks = dataclasses.replace(STAND_IN, referee_factory=referee_factory, batch=batch)
    return optimize(SearchConfig(**cfg), hooks)


def test_timed_run_directory(tmp_path, fake_gpu):
    result = _run(tmp_path)
    run_dir = tmp_path / "run"
    assert RESULT_KEYS <= set(result) and result["timed"] and result["proposals"] == 12
    assert RUN_KEYS <= set(json.loads((run_dir / "run.json").read_text()))
    assert result["winner"] and result["geomean_speedup"] > 1.5
    # Where the invocation's time went: before wall_s's clock, the search, the re-measurement.
    timeline = result["timeline"]
    assert set(timeline) == {"setup_s", "search_s", "final_s"} and min(timeline.values()) >= 0
    assert timeline["search_s"] + timeline["final_s"] <= result["wall_s"] + 0.1
    # Staged timing: a screen for every candidate, the full measurement only for contenders.
    calls = model_referee.CALLS
    screens = {c["cid"] for c in calls if c["timing"] == "screen"}
    fulls = [c for c in calls if c["timing"] == "full" and c["seed"] == 0 and c["cid"] != 1]
    assert screens == set(range(2, 14)) and 0 < len(fulls) < len(screens)
    # The winner is re-measured with new seeds and those numbers are the ones reported.
    final = [c for c in calls if c["seed"] == FINAL_SEED_OFFSET]
    assert result["winner"]["id"] in {c["cid"] for c in final}
    with Archive(run_dir / "archive.sqlite") as a:
        rows = a.all()
    assert all(r["status"] != "pending" for r in rows) and rows[0]["mutator"] == "base"
    assert all(r["response"].startswith("<<<<<<< SEARCH") for r in rows[1:] if r["status"] != "duplicate")
    win = (run_dir / "winner" / "silu_and_mul.py").read_text()
    assert win == next(r["code"] for r in rows if r["id"] == result["winner"]["id"])
    assert (run_dir / "winner" / "winner.diff").read_text() == result["winner"]["diff"]
    report = (run_dir / "report.md").read_text()
    sha = result["source_sha256"]
    assert report.startswith(f"<!-- kernelsmith:op=demo/silu_and_mul source={sha} run=run -->")
    assert "| shape | base ms | winner ms | speedup | 95% CI | % roofline |" in report
    first = result["shapes"][0]
    assert f"| {first['speedup']:.2f}x |" in report and "```mermaid" in report and "model GPU" in report
    assert "kernelsmith optimize" in report and "No timing was done" not in report
    bench = json.loads((run_dir / "benchmark.json").read_text())
    assert {"machine_info", "commit_info", "benchmarks", "datetime", "version"} <= set(bench)
    assert len(bench["benchmarks"]) == 2 * len(result["shapes"])
    st = bench["benchmarks"][0]["stats"]
    assert st["rounds"] == 3 and st["min"] <= st["median"] <= st["max"]
    assert (run_dir / "speedup.png").read_bytes()[:4] == b"\x89PNG"
    (run_dir / "report.md").unlink()
    assert main(["report", str(run_dir)]) == 0 and (run_dir / "report.md").read_text() == report


def test_seed_fixes_the_proposal_sequence(tmp_path, fake_gpu):
    def codes(name, seed):
        _run(tmp_path, name, budget=10, seed=seed)
        with Archive(tmp_path / name / "archive.sqlite") as a:
            return [r["code"] for r in a.all()]

    assert codes("a", 3) == codes("b", 3)
    assert codes("a2", 3) != codes("c", 4)


class _SlowModelReferee(model_referee.ModelReferee):
    """The model referee taking real time, a different amount per GPU and candidate."""

    def evaluate(self, code, *, candidate_id=0, timing="full", seed=None, fresh_compile=False,
                 contender_at=None, contender_shapes=None, promote_at=None, rendered=False):
        import random
        import time

        start = time.monotonic()
        # Longer than a generation's proposals (the params mutator fits its sampler: ~10-20 ms, more
        # on a loaded machine), as a GPU evaluation (seconds) always is.
        time.sleep(random.Random(f"{self.gpu}/{candidate_id}/{timing}").uniform(0.05, 0.2))
        v = super().evaluate(code, candidate_id=candidate_id, timing=timing, seed=seed,
                             fresh_compile=fresh_compile, contender_at=contender_at,
                             contender_shapes=contender_shapes, promote_at=promote_at)
        model_referee.CALLS[-1].update(start=start, end=time.monotonic())
        return v


def test_two_gpus_pipelined_and_reproducible(tmp_path, fake_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)

    def run(name):
        model_referee.CALLS.clear()
        result = _run(tmp_path, name, budget=16, gpus=[0, 1], referee_factory=_SlowModelReferee)
        per_gpu = result["evaluator"]
        assert [g["gpu"] for g in per_gpu] == [0, 1] and sum(g["jobs"] for g in per_gpu) == 17
        assert all(0 < g["busy"] <= 1.0 for g in per_gpu)
        # Each GPU's first verdict on a candidate (not the base): after its start, before the run's end.
        assert all(0 < g["first_candidate_s"] <= result["wall_s"] for g in per_gpu)
        with Archive(tmp_path / name / "archive.sqlite") as a:
            return a.all(), list(model_referee.CALLS)

    rows_a, calls = run("a")
    rows_b, _ = run("b")
    # Verdicts arrive in a different order on each run; the proposals do not change.
    assert [r["code"] for r in rows_a] == [r["code"] for r in rows_b]
    evals = [c for c in calls if "start" in c and not c["fresh_compile"]]
    assert {c["gpu"] for c in evals} == {0, 1}
    # Generation g+1 starts evaluating before generation g has finished (no barrier between them).
    gen = {r["id"]: r["generation"] for r in rows_a}
    by_gen: dict[int, list[dict]] = {}
    for c in evals:
        if gen.get(c["cid"]):
            by_gen.setdefault(gen[c["cid"]], []).append(c)
    overlaps = [g for g in by_gen if g + 1 in by_gen
                and min(c["start"] for c in by_gen[g + 1]) < max(c["end"] for c in by_gen[g])]
    assert overlaps
    # The winner's final re-measurement compiles it afresh.
    assert any(c["fresh_compile"] for c in calls)


class _FeedbackOnlyMutator:
    """Proposes only from a verdict it can see: one child of the newest evaluated candidate."""

    name = "params"

    def __init__(self, task):
        self.task, self.used, self.visible = task, set(), []

    def sync(self, rows):
        self.visible = [r for r in rows if r["status"] == "evaluated" and r["accepted"]]

    def propose(self, parent, inspirations, rng, known=None):
        from kernelsmith.search.mutators import Proposal

        if not self.visible:  # generation 1, proposed while the base is judged
            return None
        newest = max(self.visible, key=lambda r: r["id"])
        if newest["id"] in self.used:
            return None
        self.used.add(newest["id"])
        block = 64 * 2 ** len(self.used)
        code = self.task.base_code.replace("BLOCK = 64", f"BLOCK = {block}")
        return Proposal(mutator="params", parent_id=newest["id"], code=code,
                        params={"values": {"BLOCK": block}})


def test_nothing_to_propose_waits_for_the_verdicts_in_flight(tmp_path, fake_gpu, monkeypatch):
    """With two generations in flight, a generation may see no new verdict and propose nothing;
    the search then waits for the verdicts in flight instead of calling the space exhausted."""
    import kernelsmith.search.loop as loop

    monkeypatch.setattr(loop, "build_mutators", lambda name, task, *a, **k: [_FeedbackOnlyMutator(task)])
    result = _run(tmp_path, budget=4)
    assert result["proposals"] == 4, result["stop_reason"]
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = [r for r in a.all() if r["mutator"] != "base"]
    assert [r["parent_id"] for r in rows] == [1] + [r["id"] for r in rows[:-1]]  # a chain


class _LastLookMutator:
    """Proposes three configs, then one more only once it sees all three verdicts (the way a
    per-shape table is proposed from every config's per-shape speedups)."""

    name = "params"

    def __init__(self, task):
        self.task, self.blocks, self.visible, self.final = task, [128, 256, 512], set(), False

    def sync(self, rows):
        self.visible = {r["params"]["values"]["BLOCK"] for r in rows
                        if r["mutator"] == "params" and r["status"] == "evaluated"}

    def propose(self, parent, inspirations, rng, known=None):
        from kernelsmith.search.mutators import Proposal

        if self.blocks:
            block = self.blocks.pop(0)
        elif self.visible >= {128, 256, 512} and not self.final:
            self.final, block = True, 1024
        else:
            return None
        code = self.task.base_code.replace("BLOCK = 64", f"BLOCK = {block}")
        return Proposal(mutator="params", parent_id=parent["id"], code=code,
                        params={"values": {"BLOCK": block}})


def test_the_last_try_before_exhausted_sees_every_verdict_with_the_window_not_full(
        tmp_path, fake_gpu, monkeypatch):
    """Three configs in two generations, a window of six: the generations that come up empty while
    they are judged must not leave the last try blind to their verdicts, or the proposal that needs
    them all (a per-shape table, say) is never made and the space is called exhausted early."""
    import kernelsmith.search.loop as loop

    monkeypatch.setattr(loop, "build_mutators", lambda name, task, *a, **k: [_LastLookMutator(task)])
    result = _run(tmp_path, budget=None, minutes=1, stagnation=100, pipeline=6, batch=2)
    assert result["stop_reason"].startswith("search space exhausted")
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        blocks = [r["params"]["values"]["BLOCK"] for r in a.all() if r["mutator"] == "params"]
    assert blocks == [128, 256, 512, 1024]


class _HalfSightedMutator(_LastLookMutator):
    """_LastLookMutator whose space left a launch value unfollowed (the params mutator's `unfollowed`)."""

    unfollowed = ["_k launched in f, num_warps: pick() cannot be followed: pkg.gone: not a module of the "
                  "repository"]


def test_an_exhausted_space_says_what_could_not_be_followed(tmp_path, fake_gpu, monkeypatch):
    import kernelsmith.search.loop as loop

    monkeypatch.setattr(loop, "build_mutators", lambda name, task, *a, **k: [_HalfSightedMutator(task)])
    result = _run(tmp_path, budget=None, minutes=1, stagnation=100, pipeline=6, batch=2)
    assert result["stop_reason"] == (
        "search space exhausted: no new proposal could be made; not followed: _k launched in f, "
        "num_warps: pick() cannot be followed: pkg.gone: not a module of the repository")


def test_closing_mid_evaluation_records_nothing_for_it(tmp_path, fake_gpu):
    """An interrupted run (close() while a GPU is busy) leaves that candidate pending for a resume,
    never with the verdict of a killed worker."""
    import threading
    import time

    from kernelsmith.onboard.task import load_task
    from kernelsmith.search.evaluator import Evaluator

    started = threading.Event()

    class Hanging(model_referee.ModelReferee):
        def evaluate(self, code, **kw):
            started.set()
            time.sleep(0.5)
            return super().evaluate(code, **kw)

    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    with Archive(tmp_path / "a.sqlite") as archive:
        cid = archive.add(NewRow(task.base_code.replace("BLOCK = 64", "BLOCK = 128"), mutator="params"))
        ev = Evaluator(task, archive, device="cuda", gpus=[0], seed=0, referee_factory=Hanging)
        ev.submit([archive.get(cid)])
        assert started.wait(5)
        ev.close()
        time.sleep(0.8)
        assert archive.get(cid)["status"] == "pending"





def _recording_referee(evaluated: list):
    """The model referee, noting each candidate id it evaluates in `evaluated`."""

    class Recording(model_referee.ModelReferee):
        def evaluate(self, code, **kw):
            evaluated.append(kw.get("candidate_id"))
            return super().evaluate(code, **kw)

    return Recording

def test_a_compile_that_outlasts_the_time_budget_leaves_its_candidate_pending(tmp_path, fake_gpu):
    """The wait for a candidate's CPU compile ends at the run's deadline: the candidate is neither
    evaluated (compiled on the GPU worker past the budget) nor given a verdict; a resume runs it."""
    import threading
    import time

    from kernelsmith.onboard.task import load_task
    from kernelsmith.search.evaluator import Evaluator

    class SlowCompiler(StubCompiler):
        """A precompiler whose every job would take a minute (a huge block on one warp)."""

        waits: list[float] = []

        def wait(self, cid, timeout, limit=None):
            self.waits.append(timeout)
            threading.Event().wait(min(timeout, 60.0))

    evaluated = []
    Referee = _recording_referee(evaluated)
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    with Archive(tmp_path / "a.sqlite") as archive:
        cid = archive.add(NewRow(task.base_code.replace("BLOCK = 64", "BLOCK = 128"), mutator="params"))
        pc = SlowCompiler()
        ev = Evaluator(task, archive, device="cuda", gpus=[0], seed=0, referee_factory=Referee,
                       precompiler=pc)
        ev.deadline = time.time() + 1.0
        t0 = time.monotonic()
        ev.wait(ev.submit([archive.get(cid)]))
        waited = time.monotonic() - t0
        ev.close()
        assert archive.get(cid)["status"] == "pending"
    assert pc.waits and pc.waits[0] <= 1.0 and waited < 10
    assert ev.evaluated == 0 and ev.stats[0]["jobs"] == 0 and ev.stats[0]["compile_wait_s"] > 0.5
    assert evaluated == []


def test_a_candidate_over_the_compile_limit_is_a_timeout_verdict(tmp_path, fake_gpu):
    """A candidate whose CPU compile runs past --compile-limit is rejected as a timeout without
    reaching a GPU, and the params mutator draws no domain edge from it."""
    from kernelsmith.onboard.task import load_task
    from kernelsmith.search.evaluator import Evaluator
    from kernelsmith.search.mutators.params import ParamsMutator

    class OverLimit(StubCompiler):
        def wait(self, cid, timeout, limit=None):
            assert limit == 20.0
            return 21.5

    evaluated = []
    Referee = _recording_referee(evaluated)
    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    with Archive(tmp_path / "a.sqlite") as archive:
        base = archive.add(NewRow(task.base_code, mutator="base"))
        code = task.base_code.replace("BLOCK = 64", "BLOCK = 8192")
        cid = archive.add(NewRow(code, mutator="params", parent_id=base,
                          params={"values": {}, "changed": {"silu_and_mul:BLOCK": [64, 8192]}}))
        ev = Evaluator(task, archive, device="cuda", gpus=[0], seed=0, referee_factory=Referee,
                       precompiler=OverLimit(), compile_limit=20.0)
        ev.wait(ev.submit([archive.get(cid)]))
        ev.close()
        row = archive.get(cid)
        rows = archive.all()
    assert evaluated == [] and row["status"] == "evaluated" and not row["accepted"]
    assert row["verdict"]["reason"] == "timeout" and "--compile-limit" in row["verdict"]["error"]
    assert row["verdict"]["details"] == {"compile_limit_s": 20.0, "compile_s": 21.5}
    assert not row["eval_s"]  # no GPU time spent
    mutator = ParamsMutator(task, device="cuda")
    mutator.sync(rows)
    assert mutator.hi == {} and mutator.lo == {}
    del rows[-1]["verdict"]["details"]["compile_limit_s"]  # a timeout while running: an edge
    mutator.sync(rows)
    assert mutator.hi == {"silu_and_mul:BLOCK": 8192}

def test_params_beats_a_grid_sweep(tmp_path, fake_gpu):
    budget = 24
    params = _run(tmp_path, "params", budget=budget, stagnation=100)
    grid = _run(tmp_path, "grid", budget=budget, mutator="grid", stagnation=100)

    def best(name):
        with Archive(tmp_path / name / "archive.sqlite") as a:
            return max(r["speedup"] or 0 for r in a.all() if r["accepted"] and r["timing"] == "full")

    assert best("params") > 1.5 * best("grid")
    assert best("params") > 5.0  # the search reaches the best single config of the model (5.96)
    # The winner must be a measured win with no shape slower than 0.98x: the model's fast configs all
    # slow its 1-token shape (0.71-0.90x), and a table keyed on `d` (what BLOCK divides) alone cannot
    # give that shape its own row; the second level of the key (the grid's token axis, used where
    # the measured optima of one `d` disagree) can, so the winner is a table slowing no shape.
    assert params["winner"] is not None and params["geomean_ci95"][0] > 1.0
    assert params["geomean_speedup"] > 5.0
    assert all(s["speedup"] >= 0.98 or s["ci95"][1] >= 0.98 for s in params["shapes"])
    assert grid["winner"] is None or grid["geomean_speedup"] < params["geomean_speedup"]
    cmp = compare(tmp_path / "params", tmp_path / "grid")
    assert cmp["best_a_at_equal_time"] > cmp["best_b_at_equal_time"]
    assert (
        cmp["gpu_seconds_to_target_b"] is None
        or cmp["gpu_seconds_to_target_a"] < cmp["gpu_seconds_to_target_b"]
    )


def test_per_shape_table_when_shapes_disagree(tmp_path, fake_gpu):
    _run(tmp_path, budget=48, stagnation=100)  # pipelining: one generation of lag
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        tables = [r for r in a.all() if (r["params"] or {}).get("table")]
    assert tables and "_KS_CONFIGS" in tables[0]["code"]
    assert max(r["speedup"] or 0 for r in tables) > 5.96  # beyond the best single config


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--budget", "0"], "--budget"),
        (["--gpus", "x"], "--gpus"),
        (["--resume"], "--resume"),
    ],
)
def test_usage_errors_exit_2(tmp_path, argv, message, capsys):
    assert main(["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", *argv]) == 2
    assert message in capsys.readouterr().err


def test_llm_without_settings_is_a_config_error(tmp_path, monkeypatch, capsys):
    for k in (
        "KERNELSMITH_LLM_BASE_URL",
        "KERNELSMITH_LLM_MODEL",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "KERNELSMITH_LLM_CONFIG",
    ):
        monkeypatch.delenv(k, raising=False)
    rc = main(
        [
            "--targets",
            str(ROOT / "targets"),
            "optimize",
            "demo",
            "silu_and_mul",
            "--mutator",
            "llm",
            "--device",
            "interpret",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 2 and "KERNELSMITH_LLM_MODEL" in capsys.readouterr().err


def test_existing_run_needs_resume(tmp_path, fake_gpu, capsys):
    _run(tmp_path, budget=2)
    rc = main(
        [
            "--targets",
            str(ROOT / "targets"),
            "optimize",
            "demo",
            "silu_and_mul",
            "--out",
            str(tmp_path / "run"),
            "--device",
            "interpret",
        ]
    )
    assert rc == 2 and "--resume" in capsys.readouterr().err


def test_all_mutators_share_the_generations(tmp_path, fake_gpu, monkeypatch):
    from llm_server import ScriptedLLM

    from kernelsmith.search.edits import format_edit

    def answer(body):
        # Answer against the parent in the prompt: raise its BLOCK line by 2x when there is one.
        text = body["messages"][-1]["content"]
        for block in (64, 128, 256, 512, 1024, 2048):
            if f"    BLOCK = {block}\n" in text:
                return {"content": format_edit(f"    BLOCK = {block}\n", f"    BLOCK = {block * 2}\n")}
        return {"content": "no idea"}

    with ScriptedLLM([], default=answer) as srv:
        monkeypatch.setenv("KERNELSMITH_LLM_BASE_URL", srv.base_url)
        monkeypatch.setenv("KERNELSMITH_LLM_MODEL", "scripted")
        result = _run(tmp_path, budget=12, mutator="all")
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = a.all()[1:]
    # `all` includes the rewrite mutator too (issue 12): the demo's kernels get rewrite proposals.
    assert {r["mutator"] for r in rows} == {"params", "llm", "rewrite"} and len(rows) == 12
    llm = [r for r in rows if r["mutator"] == "llm"]
    assert all(r["prompt"].startswith("[system]") for r in llm) and srv.requests
    assert result["proposals"] == 12 and result["winner"]


def test_stagnation_and_minutes_stop_the_search(tmp_path, fake_gpu):
    stalled = _run(tmp_path, "stalled", budget=40, stagnation=1)
    assert stalled["stop_reason"].startswith("stagnation") and stalled["proposals"] < 40
    timed_out = _run(tmp_path, "minutes", budget=None, minutes=1e-4)
    assert timed_out["stop_reason"].startswith("time budget")


def test_identical_answers_are_duplicates_not_evaluations(tmp_path, fake_gpu, monkeypatch):
    from llm_server import ScriptedLLM

    from kernelsmith.search.edits import format_edit

    edit = {"content": format_edit("    BLOCK = 64\n", "    BLOCK = 1024\n")}
    with ScriptedLLM([], default=edit) as srv:
        monkeypatch.setenv("KERNELSMITH_LLM_BASE_URL", srv.base_url)
        monkeypatch.setenv("KERNELSMITH_LLM_MODEL", "scripted")
        result = _run(tmp_path, budget=4, mutator="llm")
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = a.all()[1:]
    firsts = [r for r in rows if r["status"] == "evaluated"]
    dups = [r for r in rows if r["status"] == "duplicate"]
    assert len(rows) == 4 and dups and all(d["duplicate_of"] == firsts[0]["id"] for d in dups)
    assert result["evaluations"] == len(firsts) and result["rejected"]["duplicate"] == len(dups)
    screened = [c["cid"] for c in model_referee.CALLS if c["timing"] == "screen"]
    assert not set(screened) & {d["id"] for d in dups}


def test_report_renders_without_archive(tmp_path):
    import shutil

    run = tmp_path / "example"
    shutil.copytree(ROOT / "tests" / "data" / "example_run", run)
    before = json.loads((run / "benchmark.json").read_text())
    assert main(["report", str(run)]) == 0
    assert not (run / "archive.sqlite").exists()
    text = (run / "report.md").read_text()
    assert text.startswith("<!-- kernelsmith:op=demo/rms_norm ") and "| shape | base ms |" in text
    after = json.loads((run / "benchmark.json").read_text())
    assert len(after["benchmarks"]) == 2 * len(json.loads((run / "result.json").read_text())["shapes"])
    assert before["benchmarks"]  # the hand-made file had entries; the re-rendered one keeps one per side


def test_live_progress_on_a_terminal():
    import io

    from kernelsmith.search.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = Progress(10, live=True, timed=True, stream=out)
    p.set_generation(2, 3)
    p.event(5, "params", "accepted, geomean speedup 1.500x", evaluated=True, accepted=True, best=1.5)
    p.close()
    text = out.getvalue()
    assert "gen 2" in text and "best 1.500x" in text and "evals/min" in text
    plain = io.StringIO()
    q = Progress(10, live=True, stream=plain)
    q.event(6, "llm", "rejected: incorrect", evaluated=True, accepted=False, best=None)
    assert plain.getvalue().startswith("[gen 0] #6 llm: rejected: incorrect | evals 1")


@pytest.mark.parametrize("simple_speed, winner", [(1.99, "simple"), (1.95, "table")])
def test_the_smallest_change_within_one_percent_of_the_fastest_wins(tmp_path, simple_speed, winner):
    """A reviewer gets the one-line change, not a size table, when the measurement cannot tell
    them apart (within 1%); beyond that the faster one wins."""
    from types import SimpleNamespace

    from kernelsmith.search.finish import changed_lines, pick_winner

    base = "def f(x):\n    n = 64\n    return x\n"
    codes = {
        "table": "T = ((1, 128), (None, 256))\n\n\n"
                 "def f(x):\n    n = T[0][1] if x else T[1][1]\n    return x\n",
        "simple": "def f(x):\n    n = 128\n    return x\n",
        "slow": "def f(x):\n    n = 32\n    return x\n",
    }
    speeds = {"table": 2.0, "simple": simple_speed, "slow": 1.5}
    with Archive(tmp_path / "a.sqlite") as archive:
        bid = archive.add(NewRow(base, mutator="base"))
        archive.set_verdict(bid, {"accepted": True, "geomean_speedup": 1.0, "timed": True,
                                  "timing": {"aa_ratio": 1.0, "noisy": False}}, "", timing="full")
        ids = {}
        for name, code in codes.items():
            ids[name] = archive.add(NewRow(code, mutator="params", parent_id=bid))
            archive.set_verdict(ids[name], {"accepted": True, "geomean_speedup": speeds[name], "timed": True,
                                            "timing": {"aa_ratio": 1.0, "noisy": False}}, "", timing="full")
        search = SimpleNamespace(archive=archive, hooks=SimpleNamespace(final_k=3), seed=0, timed=True,
                                 progress=SimpleNamespace(note=lambda *a: None),
                                 task=SimpleNamespace(base_code=base))
        # Re-measured as clear wins (the winner rule asks for the geomean's CI above 1.0).
        evaluator = SimpleNamespace(remeasure=lambda row, seed: {
            "accepted": True, "geomean_speedup": row["speedup"], "timing": {"noisy": False},
            "shapes": [{"shape": {"n": 1}, "speedup": row["speedup"], "candidate_ms": 1 / row["speedup"],
                        "ci95": [row["speedup"] * 0.99, row["speedup"] * 1.01],
                        "samples_ms": {"base": [1.0, 1.01, 0.99], "candidate": [1 / row["speedup"]] * 3}}]})
        row, _, measured = pick_winner(search, evaluator)
    assert row["id"] == ids[winner]
    assert changed_lines(base, codes["simple"]) == 2 and changed_lines(base, codes["table"]) > 2
    assert [m["chosen"] for m in measured].count(True) == 1


def test_resume_without_the_flags_keeps_the_layout(tmp_path, fake_gpu):
    """run.json records islands, exploit share and stagnation; a --resume without those flags (and
    with a larger budget, from which the defaults would be derived anew) keeps them."""
    from kernelsmith.search.loop import Search

    _run(tmp_path, budget=4, islands=3, exploit=0.4, stagnation=30)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (run["islands"], run["exploit"], run["stagnation"]) == (3, 0.4, 30)
    base = dict(target="demo", op="silu_and_mul", out=str(tmp_path / "run"), resume=True, budget=40,
                progress=False)
    search = Search(SearchConfig(**base), STAND_IN)
    try:
        assert search.population.n_islands == 3 and search.population.config.exploit == 0.4
        assert search.stagnation == 30
    finally:
        search.archive.close()
    search = Search(SearchConfig(**base, exploit=0.9, stagnation=50), STAND_IN)  # flags still change these
    try:
        assert search.population.config.exploit == 0.9 and search.stagnation == 50
    finally:
        search.archive.close()
    with pytest.raises(ConfigError, match="3 islands"):
        Search(SearchConfig(**base, islands=2), STAND_IN)
    # A new run without the flags records the defaults (islands from its budget).
    _run(tmp_path, "fresh", budget=12)
    run = json.loads((tmp_path / "fresh" / "run.json").read_text())
    assert (run["islands"], run["exploit"], run["stagnation"]) == (1, 0.7, None)


def test_search_returns_result_and_leaves_reports_to_caller(tmp_path, fake_gpu):
    from kernelsmith.report import write_reports
    from kernelsmith.search.loop import optimize as search
    from kernelsmith.search.result import SearchResult

    cfg = dict(target="demo", op="silu_and_mul", out=str(tmp_path / "run"), budget=4, mutator="params",
               device="cuda", gpus=[0], progress=False, targets=str(ROOT / "targets"))
    result = search(SearchConfig(**cfg), STAND_IN)
    run_dir = tmp_path / "run"
    assert isinstance(result, SearchResult) and result.run_dir == run_dir and result.timed
    assert json.loads((run_dir / "result.json").read_text()) == result.data
    assert result.winner == result.data["winner"]
    assert not any((run_dir / f).exists() for f in ("report.md", "speedup.png", "benchmark.json"))
    paths = write_reports(result)
    assert [p.name for p in paths] == ["report.md", "speedup.png", "benchmark.json"]
    assert all(p.is_file() for p in paths)
    assert f"run={run_dir.name} -->" in (run_dir / "report.md").read_text().splitlines()[0]


def test_a_slow_compile_does_not_hold_back_candidates_already_compiled(tmp_path, fake_gpu):
    """The GPU worker takes the oldest candidate whose compile is done: one still building (a huge
    block on one warp) is evaluated when its build ends, after the ones submitted behind it."""
    import threading

    from kernelsmith.onboard.task import load_task
    from kernelsmith.search.evaluator import Evaluator

    class OneSlowBuild(StubCompiler):
        def __init__(self, slow):
            self.slow, self.built, self.waited = slow, threading.Event(), []

        def ready(self, cid, limit=None):
            return cid != self.slow or self.built.is_set()

        def wait(self, cid, timeout, limit=None):
            self.waited.append(cid)
            return None

    evaluated = []

    class Recording(model_referee.ModelReferee):
        def evaluate(self, code, **kw):
            cid = kw.get("candidate_id")
            if cid not in evaluated:  # (the model referee re-enters evaluate for its stages)
                evaluated.append(cid)
            if cid == ids[2]:  # the last quick one is being judged: the slow build now ends
                pc.built.set()
            return super().evaluate(code, **kw)

    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    with Archive(tmp_path / "a.sqlite") as archive:
        base = archive.add(NewRow(task.base_code, mutator="base"))
        ids = [archive.add(NewRow(task.base_code.replace("BLOCK = 64", f"BLOCK = {b}"), mutator="params",
                           parent_id=base)) for b in (128, 256, 512)]
        pc = OneSlowBuild(slow=ids[0])
        ev = Evaluator(task, archive, device="cuda", gpus=[0], seed=0, referee_factory=Recording,
                       precompiler=pc)
        ev.wait(ev.submit([archive.get(base)] + [archive.get(c) for c in ids]))
        ev.close()
        assert all(archive.get(c)["status"] == "evaluated" for c in ids)
    assert evaluated == [base, ids[1], ids[2], ids[0]]
    assert pc.waited == [ids[1], ids[2], ids[0]]

