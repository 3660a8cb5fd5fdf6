"""The params mutator's Optuna search on CPU, against the model referee (known optima, no GPU):
reproducible proposals, the archive replayed into the sampler on resume, domains learned from
failures, the optimum in fewer proposals than the grid, and tables keyed on the launcher's sizes."""

from __future__ import annotations

import importlib.util
import math
import random
import re
from types import SimpleNamespace

import model_referee
import pytest
import torch
from test_search_loop import ROOT, _run, fake_gpu  # noqa: F401 - fake_gpu is a fixture

from kernelsmith.commands.run import optimize
from kernelsmith.onboard.task import load_task
from kernelsmith.referee.verdict import Verdict
from kernelsmith.search.archive import Archive
from kernelsmith.search.mutators.params import GridMutator, ParamsMutator
from kernelsmith.search.run_config import SearchConfig, SearchHooks
from kernelsmith.search.seeds import slot_rng

BLOCK = "silu_and_mul:BLOCK"
BEST_SINGLE = 5.955  # the model's best single config (BLOCK 4096, num_warps 32) over the demo shapes


def _task():
    return load_task("demo", "silu_and_mul", targets=str(ROOT / "targets"))


def _row(cid: int, mutator: str, params, code: str, verdict: dict, parent_id=None, generation=0) -> dict:
    return {
        "id": cid,
        "mutator": mutator,
        "params": params,
        "code": code,
        "status": "evaluated",
        "verdict": verdict,
        "speedup": verdict.get("geomean_speedup"),
        "parent_id": parent_id,
        "generation": generation,
    }


def drive(mutator, judge, n: int, seed: int, rows: list[dict] | None = None) -> list[dict]:
    """Propose and judge one candidate at a time (each sees every verdict before it); the rows.
    `judge(code, params)` is a candidate's verdict as archive JSON."""
    if rows is None:
        base = mutator.task.base_code
        rows = [_row(1, "base", None, base, judge(base, {"values": mutator.base_values}))]
    for _ in range(n):
        generation = len(rows)
        mutator.sync(rows)
        p = mutator.propose(rows[-1], [], slot_rng(seed, generation, 0), set())
        if p is None:
            break
        rows.append(_row(len(rows) + 1, p.mutator, p.params, p.code, judge(p.code, p.params), p.parent_id,
                         generation))
    return rows


def _drive(mutator, referee, n: int, seed: int, rows: list[dict] | None = None) -> list[dict]:
    """drive() judged by `referee` (the model of tests/search/model_referee.py or a stand-in)."""
    return drive(mutator, lambda code, params: referee.evaluate(code).to_json(), n, seed, rows)


def test_same_seed_and_rows_give_the_same_proposals():
    task = _task()
    referee = model_referee.ModelReferee(task)
    a = _drive(ParamsMutator(task, device="cuda"), referee, 12, seed=7)
    b = _drive(ParamsMutator(task, device="cuda"), referee, 12, seed=7)
    c = _drive(ParamsMutator(task, device="cuda"), referee, 12, seed=8)
    assert [r["code"] for r in a] == [r["code"] for r in b]
    assert [r["code"] for r in a] != [r["code"] for r in c]
    assert len({r["code"] for r in a}) == len(a)  # never a config twice
    # A new mutator (a resumed run) told the first 8 rows proposes what the running one did next.
    fresh = _drive(ParamsMutator(task, device="cuda"), referee, 5, seed=7, rows=[dict(r) for r in a[:8]])
    assert [r["code"] for r in fresh] == [r["code"] for r in a]


def test_resume_replays_the_archive_into_the_sampler(tmp_path, fake_gpu):  # noqa: F811
    """A run stopped after 8 proposals and resumed to 16 proposes exactly what one run of 16 did:
    the sampler is rebuilt from the archive, not from memory."""
    whole = _run(tmp_path, "whole", budget=16, seed=3, stagnation=100)
    _run(tmp_path, "split", budget=8, seed=3, stagnation=100)
    resumed = optimize(
        SearchConfig(
            target="demo",
            op="silu_and_mul",
            out=str(tmp_path / "split"),
            resume=True,
            budget=16,
            progress=False,
            stagnation=100,
        ),
        SearchHooks(referee_factory=model_referee.ModelReferee, precompile=False),
    )
    assert whole["proposals"] == resumed["proposals"] == 16

    def proposals(name):
        with Archive(tmp_path / name / "archive.sqlite") as a:
            return [(r["generation"], r["code"], r["params"]) for r in a.all()]

    assert proposals("whole") == proposals("split")


class _FailingAbove(model_referee.ModelReferee):
    """The model referee, with every BLOCK of 2048 or more failing to compile."""

    def evaluate(self, code, **kw):
        if any(cfg["BLOCK"] >= 2048 for _, cfg in model_referee.config_of(code)):
            return Verdict.rejected("compile_error", "out of resources: shared memory").finalize()
        return super().evaluate(code, **kw)


def test_failures_shrink_the_domain():
    """4 of the 11 BLOCK values always fail (a uniform draw would fail 36% of the time): the search
    learns the edge after a few failures and proposes none of them again."""
    task = _task()
    for seed in (0, 1, 2):
        mutator = ParamsMutator(task, device="cuda")
        rows = _drive(mutator, _FailingAbove(task), 40, seed=seed)[1:]
        failed = [i for i, r in enumerate(rows) if not r["verdict"]["accepted"]]
        assert len(rows) == 40 and 1 <= len(failed) <= 5, failed
        assert mutator.hi == {BLOCK: 2048} and mutator.lo == {}
        assert max(failed) < 15 and all(r["params"]["values"][BLOCK] < 2048 for r in rows[max(failed) + 1 :])


def test_the_sampler_reaches_the_optimum_in_fewer_proposals_than_the_grid(tmp_path, fake_gpu):  # noqa: F811
    """On the demo's 66-config space (11 blocks x 6 warp counts) the grid first reaches the model's
    best single config at proposal 53; the Optuna search, pipelined as the loop runs it (proposals
    see verdicts two generations old), gets within 1% of it in at most half that, for every seed."""
    task = _task()
    grid = GridMutator(task, device="cuda")
    assert math.prod(len(t.domain) for t in grid.tunables) == 66

    def first_within_1pct(name, **kw):
        _run(tmp_path, name, stagnation=100, **kw)
        with Archive(tmp_path / name / "archive.sqlite") as a:
            rows = [r for r in a.all() if r["mutator"] != "base"]
        return next((i + 1 for i, r in enumerate(rows) if (r["speedup"] or 0) >= 0.99 * BEST_SINGLE), None)

    on_grid = first_within_1pct("grid", budget=60, mutator="grid")
    assert on_grid == 53
    reached = [first_within_1pct(f"params{seed}", budget=26, seed=seed) for seed in (0, 1, 2)]
    assert all(r is not None and r <= on_grid // 2 for r in reached), reached


# A row reduction whose block tiles the columns: its best block follows n_cols, not n_rows x n_cols.
ROW_SUM = """import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x):
    n_rows, n_cols = x.shape
    out = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    BLOCK = 64
    _row_sum_kernel[(n_rows,)](x, out, n_cols, x.stride(0), BLOCK=BLOCK, num_warps=2)
    return out
"""
ROW_SUM_SHAPES = [{"rows": r, "cols": c} for c in (24, 300) for r in (3, 17)]  # 4 element counts


def _row_sum_speed(block: int, cols: int) -> float:
    """Modelled speedup: short rows want BLOCK 16, long rows BLOCK 256, whatever the row count."""
    best = 16 if cols < 100 else 256
    return 3.0 / (1.0 + abs(math.log2(block) - math.log2(best)))


def test_the_table_keys_on_the_size_the_launcher_reads(tmp_path):
    """The harness varies rows and columns; the block tiles the columns only: two buckets by
    `x.shape[1]` (not four by element count), and the table renders, runs and picks by it."""
    harness = SimpleNamespace(
        shapes_for=lambda device: ROW_SUM_SHAPES,
        make_inputs=lambda shape, device, seed: {"x": torch.randn(shape["rows"], shape["cols"])},
    )
    task = SimpleNamespace(base_code=ROW_SUM, operator=SimpleNamespace(entry="row_sum"), harness=harness)
    mutator = ParamsMutator(task, device="cuda")
    assert mutator.key.expr == "x.shape[1]" and mutator.sizes == [24, 24, 300, 300]
    assert mutator.limits == [int(math.sqrt(24 * 300)), None] and mutator.bucket_of == [0, 0, 1, 1]
    # The grid's other axis (rows) is the second level, used only where measurements ask for it.
    assert mutator.key2.expr == "x.shape[0]" and mutator.sizes2 == [3, 17, 3, 17]
    base_verdict = {"accepted": True, "timed": True, "timing": {"noisy": False},
                    "shapes": [{"shape": s, "speedup": 1.0} for s in ROW_SUM_SHAPES]}
    rows = [_row(1, "base", None, ROW_SUM, {**base_verdict, "geomean_speedup": 1.0})]
    rng, tables = random.Random(0), []
    for i in range(30):
        mutator.sync(rows)
        p = mutator.propose(rows[-1], [], rng, set())
        configs = mutator.shape_configs(SimpleNamespace(params=p.params, values=p.params["values"]))
        blocks = [c["row_sum:BLOCK"] for c in configs]
        speeds = [_row_sum_speed(b, s["cols"]) for b, s in zip(blocks, ROW_SUM_SHAPES, strict=True)]
        shapes = [{"shape": s, "speedup": v} for s, v in zip(ROW_SUM_SHAPES, speeds, strict=True)]
        verdict = {**base_verdict, "shapes": shapes, "geomean_speedup": math.prod(speeds) ** 0.25}
        rows.append(_row(i + 2, "params", p.params, p.code, verdict, p.parent_id))
        if p.params["op"] == "table":
            tables.append(p)
    assert tables, "no per-shape table was proposed"
    table = tables[-1]
    # Its rows are each bucket's best block among those measured (16 and 256 when the sampler got
    # there): chosen by the columns alone.
    tried = {r["params"]["values"]["row_sum:BLOCK"] for r in rows[1:] if not r["params"].get("table")}
    best = [max(tried, key=lambda b, c=c: _row_sum_speed(b, c)) for c in (24, 300)]
    assert [r["row_sum:BLOCK"] for r in table.params["table"]["rows"]] == best and best[0] < best[1]
    assert table.params["table"]["limits"] == [84, None]
    assert "_ks_config(x.shape[1])" in table.code and "launch configurations by x.shape[1]" in table.code
    # The row count does not change the best block: no table of the run keys on it.
    assert not any(r["params"].get("table", {}).get("limits2") for r in rows[1:])
    path = tmp_path / "row_sum_table.py"
    path.write_text(table.code)  # Triton reads kernel source through inspect: it must be a file
    spec = importlib.util.spec_from_file_location("ks_row_sum_table", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._ks_config(24)["BLOCK"] == best[0] and mod._ks_config(300)["BLOCK"] == best[1]
    for s in ROW_SUM_SHAPES[:1] + ROW_SUM_SHAPES[2:3]:  # one shape per bucket, under the interpreter
        x = torch.randn(s["rows"], s["cols"])
        torch.testing.assert_close(mod.row_sum(x), x.sum(-1))


def test_without_optuna_the_params_mutator_says_how_to_get_it(tmp_path, monkeypatch, capsys):
    """Optuna is imported by the params mutator only: the grid works without it, and optimize
    --mutator params stops with a config error (exit 2) naming the way to install or carry it."""
    import sys

    from kernelsmith.cli import main

    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` now raises ImportError
    assert GridMutator(_task(), device="cuda").propose({"id": 1}, [], random.Random(0)) is not None
    argv = ["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--mutator", "params",
            "--device", "interpret", "--budget", "1", "--out", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs Optuna" in err
    named = re.search(r"run (\S+\.sh) elsewhere", err)  # the script it names exists
    assert named and (ROOT / named.group(1)).is_file(), err


def test_a_parent_from_another_mutator_is_retuned_with_a_study_of_its_own():
    """An llm candidate's own tunables are searched from its code, told its earlier retunes."""
    task = _task()
    referee = model_referee.ModelReferee(task)
    code = task.base_code.replace("BLOCK = 64", "BLOCK = 128")
    rows = [_row(1, "base", None, task.base_code, referee.evaluate(task.base_code).to_json()),
            _row(2, "llm", None, code, referee.evaluate(code).to_json(), parent_id=1)]
    mutator = ParamsMutator(task, device="cuda")
    for i in range(6):
        mutator.sync(rows)
        p = mutator.propose(rows[1], [], random.Random(i), set())
        assert p.parent_id == 2 and p.params["op"] == "retune" and p.params["on"] == 2
        parent_values = {BLOCK: 128, "silu_and_mul:_silu_and_mul_kernel.num_warps": 1}
        changed = p.params["changed"]
        assert changed and all(parent_values[k] == old for k, (old, _) in changed.items())
        rows.append(_row(len(rows) + 1, "params", p.params, p.code, referee.evaluate(p.code).to_json(), 2))
    assert len({r["code"] for r in rows}) == len(rows)


def _measured(cid: int, space, params: dict, speed, ci: float) -> dict:
    """An archive row for `params` whose per-shape speedup is speed(shape, row), its CI ±ci."""
    configs = space.shape_configs(SimpleNamespace(params=params, values=params["values"]))
    sp = [speed(s, c) for s, c in zip(space.shapes, configs, strict=True)]
    shapes = [{"shape": s, "speedup": v, "ci95": [v * (1 - ci), v * (1 + ci)]}
              for s, v in zip(space.shapes, sp, strict=True)]
    verdict = {"accepted": True, "timed": True, "timing": {"noisy": False}, "shapes": shapes,
               "geomean_speedup": math.prod(sp) ** (1 / len(sp))}
    return _row(cid, "base" if cid == 1 else "params", None if cid == 1 else params, "", verdict)


WARPS = "silu_and_mul:_silu_and_mul_kernel.num_warps"
SINGLES = [(64, 1), (128, 8), (1024, 4), (4096, 8)]  # the base and three single configs


def _singles_table(speed, ci: float = 0.01):
    """The demo space told the base and three single configs; its table proposal."""
    space = ParamsMutator(_task(), device="cuda")
    space.sync([_measured(i + 1, space, {"values": {BLOCK: b, WARPS: w}}, speed, ci)
                for i, (b, w) in enumerate(SINGLES)])
    return space, space.table_proposal()


def test_a_second_level_only_where_one_buckets_optima_disagree():
    """The demo's d=11008 bucket holds 1 and 4096 tokens. Where the 1-token shape's best block differs
    from the bucket's beyond the CIs, the table serves it apart (by the token count); where the
    difference is within noise, the table keys on `d` alone."""
    def apart(shape, cfg):  # the model: the 1-token shape wants a small block, the rest a big one
        return model_referee.model_ms(shape["tokens"], shape["d"], 64, 1) / model_referee.model_ms(
            shape["tokens"], shape["d"], cfg[BLOCK], cfg["silu_and_mul:_silu_and_mul_kernel.num_warps"])

    space, table = _singles_table(apart)
    assert space.key.expr == "x.shape[-1]" and space.key2.expr == "x.numel() // x.shape[-1]"
    assert space.sizes2 == [1, 256, 4096, 8192] and space.cell_limits == [[64, None], [1448, None]]
    assert table is not None and table["table"]["limits2"][0] == 64  # 1 token: a row of its own
    rows = table["table"]["rows"]
    assert rows[0][BLOCK] < rows[1][BLOCK] and table["predicted"] > 5.96  # the best single config
    code = space.render(table)
    assert "_ks_cfg = _ks_config(x.shape[-1], x.numel() // x.shape[-1])" in code
    verdict = model_referee.ModelReferee(space.task).evaluate(code)  # looked up by the rendered key
    assert all(s["speedup"] >= 0.98 for s in verdict.shapes) and verdict.geomean_speedup > 5.96

    _, table = _singles_table(_slight, ci=0.01)  # beyond CIs of ±1%: served apart
    assert table is not None and table["table"].get("limits2") == [64, None, None]
    _, table = _singles_table(_slight, ci=0.04)  # within CIs of ±4%: one level, keyed on d only
    assert table is not None and "limits2" not in table["table"] and len(table["table"]["rows"]) == 2


def _slight(shape, cfg):
    """6% faster on 1 token with block 128; elsewhere d decides the block."""
    if shape["tokens"] == 1:
        return 1.06 if cfg[BLOCK] == 128 else 1.0
    return 3.0 if cfg[BLOCK] == (1024 if shape["d"] < 12000 else 4096) else 1.5


def test_a_split_on_overlapping_cis_is_tried_at_most_unclear_splits_times():
    """Screens have wide CIs: a split predicted to pay by the margin on rows whose CIs overlap is
    proposed anyway, after the table without it, and at most UNCLEAR_SPLITS times in a run (its own
    measurement decides; SGLang fused_rmsnorm's 1-2% table was never split on screens)."""
    from kernelsmith.search.mutators.space import UNCLEAR_SPLITS

    space, strict = _singles_table(_slight, ci=0.04)
    assert "limits2" not in strict["table"] and "unclear" not in strict
    table = space.table_proposal(unclear=True)
    assert table["unclear"] and table["table"]["limits2"] == [64, None, None]
    assert table["predicted"] > strict["predicted"]
    base = {"id": 1, "mutator": "base", "params": None}
    first = space.propose(base, [], random.Random(0), set())
    second = space.propose(base, [], random.Random(0), set())
    assert first.params["table"] == strict["table"] and second.params == table  # the clear one first
    assert space.unclear_splits_left() == UNCLEAR_SPLITS  # proposals count once they are rows
    rows = [_measured(10 + i, space, {**table, "table": {**table["table"], "limits2": [lim, None, None]}},
                      _slight, 0.04) for i, lim in enumerate((16, 200)[:UNCLEAR_SPLITS])]
    space.sync([_measured(i + 1, space, {"values": {BLOCK: b, WARPS: w}}, _slight, 0.04)
                for i, (b, w) in enumerate(SINGLES)] + rows)
    assert space.unclear_splits_left() == 0
    assert space.table_proposal(unclear=True) is not None  # the rule still sees it ...
    third = space.propose(base, [], random.Random(0), set())
    assert third is None or not third.params.get("unclear")  # ... but no more are proposed


def test_a_table_repairs_the_shape_the_best_single_config_loses():
    """SGLang fused_rmsnorm on the H200: the best single config was 1.12x overall but 0.96x at 1
    token (0.93x re-measured), so the winner rule rejected it on re-measurement, and no table beat
    it by the margin.
    Where the best single config is slower than SLOWEST_SHAPE on a shape (point estimate), the table
    that serves that cell a row which is not slow there is proposed within the margin; where the
    loss is within the floor, no table."""
    from kernelsmith.search.evidence import SLOWEST_SHAPE

    def losing(at_one_token: float):
        def speed(shape, cfg):  # block 1024 is best but for 1 token; block 64 is neutral there
            big = (cfg[BLOCK], cfg[WARPS]) == (1024, 4)
            if shape["tokens"] == 1:
                return at_one_token if big else (1.0 if cfg[BLOCK] == 64 else 0.9)
            return 2.0 if big else (1.0 if cfg[BLOCK] == 64 else 1.5)
        return speed

    space, table = _singles_table(losing(0.97), ci=0.04)  # 3% apart within CIs of ±4%: no split on noise
    assert table is not None and table["table"]["limits2"][0] == 64  # 1 token: a row of its own
    rows = space.cell_rows(table["table"])
    one = space.cell_of[space.sizes2.index(1)]
    for cell, row in zip(space.cells, rows, strict=True):
        assert row[BLOCK] == (64 if cell == one else 1024)
    top = 2.0 ** (3 / 4) * 0.97 ** (1 / 4)
    assert top < table["predicted"] < top * 1.01  # not the margin: the repair proposed it
    assert 0.97 < SLOWEST_SHAPE <= 0.985
    _, table = _singles_table(losing(0.985), ci=0.04)  # within the floor: the single config can win
    assert table is None


def test_a_saturated_sampler_gets_fewer_asks_before_a_random_untried_config(monkeypatch):
    """Late in a run TPE keeps answering tried configs and every ask costs O(trials): once 3 of the
    last 10 global proposals had to be drawn at random, a proposal asks the sampler at most
    SATURATED_ASKS times before drawing an untried config."""
    from kernelsmith.search.mutators import params as params_mod
    from kernelsmith.search.mutators import studies

    task = _task()
    rows = _drive(ParamsMutator(task, device="cuda"), model_referee.ModelReferee(task), 40, seed=3)
    globals_ = [r for r in rows if (r["params"] or {}).get("op") in ("ask", "untried")]
    assert len(globals_) >= params_mod.RECENT_ASKS

    def with_untried(k: int) -> list[dict]:
        marked = {r["id"] for r in globals_[-k:]} if k else set()
        return [{**r, "params": {**r["params"], "op": "untried"}} if r["id"] in marked else r for r in rows]

    mutator = ParamsMutator(task, device="cuda")
    mutator.sync(with_untried(2))
    assert mutator._global_asks() == params_mod.MAX_ASKS
    mutator.sync(with_untried(3))
    assert mutator._global_asks() == params_mod.SATURATED_ASKS

    asks = []
    real_ask = studies.Study.ask
    monkeypatch.setattr(studies.Study, "ask", lambda self, seed: asks.append(seed) or real_ask(self, seed))
    monkeypatch.setattr(params_mod.ParamsMutator, "table_proposal", lambda self: None)
    p = mutator._global_ask(random.Random(0), set())
    assert p is not None and 1 <= len(asks) <= params_mod.SATURATED_ASKS


def _screened_on_a_subset(verdict: dict, geomean: float) -> dict:
    """`verdict` as the staged referee leaves a candidate it stopped after the representative shapes."""
    out = dict(verdict, geomean_speedup=None, timing={**verdict["timing"], "mode": "screen_subset"})
    out["details"] = {**verdict.get("details", {}), "timing_depth": "screen_subset",
                      "subset_geomean": geomean, "subset_shapes": [0]}
    return out


def test_the_study_ranks_a_config_screened_on_a_few_shapes_by_its_geomean_there():
    """A config the staged referee stopped after the representative shapes has no all-shape geomean;
    the global study is told its geomean there (0.25x, 1.7x), not the base's 1.0x for both."""
    task = _task()
    referee = model_referee.ModelReferee(task)
    mutator = ParamsMutator(task, device="cuda")
    rows = _drive(mutator, referee, 2, seed=0)
    slow, near = rows[1], rows[2]
    slow["verdict"] = _screened_on_a_subset(slow["verdict"], 0.25)
    near["verdict"] = _screened_on_a_subset(near["verdict"], 1.7)
    slow["speedup"] = near["speedup"] = None
    mutator.sync(rows)
    told = sorted(t.value for t in mutator._global_study().study.trials)
    assert told == pytest.approx(sorted([math.log(0.25), math.log(1.7), math.log(rows[0]["speedup"])]))
    # The per-shape records stay what was measured: no all-shape geomean for either.
    assert mutator.records[slow["id"]].geomean is None and mutator.records[near["id"]].geomean is None
