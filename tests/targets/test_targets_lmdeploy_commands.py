"""LMDeploy's upstream test commands (targets/lmdeploy.yaml) on a CPU machine, through the plugin.

On CPU the upstream tests cannot pass (they hard-code CUDA); these tests check that each command
gets past the heavy package imports to the point where CUDA is required, and that the router
test's imports resolve with the yaml's `--light-package` options alone. They need upstream's test
folder (LMDEPLOY_CHECKOUT, a git archive); a release checkout has none, and they skip saying so
(and on CUDA machines, where the GPU step runs the commands for real). The QuantPolicy stand-in is
checked against any LMDeploy sources, the release's included (tests/upstreamkit.py).
"""

import ast
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import upstreamkit

from kernelsmith.onboard.config import load_target

REPO = Path(__file__).resolve().parents[2]
TARGET = load_target(REPO / "targets" / "lmdeploy.yaml")


def _checkout() -> Path:
    path = upstreamkit.require_upstream_tests("lmdeploy", "tests/pytorch/kernel")
    if torch.cuda.is_available():
        pytest.skip("on CUDA the commands run for real (GPU step)")
    return path


def _run_yaml_command(op_name: str, root: Path) -> str:
    """The operator's `test:` command as verify runs it (interpreter, KERNELSMITH_TARGET_DIR set)."""
    # `python` in the command is this interpreter (its venv), as on a runner with the venv active.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = dict(os.environ, PATH=path, KERNELSMITH_TARGET_DIR=str(REPO / "targets"), TRITON_INTERPRET="1",
               # No cache or benchmark folders written into the read-only checkout.
               PYTEST_ADDOPTS="-p no:cacheprovider -p no:benchmark -p no:hypothesispytest -rs")
    proc = subprocess.run(["bash", "-c", TARGET.operator(op_name).test], cwd=root, env=env,
                          capture_output=True, text=True, timeout=180)
    return proc.stdout + proc.stderr


def test_multinomial_sampling_command_reaches_the_cuda_query_at_collection():
    out = _run_yaml_command("multinomial_sampling", _checkout())
    # lmdeploy.utils is the stand-in; the test module's bf16 mark asks torch.cuda for the device.
    assert "targets/lmdeploy/stubs/lmdeploy_utils.py" in out and "is_bf16_supported" in out, out
    assert "torch/cuda/__init__.py" in out, out  # failed inside torch.cuda, nowhere else
    assert "ModuleNotFoundError" not in out and "1 error" in out, out


def test_router_command_collects_to_its_cuda_skip():
    out = _run_yaml_command("fused_single_group_router", _checkout())
    assert "CUDA is required for the fused router module" in out and "1 skipped" in out, out
    assert "error" not in out.lower(), out


def _light_packages(command: str) -> list[str]:
    args = shlex.split(command)
    return [args[i + 1] for i, a in enumerate(args) if a == "--light-package"]


def test_router_test_imports_resolve_with_the_yaml_light_packages():
    root = _checkout()
    op = TARGET.operator("fused_single_group_router")
    test_file = root / op.test.split()[-1]
    # The upstream test module's own lmdeploy imports, exactly as written there.
    tree = ast.parse(test_file.read_text())
    imports = [ast.unparse(n) for n in tree.body
               if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lmdeploy")]
    assert len(imports) == 3, imports
    code = "\n".join([
        "import sys",
        "from kernelsmith.lightimport import install_light_package",
        *[f"install_light_package({p!r}, [{str(root)!r}])" for p in _light_packages(op.test)],
        *imports,
        "_envs.router_single_group_fused = True",
        "kw = dict(scoring_func='sigmoid', top_k=8, n_group=1, topk_group=1, n_routed_experts=192,",
        "          routed_scaling_factor=1.25, renormalize=True, router_n_groups=-1)",
        "assert TritonRouterNoauxTCImpl(**kw).enable_single_group_fused",
        "assert isinstance(TritonRouterNoauxTCImpl(**kw), DefaultRouterNoauxTCImpl)",
        "heavy = [m for m in ('transformers', 'pydantic', 'mmengine', 'lmdeploy.messages',",
        "                     'lmdeploy.pytorch.backends.selector') if m in sys.modules]",
        "print('heavy:', heavy)",
    ])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, TRITON_INTERPRET="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "heavy: []"


def test_fill_kv_cache_command_reaches_the_cuda_query_at_collection():
    out = _run_yaml_command("fill_kv_cache", _checkout())
    # Past `from lmdeploy.messages import QuantPolicy` and the turboquant imports, to the blocked-fp8
    # class's skipif mark, which asks torch.cuda for the compute capability.
    assert "get_device_capability" in out and "torch/cuda/__init__.py" in out, out
    assert "ModuleNotFoundError" not in out and "ImportError" not in out and "1 error" in out, out


def _light_stubs(command: str) -> dict[str, str]:
    args = shlex.split(command)
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--light-stub")


def _lmdeploy_imports(path: Path) -> list[str]:
    """Every `from lmdeploy... import ...` in a file, at any depth (test bodies import the kernels)."""
    return [ast.unparse(n) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lmdeploy")]


def test_fill_kv_cache_test_imports_resolve_with_the_yaml_stand_ins():
    root = _checkout()
    op = TARGET.operator("fill_kv_cache")
    test_file = root / op.test.split()[-1]
    imports = _lmdeploy_imports(test_file) + _lmdeploy_imports(test_file.parent / "turboquant_utils.py")
    assert any("lmdeploy.messages" in i for i in imports) and any("blocked_gemm_fp8" in i for i in imports)
    code = "\n".join([
        "import sys",
        "from kernelsmith.lightimport import install_light_package, install_stub",
        # blocked_gemm_fp8.py imports .utils, which asks Triton's driver for the backend at import:
        # the interpreter's stand-ins answer here (on the GPU the driver does).
        "from kernelsmith.referee.backend.interpret import InterpretBackend",
        "InterpretBackend().init_context()",
        *[f"install_light_package({p!r}, [{str(root)!r}])" for p in _light_packages(op.test)],
        *[f"install_stub({n!r}, {p!r})" for n, p in _light_stubs(op.test).items()],
        *dict.fromkeys(imports),
        "assert getattr(sys.modules['lmdeploy.messages'], '__ks_stub__', False)",
        "assert callable(fill_kv_cache) and callable(fill_kv_cache_blocked_fp8) and callable(quant_fp8)",
        "heavy = [m for m in ('transformers', 'pydantic', 'mmengine', 'lmdeploy.pytorch.disagg')",
        "         if m in sys.modules]",
        "print('heavy:', heavy)",
    ])
    env = dict(os.environ, TRITON_INTERPRET="1", KERNELSMITH_TARGET_DIR=str(REPO / "targets"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "heavy: []"


def test_quant_policy_stand_in_has_upstream_members_and_values():
    root = upstreamkit.require("lmdeploy")
    tree = ast.parse((root / "lmdeploy" / "messages.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "QuantPolicy")
    upstream = {t.id: ast.literal_eval(s.value) for s in cls.body if isinstance(s, ast.Assign)
                for t in s.targets if isinstance(t, ast.Name)}
    stub = TARGET.stubs["lmdeploy.messages"]
    ns: dict = {}
    exec(compile(stub.read_text(), str(stub), "exec"), ns)
    assert {m.name: m.value for m in ns["QuantPolicy"]} == upstream
