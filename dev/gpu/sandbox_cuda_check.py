"""GPU check for the sandbox's seccomp filter and memory cap: CUDA, cuBLAS and a Triton kernel
inside the candidate profile, and each step's VmData (what RLIMIT_DATA counts). Run on the GPU
machine from the repository root: `python dev/gpu/sandbox_cuda_check.py` (each run must end "ok").
The same BPF program and cap were checked there standalone; this runs them through launch.py."""

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

INSIDE = r'''
import re, socket
def vm():
    t = open("/proc/self/status").read()
    return {k: int(re.search(k + r":\s+(\d+) kB", t).group(1)) >> 10 for k in ("VmData", "VmRSS")}
print("start", vm())
import torch
print("torch", torch.__version__, vm())
x = torch.zeros(1, device="cuda")
print("cuda context", vm())
import triton, triton.language as tl
@triton.jit
def k(X, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(X + i, tl.load(X + i) + 1)
y = torch.zeros(1024, device="cuda"); k[(1,)](y, 1024); torch.cuda.synchronize()
print("triton kernel", y[0].item(), vm())
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16); (a @ a).sum().item()
print("cublas", vm())
z = torch.empty(1 << 28, device="cuda").cpu()
print("1 GiB copied to host", vm()); del z
p = torch.empty(1 << 26, dtype=torch.float32).pin_memory()
print("256 MiB pinned", vm()); del p
try:
    socket.socket(socket.AF_UNIX); print("AF_UNIX socket: made")
except OSError as e:
    print("AF_UNIX socket:", e)
print("ok")
'''


def main() -> None:
    from kernelsmith import sandbox

    print("probe:", sandbox.probe())
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "ks-gpu-check"
    work.mkdir(parents=True, exist_ok=True)
    for cap in (None, "4G"):
        env = dict(os.environ)
        if cap:
            env["KERNELSMITH_CANDIDATE_MEMORY"] = cap
            os.environ["KERNELSMITH_CANDIDATE_MEMORY"] = cap
        script = work / "inside.py"  # a file: @triton.jit reads its function's source from one
        script.write_text(INSIDE)
        cmd, env = sandbox.wrap([sys.executable, str(script)], "candidate", env=env, writable=[work])
        proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=300)
        print(f"--- cap {cap or 'default'}: exit {proc.returncode}")
        print(proc.stdout.strip())
        print(re.sub(r"\n+", "\n", proc.stderr.strip())[-1500:])


if __name__ == "__main__":
    main()
