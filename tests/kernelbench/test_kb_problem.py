"""KernelBench problem files: parsing, validation errors, and the generated task folder."""

import pytest

from kernelsmith.errors import ConfigError
from kernelsmith.kernelbench.adapter import base_code, kernelbench_task
from kernelsmith.kernelbench.problem import list_problems, read_problem
from kernelsmith.kernelbench.problems import PROBLEMS_DIR, SOLUTIONS_DIR

UPSTREAM_STYLE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)

batch_size = 16
dim1 = 256 * 2
reduce_dim = 1

def get_inputs():
    x = torch.rand(batch_size, dim1)
    return [x]

def get_init_inputs():
    return [reduce_dim]
'''


def test_shipped_problems_and_solutions():
    problems = list_problems(PROBLEMS_DIR)
    assert [p.name for p in problems] == ["1_Swish", "2_RMSNorm", "3_Softmax", "4_Linear_ReLU"]
    for p in problems:
        assert (SOLUTIONS_DIR / f"{p.name}.py").is_file()
        assert p.cpu_sizes and set(p.cpu_sizes) <= set(p.sizes)
        assert p.shape("cuda") == {**p.sizes, "dtype": "float32"}


def test_upstream_format_sizes(tmp_path):
    path = tmp_path / "47_Sum_reduction.py"
    path.write_text(UPSTREAM_STYLE)
    p = read_problem(path)
    assert p.sizes == {"batch_size": 16, "dim1": 512, "reduce_dim": 1}
    assert p.cpu_sizes == {} and p.vary == {}
    assert p.shape("interpret") == {"batch_size": 16, "dim1": 512, "reduce_dim": 1, "dtype": "float32"}


@pytest.mark.parametrize("text,field", [
    (UPSTREAM_STYLE.replace("def get_inputs", "def other_inputs"), "get_inputs"),
    (UPSTREAM_STYLE.replace("class Model", "class Net"), "Model"),
    (UPSTREAM_STYLE + "CPU_SIZES = {'nope': 1}\n", "CPU_SIZES.nope"),
    (UPSTREAM_STYLE + "VARY = {'batch_size': []}\n", "VARY.batch_size"),
    (UPSTREAM_STYLE + "VARY = [1]\n", "VARY"),
])
def test_bad_problem_names_the_field(tmp_path, text, field):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_problem(path)
    assert e.value.field == field and str(path) in str(e.value)


def test_empty_folder_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no KernelBench problem files"):
        list_problems(tmp_path)


def test_task_folder(tmp_path):
    problem = read_problem(PROBLEMS_DIR / "2_RMSNorm.py")
    task = kernelbench_task(problem, tmp_path / "t")
    assert task.operator.entry == "ModelNew" and task.operator.file == "2_RMSNorm.py"
    assert task.base_code == base_code(problem) and "ModelNew = Model" in task.base_code
    assert task.harness.shapes == [{"batch_size": 4096, "features": 4096, "dtype": "float32"}]
    assert task.harness.cpu_shapes == [{"batch_size": 3, "features": 96, "dtype": "float32"}]
    assert task.harness.vary == {"batch_size": [5, 7]}
    inputs = task.harness.make_inputs(task.harness.cpu_shapes[0], "cpu", 5)
    assert inputs["arg0"].shape == (3, 96)
    again = task.harness.make_inputs(task.harness.cpu_shapes[0], "cpu", 5)
    assert inputs["arg0"].equal(again["arg0"])
    out = task.harness.reference(**inputs)
    assert out.shape == (3, 96)
