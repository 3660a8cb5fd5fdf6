"""Process-global settings (environment, triton.knobs, torch switches) and the triton.knobs callbacks.

The worker-level cases are in the corpus (cheats/*__autotune_listener, *__launch_hook, *__triton_env,
*__triton_knob, *__flush_denormal); these tests pin the pieces: what a capture sees, that a value put
back is no change, that reading runs no torch op and no tool, the static rules, and how the monitor
wraps and restores the knobs' callbacks around a launch.
"""

import os
import zlib

import pytest
import torch
import triton
from referee_helpers import MINISERVE, ROOT, demo_task
from torch.utils._python_dispatch import TorchDispatchMode

from kernelsmith.referee.checks import settings
from kernelsmith.referee.checks.integrity import Monitor, Record, violations_vs_base
from kernelsmith.referee.checks.static import static_violations

knobs = triton.knobs


# A callback that is a builtin (a class-level function would bind as a method) and that nothing
# replaces: `print` is not one, once Ray's tqdm has patched it in this process.
listener = ascii


def _changes(change, undo) -> list[str]:
    snap = settings.GlobalSettings()
    try:
        change()
        return snap.changes()
    finally:
        undo()


def test_environment_changes_are_named(monkeypatch):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "0")
    snap = settings.GlobalSettings()
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    monkeypatch.delenv("TRITON_PRINT_AUTOTUNING")
    assert snap.changes() == ["$TRITON_ALWAYS_COMPILE: unset -> '1'",
                              "$TRITON_PRINT_AUTOTUNING: '0' -> unset"]


def test_putenv_behind_os_environ_is_seen():
    """os.putenv changes what Triton's knobs read (the C environment) but not os.environ."""
    assert "TRITON_DEBUG" not in os.environ
    changed = _changes(lambda: os.putenv("TRITON_DEBUG", "1"), lambda: os.unsetenv("TRITON_DEBUG"))
    assert changed == ["process environment $TRITON_DEBUG: unset -> '1'"]


def test_putenv_after_the_c_environment_moved_is_seen():
    """The C environment is read through libc's `environ` as it is at each capture: putenv of many
    new names makes libc move the array, and a change after that is still seen."""
    names = [f"KS_TEST_GROW_{i}" for i in range(300)]
    snap = settings.GlobalSettings()
    try:
        for name in names:
            os.putenv(name, "x")
        os.putenv("TRITON_DEBUG", "1")
        assert snap.changes() == ["process environment $TRITON_DEBUG: unset -> '1'"]
    finally:
        for name in names + ["TRITON_DEBUG"]:
            os.unsetenv(name)
    assert snap.changes() == []


def test_triton_knobs_changes_are_named():
    with knobs.runtime.scope(), knobs.autotuning.scope():
        snap = settings.GlobalSettings()
        knobs.runtime.debug = True
        knobs.autotuning.listener = listener
        changed = snap.changes()
    assert "triton.knobs.runtime.debug: False -> True" in changed
    if hasattr(knobs.autotuning, "listener"):  # triton 3.6 has no autotuning listener
        assert "triton.knobs.autotuning.listener: None -> ascii" in changed
    assert settings.GlobalSettings().changes() == []


def test_hook_chain_entry_and_replaced_class_knob_are_named():
    chain = knobs.runtime.launch_enter_hook
    changed = _changes(lambda: chain.add(len), lambda: chain.remove(len))
    assert changed == ["triton.knobs.runtime.launch_enter_hook: [] -> [len]"]
    cls = type(knobs.compilation)
    original = vars(cls)["always_compile"]

    def replace():
        cls.always_compile = property(lambda self: True)

    changed = _changes(replace, lambda: setattr(cls, "always_compile", original))
    kind = type(original).__name__
    assert changed == [f"triton.knobs.compilation.always_compile (class): {kind} -> property"]


def test_a_setting_put_back_is_no_change():
    """Only what outlives the block counts: set and restored (even with an explicit None) is fine."""
    with knobs.compilation.scope():
        snap = settings.GlobalSettings()
        previous = knobs.compilation.listener  # a class-level None until set
        knobs.compilation.listener = listener
        knobs.compilation.listener = previous
        assert snap.changes() == []


@pytest.mark.parametrize("flag, value", [
    ("backends.cuda.matmul.allow_tf32", True),
    ("backends.cudnn.benchmark", True),
    ("backends.cudnn.deterministic", True),
    ("backends.cuda.matmul.allow_fp16_reduced_precision_reduction", False),
])
def test_torch_backend_flags_are_named(flag, value):
    *path, name = flag.split(".")
    owner = torch
    for part in path:
        owner = getattr(owner, part)
    before = getattr(owner, name)
    if before == value:
        value = not value
    changed = _changes(lambda: setattr(owner, name, value), lambda: setattr(owner, name, before))
    assert f"torch.{flag}: {before!r} -> {value!r}" in changed


def test_torch_globals_and_flush_to_zero_are_named():
    changed = _changes(lambda: torch.set_default_dtype(torch.float64),
                       lambda: torch.set_default_dtype(torch.float32))
    assert changed == ["torch.get_default_dtype(): 'torch.float32' -> 'torch.float64'"]
    changed = _changes(lambda: torch.set_float32_matmul_precision("medium"),
                       lambda: torch.set_float32_matmul_precision("highest"))
    assert "torch.get_float32_matmul_precision(): 'highest' -> 'medium'" in changed
    if torch.set_flush_denormal(False):  # the CPU supports it
        changed = _changes(lambda: torch.set_flush_denormal(True), lambda: torch.set_flush_denormal(False))
        assert changed == ["cpu flush-to-zero (denormals): False -> True"]


def test_a_mode_left_pushed_is_named():
    mode = TorchDispatchMode()
    changed = _changes(mode.__enter__, lambda: mode.__exit__(None, None, None))
    assert changed == ["torch._C._len_torch_dispatch_stack(): 0 -> 1"]


def test_capture_runs_no_torch_op_and_no_tool(monkeypatch):
    """Reading the settings must not be recorded as candidate work, nor run ptxas --version."""
    ops = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(func)
            return func(*args, **(kwargs or {}))

    def no_tool(path):
        raise AssertionError(f"ran {path}")

    monkeypatch.setattr(knobs.NvidiaTool, "from_path", staticmethod(no_tool))
    with Record():
        settings.capture()
    assert ops == []


def test_settings_violation_is_relative_to_the_base():
    base, cand = Record(), Record()
    base.settings.add("$FOO: unset -> '1'")
    cand.settings.update({"$FOO: unset -> '1'"})
    assert violations_vs_base(cand, base) == []
    cand.settings.add("triton.knobs.runtime.debug: False -> True")
    found = violations_vs_base(cand, base)
    assert [v for v, _ in found] == ["monkeypatch"] and "runtime.debug" in found[0][1]
    merged = Record()
    merged.merge(cand)
    assert Record.from_json(merged.to_json()).settings == cand.settings


# -- the knobs' callbacks inside a launch (hole: a listener compiled by exec has no candidate frame) ----
def test_knob_callbacks_are_wrapped_for_the_launch_and_put_back():
    monitor = Monitor("interpret", [])
    monitor.current = Record()
    chain = knobs.runtime.launch_enter_hook
    seen = []

    def listener(**info):
        seen.append((monitor._scopes[-1][0], info))

    def hook(metadata):
        seen.append((monitor._scopes[-1][0], metadata))

    with knobs.autotuning.scope(), knobs.compilation.scope():
        knobs.compilation.listener = listener
        chain.add(hook)
        try:
            with monitor._callbacks_recorded(object()):
                wrapped = knobs.compilation.listener
                assert getattr(wrapped, "__ks_user__", None) is listener
                assert getattr(chain.calls[-1], "__ks_user__", None) is hook
                monitor._scopes.append(("launch", None))  # as inside Triton's launch machinery
                wrapped(key=1)
                chain(2)
                monitor._scopes.pop()
            assert knobs.compilation.listener is listener and chain.calls[-1] is hook
            assert seen == [("user", {"key": 1}), ("user", 2)]  # both ran as the candidate's code
        finally:
            chain.remove(hook)


def test_a_class_level_callback_is_shadowed_only_during_the_launch():
    monitor = Monitor("interpret", [])
    monitor.current = Record()
    cls = type(knobs.compilation)
    with knobs.compilation.scope():
        cls.listener = listener
        try:
            with monitor._callbacks_recorded(object()):
                assert "listener" in vars(knobs.compilation)
            assert "listener" not in vars(knobs.compilation) and knobs.compilation.listener is listener
        finally:
            cls.listener = None


def test_a_callback_replaced_during_the_launch_is_left_alone():
    monitor = Monitor("interpret", [])
    monitor.current = Record()
    with knobs.compilation.scope():
        knobs.compilation.listener = listener
        with monitor._callbacks_recorded(object()):
            knobs.compilation.listener = repr
        assert knobs.compilation.listener is repr  # the settings check reports it; no silent undo


def test_nothing_is_wrapped_outside_a_watched_block():
    monitor = Monitor("interpret", [])
    with knobs.compilation.scope():
        knobs.compilation.listener = listener
        with monitor._callbacks_recorded(object()):
            assert knobs.compilation.listener is listener


# -- static rules -----------------------------------------------------------------------------------
@pytest.mark.parametrize("snippet, violation", [
    ("import os\nos.environ['TRITON_ALWAYS_COMPILE'] = '1'", "monkeypatch"),
    ("import os\ndel os.environ['TRITON_INTERPRET']", "monkeypatch"),
    ("from os import environ\nenviron.update(TRITON_DEBUG='1')", "monkeypatch"),
    ("import os\nos.environ.setdefault('TRITON_CACHE_DIR', '/tmp/x')", "monkeypatch"),
    ("import os\nos.putenv('TRITON_DEBUG', '1')", "monkeypatch"),
    ("import triton\ntriton.knobs.runtime.launch_enter_hook.add(print)", "monkeypatch"),
    ("from triton import knobs\nknobs.compilation.always_compile = True", "monkeypatch"),
    ("import torch\ntorch.set_flush_denormal(True)", "precision_downgrade"),
    ("import torch\ntorch.set_default_dtype(torch.float64)", "monkeypatch"),
    ("import torch\ntorch.use_deterministic_algorithms(True)", "monkeypatch"),
])
def test_static_flags_global_setting_writes(snippet, violation):
    assert violation in [v for v, _ in static_violations(snippet, "import torch\n")]


@pytest.mark.parametrize("snippet", [
    "import os\nBLOCK = int(os.environ.get('MINISERVE_BLOCK', '64'))",
    "import os\nINTERPRET = os.environ['TRITON_INTERPRET'] == '1'",
    "import triton\nINTERPRET = triton.knobs.runtime.interpret",
    "import triton\nwith triton.knobs.compilation.scope():\n    pass",
])
def test_static_leaves_reads_alone(snippet):
    assert static_violations(snippet, "import torch\n") == []


@pytest.mark.gpu
def test_gpu_setting_changed_only_while_timed_is_rejected():
    """A candidate that flips a setting only once it is being timed (after its correctness calls).

    Needs the session's end-of-evaluation settings check (settings.GlobalSettings around the whole
    evaluation, timing included): the per-call check does not watch the timed calls.
    """
    from kernelsmith.harness.model import load_harness
    from kernelsmith.referee import Referee

    shapes = load_harness(str(ROOT / "targets" / "demo" / "rms_norm.py")).shapes_for("cuda")
    correctness_calls = len(shapes) * 3 * 2 + 3  # 3 trials of 2 calls per shape, 3 fresh shapes
    base = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    code = "import os\n_CALLS = [0]\n" + base.replace("    out = torch.empty_like(x2)\n", (
        "    _CALLS[0] += 1\n"
        f"    if _CALLS[0] == {correctness_calls + 2}:  # inside the timing warm-up\n"
        "        _env = os.environ\n"
        "        _env['TRITON_ALWAYS_COMPILE'] = '1'\n"
        "    out = torch.empty_like(x2)\n"), 1)
    with Referee(demo_task("rms_norm"), device="cuda", seed=7) as ref:
        v = ref.evaluate(code, candidate_id=zlib.crc32(b"timed-env") % 10_000, timing="screen")
    assert not v.accepted and "monkeypatch" in v.violations, v.feedback()
