"""The shared regions between judge and runner (referee/link/shared_region.py), against real worker
processes on the CPU: candidate code in the runner can write the two buffers the judge shares, and
nothing else of the judge's; what it writes there reaches the judge only as its own reply (cloned
once, then judged), never the judge's input cache, reference or base outputs. The CUDA IPC path:
tests/referee/test_gpu_ipc.py."""

import pytest
from referee_helpers import demo_task, interpret_referee, untimed

from kernelsmith.referee import Referee

SEED = 1234

FIND_REGIONS = """
def _views():
    import gc
    for o in gc.get_objects():
        if type(o).__name__ == "PeerRegions":
            return [v for v in o.views.values() if v is not None]
    return []
"""

SCRIBBLE_AFTER = FIND_REGIONS + """
_base_rms_norm = rms_norm
def rms_norm(x, weight, eps=1e-6):
    out = _base_rms_norm(x, weight, eps)
    for v in _views():
        v.fill_(255)  # every byte the judge shares, request and reply region alike
    return out
"""

SCRIBBLE_RACING = FIND_REGIONS + """
import threading
_base_rms_norm = rms_norm
def _scribble():
    while True:
        for v in _views():
            v.fill_(255)
def rms_norm(x, weight, eps=1e-6):
    threading.Thread(target=_scribble, daemon=True).start()
    return _base_rms_norm(x, weight, eps)
"""

MAPS_PROBE = """
def rms_norm(x, weight, eps=1e-6):
    import os
    shared = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and ("memfd:" in parts[5] or parts[5].startswith("/dev/shm")):
                shared.add(parts[5] + "@" + parts[1])
    raise RuntimeError("MAPS " + " ".join(sorted(shared)))
"""


@pytest.fixture(scope="module")
def referee(tmp_path_factory):
    with interpret_referee(tmp_path_factory.mktemp("regions-env"), SEED) as ref:
        yield ref


def _base_code() -> str:
    task = demo_task("rms_norm")
    return (task.root / task.operator.file).read_text()


def test_tensors_cross_through_the_regions_not_message_files(referee):
    verdict = referee.evaluate(None, candidate_id=60, timing="none")
    assert verdict.accepted, verdict.feedback()
    chan = verdict.details["channel"]
    assert chan["shared_on"] == "cpu" and chan["shared_bytes"] > 0, chan
    assert chan["bytes"] < chan["shared_bytes"], chan  # the message files carry JSON only
    # The cached inputs crossed at the worker's start, as pinned copies: referenced, not copied.
    assert chan["pinned_bytes"] > 0, chan
    assert "regions_off" not in chan, chan


def test_writing_the_shared_regions_reaches_no_judge_memory(referee):
    """The candidate overwrites both regions after every call: its own reply still lands correct
    (the runner packs after the call), the judge's cached inputs and reference are unchanged."""
    verdict = referee.evaluate(_base_code() + SCRIBBLE_AFTER, candidate_id=61, timing="none")
    assert verdict.correct, verdict.feedback()
    assert not {"input_mutation", "protocol"} & set(verdict.violations), verdict.feedback()
    after = referee.evaluate(None, candidate_id=62, timing="none")
    assert after.accepted and after.violations == [], after.feedback()


def test_a_thread_racing_the_reply_region_is_judged_not_obeyed(referee):
    """A thread that keeps overwriting the regions: the judge judges its clone of whatever it got
    (garbage or not) and the thread is named; its cache is intact; the next evaluation is clean."""
    verdict = referee.evaluate(_base_code() + SCRIBBLE_RACING, candidate_id=63, timing="none")
    assert not verdict.accepted and "extra_threads" in verdict.violations, verdict.feedback()
    assert "input_mutation" not in verdict.violations, verdict.feedback()
    after = referee.evaluate(None, candidate_id=64, timing="none")
    assert after.accepted and after.violations == [], after.feedback()


def test_the_runner_maps_no_shared_memory_but_the_regions_pins_and_messages(referee):
    verdict = referee.evaluate(_base_code() + MAPS_PROBE, candidate_id=65, timing="none")
    text = verdict.error or ""
    assert "RuntimeError: MAPS" in text, verdict.feedback()
    maps = text[text.index("RuntimeError: MAPS"):].splitlines()[0].split()[2:]
    names = [m.split("@")[0] for m in maps]
    ours = ("/memfd:kernelsmith-region", "/memfd:kernelsmith-msg", "/memfd:kernelsmith-pin")
    assert names and all(n.startswith(ours) for n in names), maps
    assert any(n.startswith("/memfd:kernelsmith-region") for n in names), maps
    # The pinned cached inputs are mapped read-only (shared, over write-sealed files).
    pins = [m for m in maps if m.startswith("/memfd:kernelsmith-pin")]
    assert pins and all(m.split("@")[1].startswith("r-") for m in pins), maps


HOSTILE_REPLY = """
def rms_norm(x, weight, eps=1e-6):
    import fcntl, gc, json, os, socket
    chan = next(o for o in gc.get_objects() if type(o).__name__ == "Channel")
    outs = {"u": [{"t": [0, "float32", list(x.shape), list(x.stride()), 0]}]}
    body = json.dumps({"msg": {"ok": True}, "regions": {"from_peer": {"capacity": 1 << 40, "fd": 1}},
                       "values": {"d": {"outs": outs, "inputs": {"d": {}}}}}).encode()
    fd = os.memfd_create("x", os.MFD_ALLOW_SEALING)
    os.write(fd, body)
    os.ftruncate(fd, 1 << 16)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    fds = [fd, os.memfd_create("y")] if HOW == "extra_file" else [fd]
    at = {"outside": [1, 1 << 40, 4 * x.numel()], "negative": [1, -64, 16], "float": [1, 0.5, 16],
          "extra_file": [0, 4096, 16], "kind": [7, 0, 16]}[HOW]
    socket.send_fds(chan.sock, [json.dumps({"json": len(body), "blobs": [at]}).encode()], fds)
    return x.clone()
"""


@pytest.mark.parametrize("how", ["outside", "negative", "float", "extra_file", "kind"])
def test_a_hostile_region_reference_from_the_runner_is_a_protocol_rejection(referee, how):
    """Candidate code writes its own reply on the channel: bytes outside the judge's region, a
    descriptor of its own with an extra file, an unknown kind: `protocol`, and the judge goes on."""
    code = _base_code() + f"\nHOW = {how!r}\n" + HOSTILE_REPLY
    verdict = referee.evaluate(code, candidate_id=66, timing="none")
    assert not verdict.accepted and "protocol" in verdict.violations, verdict.feedback()
    why = {"outside": "outside the judge's shared region", "negative": "outside the judge's shared region",
           "float": "not three integers", "extra_file": "exactly one memory file", "kind": "bad layout"}[how]
    assert any(why in m for m in verdict.details["messages"]), verdict.details["messages"]
    after = referee.evaluate(None, candidate_id=67, timing="none")
    assert after.accepted and after.violations == [], after.feedback()


def test_without_regions_the_verdict_is_the_same(tmp_path):
    """shared_regions=False (every tensor in message files) judges a candidate as the regions do."""
    honest = (demo_task("rms_norm").root / demo_task("rms_norm").operator.file).read_text()
    verdicts = []
    for regions in (True, False):
        with Referee(demo_task("rms_norm"), device="interpret", seed=SEED, timeout_s=90,
                     workdir=tmp_path / str(regions), shared_regions=regions) as ref:
            verdicts.append(ref.evaluate(honest, candidate_id=68, timing="none"))
    with_regions, without = verdicts
    assert with_regions.accepted and without.accepted
    assert untimed(with_regions.shapes) == untimed(without.shapes)
    assert with_regions.details["channel"]["shared_on"] == "cpu"
    assert without.details["channel"]["shared_on"] is None and without.details["channel"]["shared_bytes"] == 0


SCRIBBLE_PINS = """
_base_rms_norm = rms_norm
def rms_norm(x, weight, eps=1e-6):
    import gc
    for o in gc.get_objects():
        if type(o).__name__ == "PeerRegions":
            for v in o.pins.values():
                v.fill_(0)  # the judge's pinned copies of its cached inputs: mapped read-only
    return _base_rms_norm(x, weight, eps)
"""


def test_the_pinned_inputs_cannot_be_written_from_the_runner(referee):
    """Writing the runner's mapping of a pinned input faults the runner (a crash verdict); the next
    worker's candidates get the cached inputs intact."""
    verdict = referee.evaluate(_base_code() + SCRIBBLE_PINS, candidate_id=69, timing="none")
    assert not verdict.accepted and "crash" in verdict.violations, verdict.feedback()
    assert "SIGSEGV" in (verdict.error or "") + " ".join(verdict.details["messages"]), verdict.feedback()
    after = referee.evaluate(None, candidate_id=70, timing="none")
    assert after.accepted and after.violations == [], after.feedback()
