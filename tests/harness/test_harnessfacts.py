"""The search and `export` read a harness only through its facts, gathered in a sandboxed child
(kernelsmith/harness/gather.py): a hostile harness cannot write outside, see a secret or reach the
network, and the run still works; a crashing one is one error naming it; the facts give the search
the same per-shape sizes as the harness itself."""

import json
import shutil
from pathlib import Path

import pytest
import torch
import upstreamkit
from spykit import spy_harness

from kernelsmith import sandbox
from kernelsmith.cli import main
from kernelsmith.harness import box as harnessbox
from kernelsmith.harness import gather as harnessfacts
from kernelsmith.harness.facts import HarnessFacts, MalformedFacts
from kernelsmith.harness.gather import HarnessFactsError, gather
from kernelsmith.harness.model import load_harness
from kernelsmith.launch.sizekeys import SizeKey, resolve
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.task import make_task
from kernelsmith.search.mutators.space import ConfigSpace, shape_sizes

ROOT = Path(__file__).resolve().parents[2]
MINISERVE = ROOT / "examples" / "miniserve"
SECRETS = {"KERNELSMITH_LLM_API_KEY": "sk-factsfake0123456789abcd", "GITHUB_TOKEN": "ghs_" + "f" * 36}
needs_sandbox = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")

# Attacks at import; what it saw becomes a field of every shape (the facts carry it back).
SPY_ENDING = 'SEEN = " ".join(seen)\n'
TAIL = '''
SHAPES = [dict(s, spy=SEEN) for s in SHAPES]
CPU_SHAPES = [dict(s, spy=SEEN) for s in CPU_SHAPES]
'''
SANDBOXED = "WRITE-REFUSED WRITE-REFUSED NO-SECRET NET-REFUSED"


def _atoms(inputs: dict) -> list[tuple]:
    """Every size atom of one call's inputs: each tensor dimension, element and row count, each int."""
    out = []
    for name, v in inputs.items():
        if isinstance(v, torch.Tensor):
            out += [("shape", name, d) for d in range(v.dim())] + [("numel", name), ("rows", name)]
        elif type(v) is int:
            out.append(("value", name))
    return out


@pytest.mark.parametrize("rel", ["demo/rms_norm.py", "demo/silu_and_mul.py",
                                 "lmdeploy/multinomial_sampling.py"])
def test_facts_give_the_same_per_shape_sizes_as_the_harness(rel):
    h = load_harness(ROOT / "targets" / rel)
    f = gather(ROOT / "targets" / rel, ROOT)
    assert (f.shapes, f.cpu_shapes, f.vary, f.outputs) == (h.shapes, h.cpu_shapes, h.vary, h.outputs)
    assert f.reference_source == h.reference_source and "def reference" in f.reference_source
    for device in ("cuda", "interpret"):
        shapes = h.shapes_for(device)
        assert f.shapes_for(device) == shapes
        assert shape_sizes(f, shapes) == shape_sizes(h, shapes) is not None
        for atom in _atoms(h.make_inputs(dict(shapes[0]), "cpu", 0)):
            key = SizeKey("entry", (atom,))
            assert resolve(f, shapes, key) == resolve(h, shapes, key), atom
        made = f.make_inputs(shapes[-1], device, 0)  # meta tensors: sizes and dtypes, nothing allocated
        real = h.make_inputs(dict(shapes[-1]), "cpu", 0)
        assert set(made) == set(real)
        for name, v in real.items():
            if isinstance(v, torch.Tensor):
                assert made[name].device.type == "meta"
                m = made[name]
                assert (m.shape, m.dtype, m.stride()) == (v.shape, v.dtype, v.stride())
            else:
                assert made[name] == v and type(made[name]) is type(v)
    assert HarnessFacts.from_json(f.to_json(), f.path) == f  # what a Ray actor rebuilds them from
    with pytest.raises(KeyError, match="no recorded inputs"):
        f.make_inputs({"tokens": 999}, "cuda", 0)
    with pytest.raises(ValueError, match="seed 0"):
        f.make_inputs(h.shapes[0], "cuda", 7)


def _space(task, device):
    s = ConfigSpace(task, device=device)
    return s.key, s.sizes, s.key2, s.sizes2, s.limits


@pytest.mark.parametrize("op", ["rms_norm", "silu_and_mul"])
def test_the_search_space_is_the_same_from_facts(op):
    target = load_target(ROOT / "targets" / "demo.yaml")
    with_harness = make_task(target, op, MINISERVE, "0" * 40, harness="import")
    with_facts = make_task(target, op, MINISERVE, "0" * 40, harness="facts")
    assert isinstance(with_facts.harness, HarnessFacts)
    for device in ("cuda", "interpret"):
        assert _space(with_facts, device) == _space(with_harness, device)


def test_the_samplers_search_space_is_the_same_from_facts():
    path = upstreamkit.require_file("lmdeploy/lmdeploy/pytorch/kernels/cuda/multinomial_sampling.py")
    from types import SimpleNamespace

    harness = ROOT / "targets" / "lmdeploy" / "multinomial_sampling.py"
    op = SimpleNamespace(entry="multinomial_sampling")
    tasks = [SimpleNamespace(base_code=path.read_text(), harness=h, operator=op)
             for h in (load_harness(harness), gather(harness, ROOT))]
    spaces = [_space(t, "cuda") for t in tasks]
    assert spaces[0] == spaces[1] and spaces[0][0].expr == "scores.shape[1]" and spaces[0][2] is not None


@pytest.mark.parametrize("bad, part", [
    ({"shapes": [], "vary": {}, "inputs": []}, "shapes"),
    ({"shapes": [{"n": object()}], "vary": {}, "inputs": []}, "shapes"),
    ({"shapes": [{"n": 1}], "vary": {"n": []}, "inputs": []}, "vary"),
    ({"shapes": [{"n": 1}], "vary": {}, "inputs": [{"shape": {"n": 1}, "inputs": {"x": {"kind": "tensor",
      "shape": [2, -1], "stride": [1, 1], "dtype": "float16"}}}]}, "bad tensor sizes"),
    ({"shapes": [{"n": 1}], "vary": {}, "inputs": [{"shape": {"n": 1}, "inputs": {"x": {"kind": "tensor",
      "shape": [2], "stride": [1], "dtype": "__class__"}}}]}, "dtype"),
    ({"shapes": [{"n": 1}], "vary": {}, "inputs": [{"shape": {"n": 1},
                                                    "inputs": {"x; rm": {"kind": "none"}}}]}, "not a name"),
    ({"shapes": [{"n": 1}], "vary": {}, "inputs": [{"shape": {"n": 1}, "inputs": {"x": {"kind": "int",
      "value": True}}}]}, "not a int"),
    ({"shapes": [{"n": 1}], "vary": {}, "reference_source": "x" * 70000, "inputs": []}, "reference_source"),
])
def test_malformed_facts_are_refused(bad, part):
    with pytest.raises(MalformedFacts, match=part):
        HarnessFacts.from_json(bad, "h.py")


def test_a_malformed_answer_is_one_error_naming_the_harness(tmp_path, monkeypatch):
    h = tmp_path / "h.py"
    h.write_text("# the child is replaced below\n")
    monkeypatch.setattr(harnessbox, "run_child", lambda *a, **k: {"facts": {"shapes": "all of them"}})
    with pytest.raises(HarnessFactsError, match=f"{h}: the harness facts process answered malformed data"):
        gather(h, tmp_path)


def test_control_characters_in_the_reference_are_escaped():
    src = "def reference(x):\n\treturn x  # \x1b[2J\u202e\n"
    facts = HarnessFacts.from_json({"shapes": [{"n": 1}], "vary": {}, "inputs": [], "reference_source": src},
                                   "h.py")
    assert facts.reference_source == "def reference(x):\n\treturn x  # \\x1b[2J\\u202e\n"


# -- the commands ---------------------------------------------------------------------------------

def _target(tmp_path: Path, harness_text: str, monkeypatch) -> Path:
    src = tmp_path / "src"
    shutil.copytree(MINISERVE, src)
    (tmp_path / "h.py").write_text(harness_text)
    yaml = tmp_path / "t.yaml"
    yaml.write_text(f"repo: owner/engine\nclone_url: {src}\noperators:\n  - name: rms_norm\n"
                    "    file: miniserve/kernels/rms_norm.py\n    entry: rms_norm\n    harness: h.py\n")
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    return yaml


def _no_secret_in(files) -> None:
    for p in files:
        if p.is_file():
            data = p.read_bytes()
            assert not any(s.encode() in data for s in SECRETS.values()), p


@needs_sandbox
def test_a_hostile_harness_under_optimize_and_export(tmp_path, listener, sibling, monkeypatch, capsys):
    outside = [str(tmp_path / "pwned.txt"), str(tmp_path / "src" / "pwned.txt")]
    spy = (spy_harness(outside, list(SECRETS.values()), listener, SPY_ENDING)
           + (ROOT / "targets" / "demo" / "rms_norm.py").read_text() + TAIL)
    yaml = _target(tmp_path, spy, monkeypatch)
    run = tmp_path / "run"
    assert main(["optimize", str(yaml), "rms_norm", "--budget", "2", "--mutator", "params", "--device",
                 "interpret", "--out", str(run), "--no-progress"]) == 0
    result = json.loads((run / "result.json").read_text())
    assert result["sandbox"]["enabled"] is True
    out = tmp_path / "rl.jsonl"
    assert main(["export", str(run), "--format", "rl", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] >= 1 and summary["sandbox"]["enabled"] is True
    record = json.loads(out.read_text().splitlines()[0])
    # The facts came from the spy's own child, which saw nothing: the run and the export still work.
    assert {s["spy"] for s in record["task"]["shapes"]} == {SANDBOXED}
    assert "def reference" in record["prompt"][1]["content"]
    assert not any(Path(p).exists() for p in outside)
    _no_secret_in([*run.rglob("*"), out, out.with_name(out.name + ".summary.json")])
    # Without the sandbox the same harness succeeds (so the checks above can fail), and says so.
    out2 = tmp_path / "rl2.jsonl"
    assert main(["export", str(run), "--format", "rl", "-o", str(out2), "--no-sandbox"]) == 0
    assert "WARNING: --no-sandbox" in capsys.readouterr().err
    summary = json.loads(out2.with_name(out2.name + ".summary.json").read_text())
    assert summary["sandbox"]["enabled"] is False
    seen = json.loads(out2.read_text().splitlines()[0])["task"]["shapes"][0]["spy"]
    assert seen.startswith("WRITE-SUCCEEDED") and Path(outside[0]).exists()


@needs_sandbox
@pytest.mark.parametrize("text, says", [
    ("import ctypes\nctypes.string_at(0)  # a segfault at import\n",
     "the harness facts process was killed by SIGSEGV"),
    ("raise RuntimeError('no harness today')\n", "import failed: RuntimeError: no harness today"),
])
def test_a_harness_that_crashes_at_import_is_one_error_naming_it(tmp_path, monkeypatch, capsys, text, says):
    # It defines the harness names first, so the syntax-tree check lets it reach the import.
    names = ("SHAPES = []\n\n\ndef make_inputs(shape, device, seed):\n    return {}\n\n\n"
             "def reference():\n    pass\n\n\n")
    yaml = _target(tmp_path, names + text, monkeypatch)
    assert main(["optimize", str(yaml), "rms_norm", "--budget", "1", "--mutator", "params", "--device",
                 "interpret", "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
    assert err[0].startswith(f"kernelsmith: error: {tmp_path / 'h.py'}: ")
    assert not (tmp_path / "run" / "archive.sqlite").exists()


def test_facts_are_gathered_once_per_harness_content(tmp_path, monkeypatch):
    h = tmp_path / "h.py"
    h.write_text("SHAPES = [{'n': 2}]\nmake_inputs = lambda shape, device, seed: {'n': shape['n']}\n"
                 "reference = lambda n: n\n")
    calls = []
    real = harnessfacts._gather
    monkeypatch.setattr(harnessfacts, "_gather", lambda *a: calls.append(a) or real(*a))
    first, again = gather(h, tmp_path), gather(h, tmp_path)
    assert first.make_inputs({"n": 2}, "cuda", 0) == {"n": 2} and again == first and len(calls) == 1
    h.write_text(h.read_text().replace("'n': 2", "'n': 3"))
    assert gather(h, tmp_path).shapes == [{"n": 3}] and len(calls) == 2


@needs_sandbox
def test_evaluate_never_imports_the_harness_here(tmp_path, monkeypatch, capsys):
    """Only the referee's sandboxed worker runs it: a write at import fails, the evaluation works."""
    outside = tmp_path / "pwned.txt"
    writer = (f"try:\n    open({str(outside)!r}, 'w').write('harness was here')\nexcept OSError:\n    pass\n"
              + (ROOT / "targets" / "demo" / "rms_norm.py").read_text())
    yaml = _target(tmp_path, writer, monkeypatch)
    assert main(["evaluate", str(yaml), "rms_norm", "--device", "interpret", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["accepted"] is True
    assert not outside.exists()
