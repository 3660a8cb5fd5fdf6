"""Hold device memory so a larger card acts as a smaller one for the processes started after it.

    python3 dev/gpu/ballast.py --card-mib 81559 &   # an H100 80 GB's total, on an H200
    # wait for the file it names with --ready, run the work, then kill it

Allocates (the device's total - card_mib) MiB, plus nothing where the card is that size or smaller,
writes what it holds to --ready, and sleeps until killed: cudaMemGetInfo in every other process then
reports what an H100 would (a little less: this process's own context, about 0.5 GiB, is on top).
"""

import argparse
import signal
import time

import torch


def main():
    """Allocate the difference and wait."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--card-mib", type=int, default=81559)
    ap.add_argument("--ready", required=True)
    args = ap.parse_args()
    free, total = torch.cuda.mem_get_info()
    extra = max(0, total - args.card_mib * (1 << 20))
    held = torch.empty(extra, dtype=torch.uint8, device="cuda") if extra else None
    torch.cuda.synchronize()
    free_after, _ = torch.cuda.mem_get_info()
    with open(args.ready, "w") as f:
        held_gib = (held.numel() if held is not None else 0) / (1 << 30)
        f.write(f"ballast {held_gib:.2f} GiB on a {total / (1 << 30):.2f} GiB card; "
                f"free before {free / (1 << 30):.2f} GiB, after {free_after / (1 << 30):.2f} GiB\n")
    signal.signal(signal.SIGTERM, lambda *_: exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
