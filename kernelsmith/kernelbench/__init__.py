"""KernelBench-format tasks: problem files as kernelsmith Tasks, and KernelBench's metrics."""

from kernelsmith.kernelbench.metrics import TaskScore, fast_p, geomean_speedup, summarize
from kernelsmith.kernelbench.problem import Problem, list_problems, read_problem

__all__ = ["Problem", "TaskScore", "fast_p", "geomean_speedup", "list_problems", "read_problem", "summarize"]
