"""KernelBench's metrics: correctness rate, fast_p over ALL tasks, geomean over correct ones."""

import math

import pytest

from kernelsmith.kernelbench.metrics import TaskScore, fast_p, geomean_speedup, summarize


def _scores():
    return [
        TaskScore("a", True, 2.0),
        TaskScore("b", True, 0.5),      # correct but slower: counts in the mean as 0.5
        TaskScore("c", True, 1.2),      # exactly p=1.2: not "greater than p"
        TaskScore("d", False, None, "incorrect"),
        TaskScore("e", False, None, "library_fallback"),
    ]


def test_fast_p_divides_by_all_tasks():
    scores = _scores()
    assert fast_p(scores, 1.0) == 2 / 5
    assert fast_p(scores, 1.2) == 1 / 5
    assert fast_p(scores, 0.0) == 3 / 5  # fast_0 is the correctness rate


def test_geomean_over_correct_tasks_keeps_slowdowns():
    assert geomean_speedup(_scores()) == pytest.approx(math.exp((math.log(2) + math.log(0.5)
                                                                 + math.log(1.2)) / 3))
    assert geomean_speedup([TaskScore("x", False)]) == 0.0


def test_summary_and_untimed():
    m = summarize(_scores())
    assert m["correctness_rate"] == 3 / 5 and m["correct"] == 3 and m["tasks"] == 5
    assert m["fast_p"] == {"1.0": 2 / 5, "1.2": 1 / 5} and m["timed"]
    untimed = summarize([TaskScore("a", True, None), TaskScore("b", False)])
    assert untimed["correctness_rate"] == 0.5
    assert untimed["fast_p"] == {"1.0": None, "1.2": None} and untimed["mean_speedup"] is None
    assert not untimed["timed"]
