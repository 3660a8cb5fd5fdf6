"""Training records: SFT chat samples and RL prompts, built from kept steps of one run."""

from __future__ import annotations

from kernelsmith.export.steps import Step
from kernelsmith.search.edits import format_edits, make_edits
from kernelsmith.search.prompt import build_messages

REWARD_DEFINITION = (
    "reward = geomean_speedup(answer) / geomean_speedup(parent): the answer's code is evaluated by "
    "the kernelsmith referee on the task's shapes against the unmodified base (speedups are "
    "base time / candidate time, geometric mean over shapes), and the reward is its speedup over "
    "the parent's. A rejected answer (malformed edit, crash, incorrect on any shape, fresh shapes "
    "included, or any integrity violation) gets reward 0. Without timing (no GPU) no reward exists."
)


def assistant_text(step: Step) -> str:
    """The answer that produced the child: the stored model answer or SEARCH/REPLACE block."""
    response = step.child.get("response")
    if response and response.strip():
        return response
    # Rows without a stored answer: the smallest SEARCH/REPLACE edits from parent to child.
    return format_edits(make_edits(step.parent["code"], step.child["code"]))


def device_hint(task, device: str | None) -> str:
    """The llm mutator's own device wording for a run on `device` (taken from the mutator itself)."""
    from kernelsmith.search.mutators.llm import LLMMutator

    return LLMMutator(task, None, device=device or "cuda").device_hint


def prompt_messages(task, step: Step, device: str | None) -> list[dict]:
    """System and user messages exactly as the llm mutator builds them for the step's parent."""
    return build_messages(task, step.parent, step.inspirations, step.parent.get("feedback"),
                          device_hint=device_hint(task, device))


def step_meta(step: Step, source: dict) -> dict:
    """Where a record came from and what the step achieved."""
    return {
        "source": source,
        "kind": step.kind,
        "parent_id": step.parent["id"],
        "child_id": step.child["id"],
        "mutator": step.child.get("mutator"),
        "parent_speedup": step.parent.get("speedup") if step.parent.get("mutator") != "base" else 1.0,
        "child_speedup": step.child.get("speedup"),
        "gain": step.gain,
    }


def sft_record(task, step: Step, source: dict) -> dict:
    """One chat sample: system, user (the parent's prompt), assistant (the edit)."""
    messages = prompt_messages(task, step, source.get("device"))
    messages.append({"role": "assistant", "content": assistant_text(step)})
    return {"messages": messages, "meta": step_meta(step, source)}


def compared(harness) -> dict | None:
    """What the referee compares of a call: the inputs OUTPUTS names, else the positions of the tuple
    the entry returns (every tensor it returns when None), and whether the harness calls the entry
    itself (`call(entry, inputs)`, whose return value is what is compared)."""
    if harness is None:
        return None
    return {"inputs": harness.outputs, "positions": harness.positions, "call": bool(harness.call)}


def rl_record(task, step: Step, source: dict) -> dict:
    """One RL prompt: the parent, the task and the reward definition, with the observed best answer."""
    op = task.operator
    harness = task.harness
    return {
        "prompt": prompt_messages(task, step, source.get("device")),
        "task": {
            "target": str(task.target.path), "repo": task.target.repo, "op": op.name, "file": op.file,
            "entry": op.entry, "base_sha": task.base_sha,
            "shapes": list(harness.shapes) if harness is not None else [],
            "harness": str(op.harness), "variant": op.variant,
            "compared": compared(harness),
        },
        "parent": {
            "id": step.parent["id"], "code": step.parent["code"],
            "speedup": step.parent.get("speedup") if step.parent.get("mutator") != "base" else 1.0,
            "timed": step.parent.get("mutator") == "base" or step.parent.get("speedup") is not None,
        },
        "reward": {"definition": REWARD_DEFINITION, "device": source.get("device")},
        "reference_answer": {"content": assistant_text(step), "gain": step.gain},
        "meta": step_meta(step, source),
    }
