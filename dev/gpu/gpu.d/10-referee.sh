#!/usr/bin/env bash
# GPU step (H200): the referee on the demo kernels. For each demo operator it evaluates a hand-tuned
# honest candidate twice with full timing (speedup, bootstrap 95% CI, A/A control, and whether the
# two measurements of the same candidate agree within 1%), once with screen timing, and records the
# cost of each evaluation (seconds from start to verdict). Writes $OUT/referee.json, $OUT/referee.md.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
python3 - <<'PY'
import json
import os
import statistics
import time
from pathlib import Path

from kernelsmith.referee import Referee
from kernelsmith.onboard.task import load_task

out = Path(os.environ["OUT"])
cases = [("rms_norm", "tests/referee/honest/rms_norm__num_warps.py"),
         ("silu_and_mul", "tests/referee/honest/silu_and_mul__block_warps.py")]
cheats = {"rms_norm": "tests/referee/cheats/rms_norm__cache_by_pointer.py",
          "silu_and_mul": "tests/referee/cheats/silu_and_mul__cache_by_pointer.py"}
report, lines = {}, []
for op, cand in cases:
    task = load_task("targets/demo.yaml", op, checkout="examples/miniserve")
    code = Path(cand).read_text()
    with Referee(task, device="cuda", gpu=None, seed=7) as ref:
        t = time.monotonic()
        first = ref.evaluate(code, candidate_id=1, timing="full")   # includes worker start + compile
        second = ref.evaluate(code, candidate_id=2, timing="full")  # warm worker
        screen = ref.evaluate(code, candidate_id=3, timing="screen")
        cheat = ref.evaluate(Path(cheats[op]).read_text(), candidate_id=4, timing="screen")
        after = ref.evaluate(code, candidate_id=5, timing="screen")  # on a replacement worker
        total = time.monotonic() - t
        forked = ref._worker.forked
        ref_boot = ref.boot_phases
    for v in (first, second, screen, after):
        assert v.accepted, v.feedback()
    assert cheat.reason == "cached_result", cheat.feedback()
    agree = [b["candidate_ms"] / a["candidate_ms"] for a, b in zip(first.shapes, second.shapes)]
    report[op] = {"candidate": cand, "first": first.to_json(), "second": second.to_json(),
                  "screen": screen.to_json(), "cheat": cheat.to_json(), "after": after.to_json(),
                  "repeat_ratio": agree, "total_s": total, "forked_worker": forked}
    lines.append(f"### {op}: base vs `{cand}` on {first.device.get('name')} "
                 f"(driver {first.device.get('driver')}, torch {first.device.get('torch')}, "
                 f"triton {first.device.get('triton')})\n")
    lines.append("| shape | base ms | judge's base ms | cand ms | speedup | 95% CI | repeat cand ms | "
                 "repeat/first | A/A | host ms base→cand | % roofline |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for a, b, r in zip(first.shapes, second.shapes, agree):
        shape = ", ".join(f"{k}={v}" for k, v in a["shape"].items())
        lines.append(
            f"| {shape} | {a['baseline_ms']:.4f} | {(a.get('judge_base_ms') or 0):.4f} | "
            f"{a['candidate_ms']:.4f} | {a['speedup']:.2f}x | "
            f"[{a['ci95'][0]:.2f}, {a['ci95'][1]:.2f}] | {b['candidate_ms']:.4f} | {r:.4f} | "
            f"{a['aa_ratio']:.4f} | {a['base_host_ms']:.4f}→{a['host_ms']:.4f} | "
            f"{(a.get('pct_roofline') or 0):.0f}% |")
    lines.append(
        f"\ngeomean speedup (device time): first {first.geomean_speedup:.3f}x, repeat "
        f"{second.geomean_speedup:.3f}x; worst A/A {first.timing['aa_ratio']:.4f} / "
        f"{second.timing['aa_ratio']:.4f} (noisy: {first.timing['noisy']} / {second.timing['noisy']}); "
        f"max |repeat/first - 1| = {max(abs(x - 1) for x in agree) * 100:.2f}% "
        f"(median {statistics.median(abs(x - 1) for x in agree) * 100:.2f}%)\n"
        f"\nevaluation cost (start to verdict): first {first.eval_s:.1f} s (worker start, CUDA init, "
        f"compile), warm {second.eval_s:.1f} s full timing, {screen.eval_s:.1f} s screen timing; a "
        f"cheat rejected ({cheat.reason}) in {cheat.eval_s:.1f} s, the next candidate on the replacement "
        f"worker ({'forked by the zygote' if forked else 'spawned'}) {after.eval_s:.1f} s screen timing\n"
        f"\nwhere the time went (judge and runner, seconds): boot {ref_boot}, first {first.details.get('phase_s')}, "
        f"warm {second.details.get('phase_s')}\n")
(out / "referee.json").write_text(json.dumps(report, indent=2))
(out / "referee.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
