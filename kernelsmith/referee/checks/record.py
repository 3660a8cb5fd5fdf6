"""What watched code did (a `Record`) and the rules that compare a candidate's record with the base's.

integrity.Monitor fills Records inside the worker; `violations_vs_base` turns the difference between
the candidate's and the base's into the verdict's integrity violations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# aten ops that move, view or allocate memory without computing anything: never a "fallback".
_LAYOUT_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "fill", "fill_", "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias",
    "as_strided", "expand", "t", "transpose", "permute", "squeeze", "unsqueeze", "select", "slice",
    "detach", "alias", "lift_fresh", "split", "split_with_sizes", "chunk", "unbind", "narrow",
    "contiguous", "clone", "copy_", "copy", "resize_", "set_", "view_as", "expand_as", "flatten",
    "unflatten", "_local_scalar_dense", "is_contiguous", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "size", "stride", "record_stream", "_to_copy_noop", "is_same_size",
}


def op_name(func) -> str:
    """'aten.silu.default' -> 'silu'."""
    packet = getattr(func, "overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(func, "__name__", str(func))
    return name.split(".")[0]


@dataclass
class Record:
    """What watched code did: launches, torch ops, and audited events."""

    launches: int = 0
    ops: set = field(default_factory=set)
    files: set = field(default_factory=set)
    writes: set = field(default_factory=set)
    network: set = field(default_factory=set)
    processes: set = field(default_factory=set)
    threads: int = 0
    introspection: set = field(default_factory=set)
    tamper: set = field(default_factory=set)
    streams: set = field(default_factory=set)
    settings: set = field(default_factory=set)  # process-global settings changed ("name: old -> new")
    reference_calls: int = 0

    def to_json(self) -> dict:
        """Plain data (sets as sorted lists)."""
        return {k: sorted(v) if isinstance(v, set) else v for k, v in vars(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> Record:
        """Rebuild a record from `to_json` output."""
        return cls(**{k: set(v) if isinstance(v, list) else v for k, v in data.items()})

    def merge(self, other: Record) -> None:
        """Add another record's observations to this one."""
        self.launches += other.launches
        self.threads += other.threads
        self.reference_calls += other.reference_calls
        for name in ("ops", "files", "writes", "network", "processes", "introspection", "tamper", "streams",
                     "settings"):
            getattr(self, name).update(getattr(other, name))



def compute_ops(ops: set[str]) -> set[str]:
    """The torch ops in `ops` that compute something (layout and allocation ops removed)."""
    return {o for o in ops if o not in _LAYOUT_OPS and o.rstrip("_") not in _LAYOUT_OPS}


def violations_vs_base(cand: Record, base: Record, library_base: bool = False,
                       complete: bool = True) -> list[tuple[str, str]]:
    """(violation, message) pairs for what the candidate did beyond what the base did.

    `complete` is False when the evaluation stopped early: then a missing launch proves nothing.

    `library_base`: the base is a pure-library reference (a KernelBench task's PyTorch Model),
    so every torch compute op of the candidate is a fallback and a Triton launch is required.
    """
    out: list[tuple[str, str]] = []
    if cand.reference_calls:
        out.append(("reference_call", "the harness's reference was called by the candidate"))
    intro = cand.introspection - base.introspection
    if intro:
        out.append(("reference_call", f"inspected the referee's frames/objects ({', '.join(sorted(intro))})"))
    tamper = cand.tamper - base.tamper
    if tamper:
        out.append(("monkeypatch", f"patched or traced the runtime: {', '.join(sorted(tamper)[:5])}"))
    changed = cand.settings - base.settings
    if changed:
        out.append(("monkeypatch", "changed process-global settings that outlive the call (they would "
                                   f"reach later candidates and the base): {'; '.join(sorted(changed)[:5])}"))
    if cand.network - base.network:
        out.append(("network_access", f"network calls: {', '.join(sorted(cand.network - base.network))}"))
    files = (cand.files - base.files) | (cand.writes - base.writes)
    if files:
        out.append(("file_access", f"file access beyond the base: {', '.join(sorted(files)[:4])}"))
    if cand.processes - base.processes:
        out.append(("extra_threads", f"started processes: {', '.join(sorted(cand.processes))}"))
    if cand.threads and not base.threads:
        out.append(("extra_threads", f"started {cand.threads} thread(s)"))
    if cand.streams - base.streams:
        out.append(("extra_streams", "work issued on a CUDA stream other than the current one"))
    extra_ops = compute_ops(cand.ops) - (set() if library_base else compute_ops(base.ops))
    if extra_ops:
        names = ", ".join(sorted(extra_ops))
        out.append(("library_fallback", f"torch compute ops the base does not use: {names}"))
    if complete and (base.launches or library_base) and not cand.launches:
        out.append(("no_kernel_launch", "no Triton kernel was launched (the base launches "
                                        f"{base.launches})"))
    return out
