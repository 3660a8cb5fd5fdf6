"""Where each GPU's time went in a search (result.json `evaluator`), kept by evaluator.py.

Per GPU: booting its worker, waiting for a candidate's CPU compilation, in the referee, from its
first job to its last, the first verdict on a candidate (`first_candidate_s`, from the evaluator's
start; not the base), and idle time between jobs with nothing queued (the loop's window had no
candidate for it) or with only candidates still compiling queued.
"""

from __future__ import annotations


def new_stats(gpus: list) -> list[dict]:
    """Empty accounts, one per GPU (the evaluator's threads fill them, each its own)."""
    return [{"gpu": g, "boot_s": 0.0, "compile_wait_s": 0.0, "job_s": 0.0, "jobs": 0,
             "first": None, "last": None, "first_candidate_s": None,
             "idle_nothing_queued_s": 0.0, "idle_builds_only_s": 0.0} for g in gpus]


def summary(stats: list[dict], referees: list) -> list[dict]:
    """Per GPU: boot, jobs, waits for CPU compilation, time in the referee, the share of its
    first-to-last-job span spent in the referee (what the GPU side was busy with), idle time."""
    out = []
    for st, ref in zip(stats, referees, strict=True):
        span = (st["last"] - st["first"]) if st["first"] and st["last"] else 0.0
        referee = st["job_s"] - st["compile_wait_s"]
        # A Ray worker (ray_pool.py): where it ran, and whether its node died.
        where = {"worker": st["gpu"], "node": ref.node, "node_ip": ref.ip, "gpu": ref.gpu,
                 "lost": bool(st.get("lost"))} if hasattr(ref, "node") else {}
        out.append({"gpu": st["gpu"], "jobs": st["jobs"], "boot_s": st["boot_s"], **where,
                    "boot_phases": getattr(ref, "boot_phases", None),
                    # The last worker's oracle at boot: autotuned kernels, (kernel, key) choices it
                    # was given and made (referee/proc/autotune_share.py); null without a worker.
                    "autotune": getattr(ref, "last_autotune", None) or None,
                    "compile_wait_s": round(st["compile_wait_s"], 2), "referee_s": round(referee, 2),
                    "span_s": round(span, 2), "busy": round(referee / span, 3) if span else None,
                    "idle_nothing_queued_s": round(st["idle_nothing_queued_s"], 2),
                    "idle_builds_only_s": round(st["idle_builds_only_s"], 2),
                    "first_candidate_s": st["first_candidate_s"]})
    return out
