"""Generations in flight: enough to keep every spare core compiling, recorded in run.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from stub_compiler import StubCompiler

from kernelsmith.errors import ConfigError
from kernelsmith.search import precompile, resolve
from kernelsmith.search.archive import Archive, NewRow
from kernelsmith.search.loop import Search, optimize
from kernelsmith.search.precompile import compile_processes
from kernelsmith.search.run_config import SearchConfig, SearchHooks

ROOT = Path(__file__).resolve().parents[2]
H200 = {"major": 9, "minor": 0, "multi_processor_count": 132, "name": "H200", "total_memory": 1 << 37}


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch says one CUDA device exists; the referee is the model (nothing runs on a GPU)."""
    import model_referee

    import kernelsmith.referee.backend as backend

    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    model_referee.CALLS.clear()
    return model_referee


def _config(tmp_path, referee, name="run", referee_factory=None, precompile=False,
            **kw) -> tuple[SearchConfig, SearchHooks]:
    """(the config, the stand-ins) of a search with the model referee, for Search(*...) and optimize(*...)."""
    cfg = dict(target="demo", op="silu_and_mul", out=str(tmp_path / name), budget=8, mutator="params",
               device="cuda", gpus=[0], progress=False, targets=str(ROOT / "targets"))
    cfg.update(kw)
    return SearchConfig(**cfg), SearchHooks(referee_factory=referee_factory or referee.ModelReferee,
                                            precompile=precompile, argv=["kernelsmith", "optimize"])


def test_compile_processes_take_every_core_a_gpu_worker_and_the_loop_leave():
    assert compile_processes(1, cores=16) == 13  # the H200 host: 16 cores, one GPU worker
    assert compile_processes(2, cores=32) == 24  # capped
    assert compile_processes(1, cores=2) == 1


def test_default_pipeline_fills_the_compile_processes_only_where_they_run(tmp_path, monkeypatch):
    cfg = SearchConfig(target="demo", op="silu_and_mul")
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(precompile, "device_facts", lambda: H200)
    # 13 compile processes, two candidates in flight each, 2 per generation: 13, capped at 12.
    assert resolve.default_pipeline(cfg, "cuda", [0]) == 12 == resolve.MAX_PIPELINE
    assert resolve.default_pipeline(cfg, "cuda", [0], SearchHooks(batch=4)) == 6
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 8)  # 5 compile processes
    assert resolve.default_pipeline(cfg, "cuda", [0]) == 5
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 64)
    assert resolve.default_pipeline(cfg, "cuda", [0]) == resolve.MAX_PIPELINE
    assert resolve.default_pipeline(cfg, "interpret", [None]) == 2
    assert resolve.default_pipeline(cfg, "cuda", [0], SearchHooks(precompile=False)) == 2
    assert resolve.default_pipeline(SearchConfig(target="d", op="o", ray="auto"), "cuda", [0]) == 2
    monkeypatch.setattr(precompile, "device_facts", lambda: None)  # no GPU to compile ahead for
    assert resolve.default_pipeline(cfg, "cuda", [0]) == 2


def test_a_small_space_the_model_learns_keeps_a_tenth_of_it_in_flight(tmp_path, monkeypatch):
    """On the H200 host the compile processes would take 12 generations of 2 (24 candidates); the
    params mutator's model sees none of their verdicts, so a 78-config space (LMDeploy's router)
    keeps 3 generations (6 candidates, <= 10%) in flight; the sampler's 432 keep 12; a sweep, which
    learns nothing, keeps them all."""
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(precompile, "device_facts", lambda: H200)
    cfg = SearchConfig(target="demo", op="silu_and_mul")
    assert resolve.default_layout(cfg, "cuda", [0], points=78) == (3, 2)
    assert resolve.default_layout(cfg, "cuda", [0], points=432) == (12, 2)
    assert resolve.default_layout(cfg, "cuda", [0], points=40) == (2, 2)  # fewer generations first
    # What a new run records: the demo's 66 configs (the params mutator's), all of them for a sweep.
    monkeypatch.setattr("kernelsmith.referee.backend.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for command, mutator, name, depth in (("optimize", "params", "opt", 3), ("optimize", "all", "all", 3),
                                           ("sweep", "grid", "sweep", 12)):
        cfg = SearchConfig(target="demo", op="silu_and_mul", out=str(tmp_path / name), mutator=mutator,
                           device="cuda", gpus=[0], targets=str(ROOT / "targets"), command=command)
        run = resolve.resolve_run(cfg).run
        assert run.pipeline == depth, (command, mutator)
        assert json.loads((tmp_path / name / "run.json").read_text())["pipeline"] == depth


def test_a_space_of_few_launch_sets_keeps_one_proposal_per_gpu_within_a_tenth_of_it(monkeypatch):
    """SGLang fused_rmsnorm's 468 configs make 11 distinct launch sets on its shapes, gelu_and_mul's
    360 make 20: the floor of two generations of two hid 4 of them from each proposal. Now one
    proposal per GPU, and as few generations as keep a tenth of the space in flight (at least one);
    the router's 78, the sampler's 432 and the demo's 66 keep their layouts; flags still win."""
    monkeypatch.setattr(precompile.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(precompile, "device_facts", lambda: H200)
    cfg = SearchConfig(target="demo", op="silu_and_mul")
    assert resolve.default_layout(cfg, "cuda", [0], points=11) == (1, 1)
    assert resolve.default_layout(cfg, "cuda", [0], points=20) == (2, 1)
    assert resolve.default_layout(cfg, "cuda", [0, 1], points=20) == (1, 2)  # one proposal per GPU
    assert resolve.default_layout(cfg, "cuda", [0], points=66) == (3, 2)
    assert resolve.default_layout(cfg, "cuda", [0], points=78) == (3, 2)
    assert resolve.default_layout(cfg, "cuda", [0], points=432) == (12, 2)
    assert resolve.default_layout(cfg, "cuda", [0], points=None) == (12, 2)  # a sweep learns nothing
    assert resolve.default_layout(cfg, "interpret", [None], points=11) == (1, 1)
    assert resolve.default_layout(cfg, "cuda", [0], points=11, hooks=SearchHooks(batch=3)) == (1, 3)
    assert resolve.default_layout(SearchConfig(target="d", op="o", ray="auto"), "cuda", [None],
                                  points=11) == (2, 2)  # a cluster's workers are many


def test_a_new_run_counts_the_distinct_launch_sets_of_its_space(tmp_path):
    """What the layout is sized by: the configs that launch differently on the listed shapes (twins.py),
    not every knob combination; a space the launcher hides keeps its combinations; a sweep, none."""
    from types import SimpleNamespace

    from test_search_launch_twins import _task

    from kernelsmith.search.sweep import SweepGrid

    cfg = SearchConfig(target="d", op="o", mutator="params")
    distinct = SweepGrid(_task(), device="cuda", seed=0).launches()[0]
    assert resolve._learned_points(cfg, _task(), "cuda") == distinct < 468
    hidden = SimpleNamespace(**{**vars(_task()), "harness": None})  # no shapes to evaluate it on
    assert resolve._learned_points(cfg, hidden, "cuda") == 468
    assert resolve._learned_points(SearchConfig(target="d", op="o", command="sweep"), _task(), "cuda") is None


def test_pipeline_is_recorded_kept_on_resume_and_hides_that_many_generations(tmp_path, fake_gpu):
    result = optimize(*_config(tmp_path, fake_gpu, pipeline=3))
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["pipeline"] == 3 and result.data["proposals"] == 8
    base = dict(resume=True, budget=12)
    search = Search(*_config(tmp_path, fake_gpu, **base))
    try:
        assert search.pipeline == 3
        rows = search.archive.all()
        last = max(c.generation for c in rows)
        seen = search._visible(rows, last + 1)
        hidden = {c.id for c in seen if c.status == "pending"}
        # The generation about to be proposed sees nothing of the 3 before it, all of the older ones.
        assert hidden == {c.id for c in rows if not c.is_base and c.generation > last - 2}
        assert all(c.evaluated for c in rows if c.generation <= last - 2)
    finally:
        search.archive.close()
    with pytest.raises(ConfigError, match="3 generations in flight"):
        Search(*_config(tmp_path, fake_gpu, pipeline=2, **base))
    # A run.json written before the pipeline was recorded resumes with the two every run had then.
    run.pop("pipeline")
    (tmp_path / "run" / "run.json").write_text(json.dumps(run))
    search = Search(*_config(tmp_path, fake_gpu, **base))
    try:
        assert search.pipeline == 2
    finally:
        search.archive.close()


def test_the_flag_reaches_the_run(tmp_path, fake_gpu):
    from kernelsmith.cli import main

    out = tmp_path / "cli"
    main(["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--mutator", "params",
          "--budget", "4", "--device", "cuda", "--out", str(out), "--no-progress", "--pipeline", "4"])
    assert json.loads((out / "run.json").read_text())["pipeline"] == 4
    assert main(["optimize", "demo", "silu_and_mul", "--pipeline", "0"]) == 2


def test_the_referee_is_told_which_candidates_kernelsmith_rendered(tmp_path, fake_gpu):
    """The params mutator's candidates go to the referee as rendered (its worker survives their
    wrong answers); the base and the final re-measurement are judged as before."""
    result = optimize(*_config(tmp_path, fake_gpu, budget=6))
    with Archive(result.run_dir / "archive.sqlite") as a:
        base = a.base().id
        rendered = {c.id for c in a.all() if c.rendered}
    searched = [c for c in fake_gpu.CALLS if c["cid"] != base and not c["fresh_compile"]]
    assert len(rendered) == 6 and {c["cid"] for c in searched} == rendered
    assert all(c["rendered"] for c in searched)
    assert not any(c["rendered"] for c in fake_gpu.CALLS if c["cid"] == base or c["fresh_compile"])


def test_the_first_generation_is_proposed_and_compiled_while_the_base_is_judged(tmp_path, fake_gpu):
    """A new run does not wait for the base's verdict to propose: generation 1 is proposed and
    sent to the compile processes while the worker boots and judges the base, blind to its verdict;
    generation 2 comes only after it (the base must pass before anything is compared with it)."""
    import threading
    import time

    from kernelsmith.search.archive import Archive

    seen: dict[str, object] = {}
    base_judged = threading.Event()

    class SlowBase(fake_gpu.ModelReferee):
        def evaluate(self, code, **kw):
            if code is None and not base_judged.is_set():  # the base, at the run's start
                deadline = time.monotonic() + 10  # (the old loop proposed nothing before this verdict)
                while time.monotonic() < deadline:
                    with Archive(tmp_path / "run" / "archive.sqlite") as a:
                        rows = [r for r in a.all() if r["mutator"] != "base"]
                    seen["while_base"] = sorted(r["generation"] for r in rows)
                    if len(seen["while_base"]) >= 2:  # the batch is recorded one row at a time
                        break
                    time.sleep(0.05)
                out = super().evaluate(code, **kw)
                base_judged.set()
                return out
            return super().evaluate(code, **kw)

    submitted = []

    class Compiles(StubCompiler):  # every job is built at once
        def submit(self, cid, code):
            submitted.append((cid, base_judged.is_set()))

    import kernelsmith.search.precompile as precompile

    cfg = _config(tmp_path, fake_gpu, budget=8, referee_factory=SlowBase, precompile=True, pipeline=3)
    orig = precompile.Precompiler.maybe
    precompile.Precompiler.maybe = classmethod(lambda cls, *a, **k: Compiles())
    try:
        result = optimize(*cfg)
    finally:
        precompile.Precompiler.maybe = orig
    assert result.data["proposals"] == 8
    assert seen["while_base"] == [1] * 2  # generation 1 (a batch of 2) was in the archive already
    assert [judged for _, judged in submitted[:2]] == [False, False]  # and compiling
    assert all(judged for _, judged in submitted[2:])  # generation 2 on: after the base's verdict
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = a.all()
    assert [r["parent_id"] for r in rows if r["generation"] == 1] == [1, 1]


def test_a_base_rejected_while_generation_1_is_in_flight_stops_the_run(tmp_path, fake_gpu):
    """The base's verdict is checked before generation 2: a base the referee rejects ends the run
    with the same message as before, and nothing but generation 1 was proposed."""
    from kernelsmith.errors import KernelsmithError
    from kernelsmith.referee.verdict import Verdict
    from kernelsmith.search.archive import Archive

    class RejectsBase(fake_gpu.ModelReferee):
        def evaluate(self, code, **kw):
            if code is None:
                v = Verdict.rejected("incorrect", "the base's output differs from the reference on shape 0")
                return v.finalize() if hasattr(v, "finalize") else v
            return super().evaluate(code, **kw)

    with pytest.raises(KernelsmithError, match="base"):
        optimize(*_config(tmp_path, fake_gpu, budget=8, referee_factory=RejectsBase))
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        rows = a.all()
    assert rows[0]["mutator"] == "base" and rows[0]["status"] == "evaluated" and not rows[0]["accepted"]
    assert {r["generation"] for r in rows[1:]} == {1}


def test_no_base_overlap_where_a_model_proposes_or_nothing_pipelines(tmp_path, fake_gpu, monkeypatch):
    """A model's prompt shows its parent's feedback (the base's timings), and a pipeline of 1 means
    every generation sees every verdict before it: then the base is judged before generation 1."""
    import kernelsmith.search.loop as loop

    class Model:
        name = "llm"

    def overlap(name, **kw):
        search = Search(*_config(tmp_path, fake_gpu, name=name, **kw))
        try:
            return search.base_overlap
        finally:
            search.archive.close()

    assert overlap("params") is True
    assert overlap("serial", pipeline=1) is False
    monkeypatch.setattr(loop, "build_mutators", lambda *a, **k: [Model()])
    assert overlap("llm") is False


def test_a_run_killed_before_the_bases_verdict_resumes_as_one_run(tmp_path, fake_gpu):
    """Killed after generation 1 was proposed but before the base was judged: the resume judges the
    base and generation 1 in their own turns and then proposes what one uninterrupted run does."""
    from kernelsmith.search.archive import Archive

    whole = optimize(*_config(tmp_path, fake_gpu, name="whole", budget=10, pipeline=3))
    search = Search(*_config(tmp_path, fake_gpu, name="killed", budget=10, pipeline=3))
    try:  # what the killed run had done: the base recorded, generation 1 proposed, nothing judged
        search.archive.add(NewRow(search.task.base_code, mutator="base"))
        assert search._propose(1, search.batch) == 2
    finally:
        search.archive.close()
    resumed = optimize(*_config(tmp_path, fake_gpu, name="killed", budget=10, resume=True))

    def trail(name):  # the candidates, and the stagnation count (generation 1's proposals in it)
        with Archive(tmp_path / name / "archive.sqlite") as a:
            rows = [(r["id"], r["generation"], r["parent_id"], r["code"], r["status"]) for r in a.all()]
            return rows, a.get_meta("since_best", 0)

    assert trail("killed") == trail("whole")
    assert resumed.data["proposals"] == whole.data["proposals"] == 10


@pytest.mark.parametrize("tallied, window", [(4, [5, 6]), (5, [6, 7, 8])])
def test_a_run_killed_with_generations_in_flight_resumes_as_one_run(tmp_path, fake_gpu, tallied, window):
    """Killed with generations proposed but not yet tallied (one judged, the rest not): the resume
    takes them back into its window, so their proposals count toward stagnation, the best and the
    islands' migrations (every 3rd generation) move on in the order one uninterrupted run's did, and
    it proposes the same. With a full window the first thing it does is tally generation 6, whose
    migration needs the islands as the last proposal saw them."""
    from kernelsmith.search.archive import Archive

    kw = dict(pipeline=3, islands=2, stagnation=8)
    whole = optimize(*_config(tmp_path, fake_gpu, name="whole", budget=24, **kw))
    optimize(*_config(tmp_path, fake_gpu, name="killed", budget=2 * tallied, **kw))
    search = Search(*_config(tmp_path, fake_gpu, name="killed", budget=24, resume=True))
    try:  # what the killed run had done next: the window proposed, its first candidate judged
        assert all(search._propose(g, search.batch) == 2 for g in window)
        first = search.archive.where("generation=?", (window[0],))[0]
        verdict = fake_gpu.ModelReferee(search.task).evaluate(first["code"], timing="staged")
        search.archive.set_verdict(first["id"], verdict.to_json(), "fb", timing=verdict.depth)
    finally:
        search.archive.close()
    resumed = optimize(*_config(tmp_path, fake_gpu, name="killed", budget=24, resume=True))

    def trail(name):
        with Archive(tmp_path / name / "archive.sqlite") as a:
            rows = [(r["id"], r["generation"], r["parent_id"], r["code"]) for r in a.all()]
            return rows, a.migrations(), a.get_meta("since_best", 0), a.get_meta("made")

    assert trail("killed") == trail("whole")
    assert resumed.data["proposals"] == whole.data["proposals"]
    assert resumed.data["stop_reason"] == whole.data["stop_reason"]


def test_a_malformed_window_in_the_archive_is_ignored_not_a_crash(tmp_path, fake_gpu):
    """The archive sits in the run directory: meta `made` / `tally_best` that are not what the loop writes
    count for nothing (the resume falls back to judging pending rows first and the verdicts' best)."""
    optimize(*_config(tmp_path, fake_gpu, budget=4))
    search = Search(*_config(tmp_path, fake_gpu, budget=6, resume=True))
    try:
        search.archive.set_meta("made", {"x": 2, "3": "two", "4": 2, "5": -1})
        search.archive.set_meta("tally_best", ["not", "a", "number"])
        assert search._made() == {4: 2} and search._tallied_best() == search._best()
        search.archive.set_meta("made", "junk")
        search.archive.set_meta("tally_best", {"generation": 2})
        assert search._made() == {} and search.untallied() == [] and search._tallied_best() == search._best()
    finally:
        search.archive.close()
    assert optimize(*_config(tmp_path, fake_gpu, budget=6, resume=True)).data["proposals"] == 6


def test_a_build_stuck_at_the_windows_front_moves_on_instead_of_idling_the_gpus(
        tmp_path, fake_gpu, monkeypatch):
    """On the H200 a sampler config at the 20 s compile limit held the window: no generation could be
    proposed (it must see the stuck one's generation) and the GPU idled 9-13 s. Now the stuck build
    moves to the newest generation in flight, later generations are proposed and judged while it
    builds, the move is in the archive (a resume sees what the proposals saw), and it is judged when
    its build ends."""
    import threading
    import time

    from kernelsmith.search.archive import Archive

    submitted, built = [], threading.Event()
    gave_up = []

    class OneStuckBuild(StubCompiler):  # the first candidate of generation 2 builds until released
        def submit(self, cid, code):
            submitted.append(cid)
            if len(submitted) >= 10:  # generation 5 exists: the window got past the stuck build
                built.set()

        def ready(self, cid, limit=None):
            if len(submitted) < 3 or cid != submitted[2] or built.is_set():
                return True
            if time.monotonic() - t0 > 15:  # the old loop never gets there: fail, do not hang
                gave_up.append(cid)
                return True
            return False

    import kernelsmith.search.evaluator as evaluator
    import kernelsmith.search.precompile as precompile

    monkeypatch.setattr(evaluator, "STUCK_BUILD_S", 1.0)  # (8 s on a real run)
    cfg = _config(tmp_path, fake_gpu, budget=12, precompile=True, pipeline=3)
    orig = precompile.Precompiler.maybe
    precompile.Precompiler.maybe = classmethod(lambda cls, *a, **k: OneStuckBuild())
    t0 = time.monotonic()
    try:
        result = optimize(*cfg)
    finally:
        precompile.Precompiler.maybe = orig
    assert not gave_up and built.is_set() and result.data["proposals"] == 12
    stuck = submitted[2]
    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        moved = a.get_meta("moved")
        row = a.get(stuck)
        by_gen = {}
        for r in a.all():
            by_gen.setdefault(r["generation"], []).append(r["id"])
    assert moved and moved[0]["id"] == stuck and moved[0]["from"] == 2 and moved[0]["to"] > 2
    assert row["status"] == "evaluated" and row["generation"] == moved[-1]["to"]
    assert stuck in by_gen[moved[-1]["to"]] and stuck not in by_gen[2]


class NeverBuilt(StubCompiler):
    """A precompiler whose one candidate never finishes building."""

    def ready(self, cid, limit=None):
        return False


def _wait_for_a_stuck_build(tmp_path, fake_gpu, precompiler, stall_s: float):
    """The base judged, then one candidate whose build `precompiler` never finishes: what
    Evaluator.wait answers (the stuck ids), after how many seconds, the evaluator's summary and
    the candidate's status."""
    import time

    import kernelsmith.search.evaluator as evaluator
    from kernelsmith.onboard.task import load_task
    from kernelsmith.search.archive import Archive

    task = load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))
    with Archive(tmp_path / "a.sqlite") as archive:
        base = archive.add(NewRow(task.base_code, mutator="base"))
        code = task.base_code.replace("BLOCK = 64", "BLOCK = 128")
        cid = archive.add(NewRow(code, mutator="params", parent_id=base))
        ev = evaluator.Evaluator(task, archive, device="cuda", gpus=[0], seed=0,
                                 referee_factory=fake_gpu.ModelReferee, precompiler=precompiler)
        try:
            ev.wait(ev.submit([archive.get(base)]))
            t0 = time.monotonic()
            stuck = ev.wait(ev.submit([archive.get(cid)]), stall_s=stall_s)
            took = time.monotonic() - t0
            return stuck == [cid], took, ev.summary()[0], archive.get(cid)["status"]
        finally:
            ev.close()


def test_only_a_build_older_than_stuck_build_s_with_idle_gpus_counts_as_stuck(
        tmp_path, fake_gpu, monkeypatch):
    """A young build (the usual 2-7 s on the H200 host) is waited for; one past STUCK_BUILD_S with
    every GPU idle is answered as stuck."""
    import kernelsmith.search.evaluator as evaluator

    monkeypatch.setattr(evaluator, "STUCK_BUILD_S", 0.6)
    stuck, took, _, status = _wait_for_a_stuck_build(tmp_path, fake_gpu, NeverBuilt(), stall_s=0.1)
    assert stuck and took >= 0.6 and status == "pending"


def test_once_builds_finished_a_build_three_times_the_typical_one_counts_as_stuck(
        tmp_path, fake_gpu, monkeypatch):
    """With the precompiler's typical (median) build known, the stuck age is STUCK_OVER_TYPICAL times
    it (not less than STUCK_MIN_S), not the fixed STUCK_BUILD_S; the worker's idle time with only
    builds queued is accounted as such."""
    import kernelsmith.search.evaluator as evaluator

    class FastBuildsOneStuck(NeverBuilt):
        def typical_s(self):
            return 0.2

    monkeypatch.setattr(evaluator, "STUCK_BUILD_S", 30.0)
    monkeypatch.setattr(evaluator, "STUCK_MIN_S", 0.3)
    stuck, took, idle, _ = _wait_for_a_stuck_build(tmp_path, fake_gpu, FastBuildsOneStuck(), stall_s=0.05)
    assert stuck and 0.6 <= took < 5.0  # 3 x 0.2 s, far below the fixed 30 s
    assert idle["idle_builds_only_s"] >= 0.4 and idle["idle_nothing_queued_s"] < took


def test_a_budget_spent_before_the_bases_verdict_still_judges_the_base(tmp_path, fake_gpu):
    """With generation 1 in flight beside the base, a budget that ran out before the base's verdict
    left the base unjudged and the run said the referee rejected it (CI caught it, now and then, with
    a 6 ms budget). The base is judged whatever the budget; the run then stops on time."""
    import time

    class SlowBoot(fake_gpu.ModelReferee):
        def start(self):
            time.sleep(0.3)  # the worker boots past the budget below: the base is still queued

    result = optimize(*_config(tmp_path, fake_gpu, budget=None, minutes=1e-4, referee_factory=SlowBoot))
    assert result.data["stop_reason"].startswith("time budget")
    from kernelsmith.search.archive import Archive

    with Archive(tmp_path / "run" / "archive.sqlite") as a:
        base = a.base()
    assert base["status"] == "evaluated" and base["accepted"]


def test_the_stagnation_count_credits_each_generation_with_its_own_verdicts_only(tmp_path, fake_gpu):
    """With generations in flight, a later generation's better verdict can be in when an earlier one
    is tallied. It must not count for the earlier one (whether it is in yet is timing): a run killed
    and resumed then kept another stagnation count than the same run uninterrupted (a CI flake of
    test_a_run_killed_before_the_bases_verdict_resumes_as_one_run)."""
    search = Search(*_config(tmp_path, fake_gpu, pipeline=3))
    full = {"accepted": True, "timed": True, "timing": {"aa_ratio": 1.0, "noisy": False}}

    def win(speed):  # a full measurement that is a measured win (evidence.py)
        shape = {"shape": {"n": 1}, "speedup": speed, "candidate_ms": 1 / speed,
                 "ci95": [speed * 0.99, speed * 1.01],
                 "samples_ms": {"base": [1.0, 1.01, 0.99], "candidate": [1 / speed] * 3}}
        return {**full, "geomean_speedup": speed, "shapes": [shape]}

    try:
        a = search.archive
        base = a.add(NewRow(search.task.base_code, mutator="base"))
        a.set_verdict(base, {**full, "geomean_speedup": 1.0}, "")
        for gen, speed in ((1, 1.2), (2, 1.5), (3, 1.4)):
            code = f"# generation {gen}\n" + search.task.base_code
            cid = a.add(NewRow(code, mutator="params", generation=gen))
            a.set_verdict(cid, win(speed), "", timing="full")
        behind = {**full, "geomean_speedup": 0.8, "timing": {"mode": "screen"},
                  "details": {"timing_depth": "screen"}}
        behind_id = a.add(NewRow("# behind\n" + search.task.base_code, mutator="params", generation=3))
        a.set_verdict(behind_id, behind, "", timing="screen")
        # Generation 1 is tallied with generation 2's 1.5x already in: it improved on nothing to 1.2x.
        best, since = search._tally(1, 2, None, 7)
        assert (best, since) == (1.2, 0)
        assert search._tally(2, 2, best, since) == (1.5, 0)  # generation 2 gets its own improvement
        # Nothing better in generation 3: its full measurement counts, its screen behind the bar not.
        assert search._tally(3, 2, 1.5, 0) == (1.5, 1)
    finally:
        search.archive.close()
