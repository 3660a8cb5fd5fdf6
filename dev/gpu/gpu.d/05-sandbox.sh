#!/usr/bin/env bash
# GPU step (H200): can this machine build the sandbox (user, mount, PID and network namespaces),
# does CUDA work inside it, and what does it cost per process and per referee worker?
# Writes $OUT/sandbox.txt and $OUT/sandbox-overhead.json.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
{
  python3 -m kernelsmith.sandbox
  python3 - <<'PY'
import os, subprocess, sys, tempfile
from kernelsmith import sandbox
code = ("import torch; x = torch.ones(1 << 20, device='cuda'); print('cuda inside the sandbox:', "
        "torch.cuda.get_device_name(), float(x.sum()), 'pids visible:', len([p for p in __import__('os')"
        ".listdir('/proc') if p.isdigit()]))")
with tempfile.TemporaryDirectory() as tmp:
    cmd, env = sandbox.wrap([sys.executable, "-c", code], "candidate", env=dict(os.environ), writable=[tmp])
    print(subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300).stdout.strip() or "FAILED")
PY
} 2>&1 | tee "$OUT/sandbox.txt"
python3 dev/probes/sandbox_overhead.py --device cuda --repeat 5 | tee "$OUT/sandbox-overhead.json"
