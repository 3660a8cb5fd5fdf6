"""RunSpec is run.json's schema: it round-trips, loads run.json files written before its newer fields,
and refuses a missing, unknown or ill-typed field with one error naming run.json and the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from kernelsmith.errors import ConfigError
from kernelsmith.runspec import Replay, RunSpec, run_file

EXAMPLE_RUN = Path(__file__).resolve().parent / "data" / "example_run"
# run.json's keys in the order a new run writes them (docs/design.md, Run directory).
NEW_RUN_KEYS = ["target", "op", "repo", "file", "checkout", "base_sha", "base_release", "seed", "budget",
                "minutes", "mutator", "device", "gpus", "argv", "versions", "created_at", "command",
                "checkout_given", "islands", "exploit", "stagnation", "pipeline", "batch"]
GPUS = "a non-empty list of device indices (integers from 0, or nulls)"
REQUIRED = ["target", "op", "file", "checkout", "base_sha", "seed", "mutator", "device", "gpus"]


def _example() -> dict:
    return json.loads(run_file(EXAMPLE_RUN).read_text())


def _new_run(**changes) -> RunSpec:
    spec = RunSpec(target="/t/demo.yaml", op="rms_norm", repo="kernelsmith/demo", file="k/rms_norm.py",
                   checkout="/co", base_sha="a" * 40, base_release="miniserve==0.1.0", seed=3, budget=None,
                   minutes=1.5, mutator="params", device="cuda", gpus=[0, 1], argv=["ks", "optimize"],
                   versions={"kernelsmith": "0.1.0", "torch": None}, created_at="2026-01-01T00:00:00+00:00",
                   command="optimize", checkout_given=True, islands=2, exploit=0.7, stagnation=None,
                   pipeline=3, batch=2)
    return dataclasses.replace(spec, **changes)


def _write(tmp_path: Path, data) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    run_file(tmp_path).write_text(json.dumps(data))
    return tmp_path


def _error(tmp_path: Path, data) -> str:
    with pytest.raises(ConfigError) as e:
        RunSpec.load(_write(tmp_path, data))
    assert e.value.file == str(run_file(tmp_path))
    return str(e.value)


def test_a_new_runs_spec_round_trips_with_its_keys_in_order(tmp_path):
    spec = _new_run()
    data = spec.to_json()
    assert list(data) == NEW_RUN_KEYS  # no "replay" key outside a replay run
    assert RunSpec.load(_write(tmp_path, data)) == spec
    diff = Replay(source="/old/winner.diff", diff="@@ -1 +1 @@\n")
    replayed = _new_run(mutator="replay", budget=1, replay=diff)
    data = replayed.to_json()
    assert list(data) == [*NEW_RUN_KEYS, "replay"]
    assert data["replay"] == {"source": "/old/winner.diff", "diff": "@@ -1 +1 @@\n"}
    assert RunSpec.load(_write(tmp_path / "replay", data)) == replayed


def test_an_old_run_json_without_the_newer_fields_loads_with_their_defaults():
    old = _example()
    assert not {"command", "islands", "exploit", "checkout_given", "pipeline", "base_release"} & set(old)
    spec = RunSpec.load(EXAMPLE_RUN)
    assert (spec.op, spec.seed, spec.gpus, spec.budget, spec.minutes) == ("rms_norm", 0, [0], 40, None)
    assert (spec.command, spec.islands, spec.exploit, spec.stagnation, spec.pipeline, spec.batch) == (
        "optimize", None, None, None, None, None)
    assert spec.checkout_given is None and spec.replay is None and spec.base_release is None
    assert {k: v for k, v in spec.to_json().items() if k in old} == old


@pytest.mark.parametrize("field", REQUIRED)
def test_a_missing_required_field_names_run_json_and_the_field(tmp_path, field):
    data = _example()
    del data[field]
    assert f"run.json: {field}: missing required field" in _error(tmp_path, data)


@pytest.mark.parametrize("field,value,words", [
    ("seed", "0", "an integer"), ("seed", True, "an integer"), ("seed", 1.5, "an integer"),
    ("budget", "4", "an integer or null"), ("minutes", True, "a number or null"),
    *[("gpus", gpus, GPUS) for gpus in ("0", [], [-1], [True], [0.5])],
    ("checkout", "", "a non-empty string"), ("checkout", None, "a string"), ("mutator", 3, "a string"),
    ("exploit", "0.7", "a number or null"), ("checkout_given", "yes", "true or false or null"),
    ("argv", "kernelsmith optimize", "a list, each item a string"),
    ("versions", {"torch": 2}, "an object, each value a string or null"),
    ("replay", {"source": "x"}, "an object {source: a string, diff: a string} or null"),
])
def test_an_ill_typed_field_names_run_json_the_field_and_what_it_must_be(tmp_path, field, value, words):
    data = _example()
    data[field] = value
    message = _error(tmp_path, data)
    assert f"run.json: {field}: must be {words}, not {json.dumps(value)}" in message
    assert "restore it or start a new run" in message


def test_an_integer_is_a_number_and_null_gpus_are_workers_without_a_device(tmp_path):
    data = {**_example(), "minutes": 2, "exploit": 1, "gpus": [None]}
    spec = RunSpec.load(_write(tmp_path, data))
    assert (spec.minutes, spec.exploit, spec.gpus) == (2, 1, [None])


def test_an_unknown_field_is_refused_by_name(tmp_path):
    assert "run.json: seeds: not a run.json field" in _error(tmp_path, {**_example(), "seeds": 1})


def test_a_replay_run_without_its_diff_is_refused(tmp_path):
    assert "run.json: replay: the mutator is replay but the run holds no diff" in _error(
        tmp_path, {**_example(), "mutator": "replay"})


def test_no_run_json_not_json_or_not_an_object_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"run\.json: not found: not a kernelsmith run directory"):
        RunSpec.load(tmp_path)
    run_file(tmp_path).write_text("{not json")
    with pytest.raises(ConfigError, match=r"run\.json: invalid JSON"):
        RunSpec.load(tmp_path)
    assert "run.json: must hold a JSON object" in _error(tmp_path, [1, 2])
