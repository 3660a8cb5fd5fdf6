"""Fork servers started ahead of the referees that will use them.

A worker's boot begins with its fork server (zygote.py) importing torch and Triton: about 4 s of
the H200 host's 7.5 s boot, 1.6 s of 2.5 s on a CPU machine. A search knows its device and GPUs
seconds before it builds its Referees (the harness facts child and the task are still loading), so
`warm` starts one fork server per GPU then, each in a referee folder of its own, and the Referee made
later for that device and GPU without a work folder of its own adopts both (`take`). The workers do
not change: the same environment, sandbox and folder that Referee would have given its own fork
server. `discard` closes what no Referee took (a run that failed first, a stand-in referee).
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path

from kernelsmith.referee.proc.process import Zygote
from kernelsmith.sandbox import hide_environ, scrubbed_env
from kernelsmith.sandbox.spawn import device_env
from kernelsmith.scratch import ScratchDir

_LOCK = threading.Lock()
_WARM: dict[tuple[str, int | None], tuple[ScratchDir, Zygote]] = {}


def referee_folders(root: Path) -> tuple[Path, Path, Path]:
    """(work, sources, logs) under a referee's folder `root`, made now by the trusted side.

    Only `work` is writable inside the sandbox; candidate sources and logs go to the other two,
    which candidate code cannot write, so nothing it plants there can redirect a later write.
    """
    from kernelsmith.safefs import open_dir

    folders = tuple(Path(root) / name for name in ("work", "sources", "logs"))
    for folder in folders:
        os.close(open_dir(folder, create=True))
    return folders


def worker_env(device: str, gpu: int | None) -> dict[str, str]:
    """The environment of a referee's fork server and workers on `device` (and GPU `gpu`)."""
    return device_env(scrubbed_env(), device, gpu)


def warm(device: str, gpus: list[int | None]) -> None:
    """Start a fork server for each of `gpus` on `device` now (not waiting for its imports)."""
    hide_environ()  # as a Referee does before it starts one
    with _LOCK:
        if not _WARM:
            atexit.register(discard)
        for gpu in gpus:
            if (device, gpu) in _WARM:
                continue
            tmp = ScratchDir("kernelsmith-referee-", owned=True)
            work, _, logs = referee_folders(Path(tmp.name).resolve())
            _WARM[(device, gpu)] = (tmp, Zygote(worker_env(device, gpu), work, log=logs / "zygote.log"))


def take(device: str, gpu: int | None) -> tuple[ScratchDir, Zygote] | None:
    """The warm (work folder, fork server) for `device` and `gpu`, now the caller's; None if none."""
    with _LOCK:
        return _WARM.pop((device, gpu), None)


def waiting() -> int:
    """How many warm fork servers no Referee has taken."""
    with _LOCK:
        return len(_WARM)


def discard() -> None:
    """Close every warm fork server no Referee took, and remove its work folder."""
    with _LOCK:
        left = list(_WARM.values())
        _WARM.clear()
    for tmp, zygote in left:
        zygote.close()
        tmp.remove()
