"""What a generated KernelBench harness runs inside the referee's worker.

Inputs are the problem's `get_inputs()` under a seed; the reference is the problem's `Model`
built under KernelBench's weight seed; a candidate runs as an instance of its `ModelNew`, built
once per size set with the same init inputs and the reference's weights copied in, so the
candidate is judged on the same function as the reference.
"""

from __future__ import annotations

import importlib.util
import sys
import weakref
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes

from kernelsmith.harness.model import private_module_name
from kernelsmith.kernelbench.problem import read_problem

WEIGHT_SEED = 42  # KernelBench's seed_num: both models are built right after this seed
SIZES_KEY = "kb_sizes"  # the non-tensor input naming the size set (reference and ModelNew need it)


def _import_problem(path: Path):
    name = private_module_name(path, prefix="_ks_kb_problem")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _to(value, device: str, dtype: torch.dtype):
    """Move a tensor to the device; floating tensors also take the task's dtype (KernelBench's precision)."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.is_floating_point():
        return value.to(device=device, dtype=dtype)
    return value.to(device=device)


def device_key(device) -> str:
    """One spelling per device ("cuda" and "cuda:0" are the same GPU), for the model caches."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return str(dev)


def copy_weights(src: torch.nn.Module, dst: torch.nn.Module) -> str:
    """Copy src's weights into dst: by state_dict key, else by parameter order; returns how."""
    s, d = src.state_dict(), dst.state_dict()
    if set(s) == set(d) and all(s[k].shape == d[k].shape for k in s):
        dst.load_state_dict(s)
        return "state_dict"
    sp, dp = list(src.parameters()), list(dst.parameters())
    if sp and len(sp) == len(dp) and all(a.shape == b.shape for a, b in zip(sp, dp, strict=True)):
        with torch.no_grad():
            for a, b in zip(sp, dp, strict=True):
                b.copy_(a)
        return "parameter_order"
    # Different structure: leave ModelNew as built right after the same seed (KernelBench's own way).
    return "seed"


class KernelBenchRuntime:
    """One problem file: inputs, reference outputs and the binding of a solution's ModelNew."""

    def __init__(self, problem_path: str | Path):
        self.problem = read_problem(problem_path)
        self.module = _import_problem(self.problem.path)
        self._reference_models: dict = {}
        self.weight_copy: dict = {}
        # Live solutions (weakly held: a candidate's models go when the referee drops it).
        self._bindings: weakref.WeakSet = weakref.WeakSet()

    def _apply_sizes(self, sizes: dict) -> None:
        """Set the problem's module-level sizes (its get_inputs/get_init_inputs read them)."""
        for key, value in sizes.items():
            if key in self.problem.sizes:
                setattr(self.module, key, value)

    def _init_inputs(self, sizes: dict, device: str, dtype: torch.dtype) -> list:
        self._apply_sizes(sizes)
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(WEIGHT_SEED)
            init = self.module.get_init_inputs()
        return [_to(v, device, dtype) for v in init]

    def _build(self, cls, sizes: dict, device: str, dtype: torch.dtype) -> torch.nn.Module:
        init = self._init_inputs(sizes, device, dtype)
        # Built on the CPU under the CPU generator's seed, then moved (as KernelBench does);
        # seeding only that generator avoids torch's lazy per-device seeding machinery.
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.default_generator.manual_seed(WEIGHT_SEED)
            model = cls(*init)
            return model.to(device=device, dtype=dtype)

    def make_inputs(self, shape: dict, device: str, seed: int) -> dict:
        """`get_inputs()` under `seed` at the shape's sizes, as keyword args arg0, arg1, ..."""
        dtype = getattr(torch, shape.get("dtype", "float32"))
        sizes = {k: v for k, v in shape.items() if k in self.problem.sizes}
        self._apply_sizes(sizes)
        devices = [torch.cuda.current_device()] if str(device).startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            args = self.module.get_inputs()
        inputs = {f"arg{i}": _to(a, device, dtype) for i, a in enumerate(args)}
        inputs[SIZES_KEY] = tuple(sorted(sizes.items())) + (("dtype", shape.get("dtype", "float32")),)
        # Build every live solution's models now, outside the referee's watched calls: set-up
        # (seeding, weight init, the weight copy) is not part of a forward.
        key = (tuple(sorted(sizes.items())), device_key(device), shape.get("dtype", "float32"))
        for binding in list(self._bindings):
            self._ready(binding, key)
        return inputs

    @staticmethod
    def _split(inputs: dict) -> tuple[dict, str, list]:
        key = dict(inputs[SIZES_KEY])
        dtype = key.pop("dtype")
        args = [inputs[f"arg{i}"] for i in range(len(inputs) - 1)]
        device = next((device_key(a.device) for a in args if isinstance(a, torch.Tensor)), "cpu")
        return key, dtype, args + [device]

    def reference_model(self, sizes: dict, device: str, dtype_name: str) -> torch.nn.Module:
        """The problem's Model at these sizes, built once under the weight seed."""
        key = (tuple(sorted(sizes.items())), device, dtype_name)
        model = self._reference_models.get(key)
        if model is None:
            model = self._build(self.module.Model, sizes, device, getattr(torch, dtype_name))
            self._reference_models[key] = model
        return model

    def reference(self, **inputs):
        """The problem's Model applied to the inputs (KernelBench's ground truth)."""
        sizes, dtype_name, rest = self._split(inputs)
        *args, device = rest
        model = self.reference_model(sizes, device, dtype_name)
        with torch.no_grad():
            return model(*args)

    def _ready(self, binding: _Binding, key: tuple) -> torch.nn.Module:
        """The binding's ModelNew for a size key (sizes, device, dtype), built and weight-copied once."""
        model = binding.instances.get(key)
        if model is None:
            sizes, device, dtype_name = dict(key[0]), key[1], key[2]
            model = self._build(binding.cls, sizes, device, getattr(torch, dtype_name))
            ref = self.reference_model(sizes, device, dtype_name)
            self.weight_copy[binding.name] = copy_weights(ref, model)
            binding.instances[key] = model
        return model

    def bind(self, module):
        """The callable the referee runs for one loaded solution: its ModelNew on the inputs."""
        cls = getattr(module, "ModelNew", None)
        if not isinstance(cls, type) or not issubclass(cls, torch.nn.Module):
            raise TypeError("the solution must define class ModelNew(torch.nn.Module)")
        binding = _Binding(cls, module.__name__)
        self._bindings.add(binding)

        def run(**inputs):
            sizes, dtype_name, rest = self._split(inputs)
            *args, device = rest
            key = (tuple(sorted(sizes.items())), device, dtype_name)
            if key not in binding.instances:
                # Normally built by make_inputs; building here is set-up, not the forward's compute.
                with _disable_current_modes():
                    self._ready(binding, key)
            with torch.no_grad():
                return binding.instances[key](*args)

        return run


class _Binding:
    """One loaded solution's ModelNew class and its instances by size key."""

    def __init__(self, cls, name: str):
        self.cls, self.name = cls, name
        self.instances: dict = {}
