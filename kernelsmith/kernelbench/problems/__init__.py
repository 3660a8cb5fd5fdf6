"""Small KernelBench-format problems shipped with kernelsmith (tests, the GPU check, examples).

`solutions/` holds a hand-written honest Triton solution per problem, named like the problem,
which is the layout `kernelsmith bench TASKS_DIR --solutions DIR` reads.
"""

from pathlib import Path

PROBLEMS_DIR = Path(__file__).resolve().parent
SOLUTIONS_DIR = PROBLEMS_DIR / "solutions"
