"""CUDA IPC between judge and runner (referee/link/shared_region.py), on a CUDA device.

UNVALIDATED until the H200 runs them: written without a GPU, against the torch API that 2.11 and
2.13 share (torch.cuda.MemPool, torch.cuda.use_mem_pool, UntypedStorage._share_cuda_ and
_new_shared_cuda, torch.cuda.memory_snapshot). Run: `pytest -m gpu tests/referee/test_gpu_ipc.py`.
"""

import pytest
import torch
from referee_helpers import CORPUS, demo_task, untimed

from kernelsmith.referee import Referee

pytestmark = pytest.mark.gpu

MB = 1 << 20
BIG = 470 * MB  # the demo silu_and_mul's largest shape: x is 8192 x 28672 fp16


@pytest.fixture(scope="module")
def silu_verdicts(tmp_path_factory):
    """The base (correctness only) judged with regions and without; an honest rewrite fully timed
    with regions."""
    honest = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    out = {}
    for regions in (True, False):
        work = tmp_path_factory.mktemp(f"ipc-{regions}")
        with Referee(demo_task("silu_and_mul"), device="cuda", seed=99, workdir=work, timeout_s=600,
                     shared_regions=regions) as ref:
            out[regions] = ref.evaluate(None, candidate_id=1, timing="none")
            if regions:
                out["timed"] = ref.evaluate(honest, candidate_id=2, timing="full")
    return out


def test_large_tensors_stay_on_the_device(silu_verdicts):
    for v in (silu_verdicts[True], silu_verdicts["timed"]):
        assert v.accepted, v.feedback()
        chan = v.details["channel"]
        assert chan["shared_on"] == "cuda" and "regions_off" not in chan, chan
        assert chan["bytes"] < 4 * MB, chan  # only JSON crosses host memory
        assert chan["shared_bytes"] > BIG, chan  # the 470 MB inputs did cross, through the regions
        assert chan["pinned_bytes"] == 0, chan  # no pins on CUDA (session.py says why)
        assert v.details["phase_s"]["correctness"] < 5.0, v.details["phase_s"]  # 17.7 s through the host


def test_the_verdict_is_the_one_without_regions(silu_verdicts):
    with_regions, without = silu_verdicts[True], silu_verdicts[False]
    assert without.accepted and without.details["channel"]["shared_on"] is None
    assert without.details["channel"]["bytes"] > BIG  # the old path: everything through host memory
    assert untimed(with_regions.shapes) == untimed(without.shapes)
    assert with_regions.violations == without.violations == []
    assert with_regions.correct == without.correct


def _segments_holding(ptrs: list[int]) -> list[dict]:
    """The allocator segments (memory_snapshot) that contain any of `ptrs`, with block addresses."""
    found = []
    for seg in torch.cuda.memory_snapshot():
        start, size = seg["address"], seg["total_size"]
        if any(start <= p < start + size for p in ptrs):
            at, blocks = start, []
            for b in seg["blocks"]:
                blocks.append({**b, "at": b.get("address", at)})
                at += b["size"]
            found.append({**seg, "blocks": blocks})
    return found


def test_a_shared_segment_holds_nothing_but_the_regions():
    """What the runner maps by IPC handle is a whole allocator segment: the regions' segments (a
    private pool) must hold no other tensor of the judge, before or after they grow."""
    from kernelsmith.referee.link.shared_region import JudgeRegions, cuda_sharing_available

    assert cuda_sharing_available()
    before = [torch.randn(n, device="cuda") for n in (1000, 3 * MB, 40 * MB)]  # the default pool
    regions = JudgeRegions("cuda")
    regions.ensure("to_peer", 3 * MB)
    regions.ensure("from_peer", 100)
    middle = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (512, 5 * MB, 60 * MB)]
    regions.ensure("to_peer", 50 * MB)  # grows: a new buffer in a pool of its own, the old one closed
    regions.pins.budget = 1 << 30
    cached = torch.randn(3 * MB, device="cuda")  # a cached input, pinned: its copy joins the pool
    raw = torch.empty(0, dtype=torch.uint8, device="cuda").set_(cached.untyped_storage())
    pin = regions.pins.make(cached, raw)
    after = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (512, 2 * MB, 30 * MB)]
    ours = {r.buf.data_ptr() for r in regions.regions.values()} | {pin.buf.data_ptr()}
    for r in regions.regions.values():
        r.descriptor()  # sharing does not move or widen anything
    pin.descriptor()
    assert pin.intact(raw) and regions.pins.tampered() == 0
    pin.buf[:8].fill_(7)  # what a runner could do through IPC: noticed and undone
    assert regions.pins.tampered() == 1 and pin.intact(raw)
    segs = _segments_holding(sorted(ours))
    assert segs
    others = [t.data_ptr() for t in before + middle + after + [cached]]
    for seg in segs:
        live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        assert {b["at"] for b in live} <= ours, (seg["address"], live)
        assert not any(seg["address"] <= p < seg["address"] + seg["total_size"] for p in others)
    regions.close()


def test_a_region_outgrown_or_dropped_gives_its_device_memory_back():
    """Each region lives in a pool of its own that goes with it: torch's empty_cache returns no live
    pool's blocks, so regions sharing one pool kept every buffer they outgrew (about 5 GB of an
    80 GB H100 with LMDeploy fill_kv_cache at batch 512)."""
    from kernelsmith.referee.link.shared_region import JudgeRegions

    regions = JudgeRegions("cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    regions.ensure("to_peer", 256 * MB)
    regions.ensure("to_peer", 512 * MB)  # grows: the 256 MB buffer is closed
    regions.ensure("from_peer", 128 * MB)
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() - before == 640 * MB
    assert regions.drop() == 640 * MB
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == before
    regions.ensure("to_peer", 64 * MB)  # made again at the next message's size
    assert regions.region_bytes() == 64 * MB
    regions.close()


def test_a_hostile_reply_on_cuda_is_a_protocol_rejection(tmp_path):
    """The CPU tests' hostile reply (test_judge_regions.py), against the CUDA regions."""
    from test_judge_regions import HOSTILE_REPLY, SCRIBBLE_AFTER, SCRIBBLE_PINS

    task = demo_task("rms_norm")
    base = (task.root / task.operator.file).read_text()
    with Referee(task, device="cuda", seed=99, workdir=tmp_path) as ref:
        for i, how in enumerate(["outside", "negative"]):
            v = ref.evaluate(base + f"\nHOW = {how!r}\n" + HOSTILE_REPLY, candidate_id=10 + i, timing="none")
            assert not v.accepted and "protocol" in v.violations, v.feedback()
            assert any("outside the judge's shared region" in m for m in v.details["messages"]), v.feedback()
        v = ref.evaluate(base + SCRIBBLE_AFTER, candidate_id=20, timing="none")
        assert v.correct and "input_mutation" not in v.violations, v.feedback()
        # Pins are off on CUDA: a candidate looking for them finds none and is judged as usual.
        v = ref.evaluate(base + SCRIBBLE_PINS, candidate_id=22, timing="none")
        assert v.correct and "protocol" not in v.violations, v.feedback()
        v = ref.evaluate(None, candidate_id=21, timing="full")
        assert v.accepted and v.violations == [], v.feedback()
        assert v.details["channel"]["shared_on"] == "cuda", v.details["channel"]
