"""Read a ``torch.cuda.memory._snapshot()`` pickle (``torch.cuda.memory._dump_snapshot``) and summarise it:
what was alive at the peak, by category, and how fragmented the segments are.

Schema (torch/cuda/memory.py ``_snapshot`` docstring, torch 2.13): ``{"segments": [Segment], "device_traces":
[[TraceEntry]]}``; a Segment is ``{address, total_size, stream, segment_type, allocated_size, active_size,
blocks: [Block]}``, a Block ``{size, requested_size, address, state: "active_allocated" | "active_awaiting_free" |
"inactive", frames: [Frame]}``, a Frame ``{filename, line, name}`` (innermost first), a TraceEntry ``{action:
"alloc" | "free_requested" | "free_completed" | "segment_alloc" | "segment_free" | "oom" | "snapshot", addr, size,
frames, stream, device_free}``. Older snapshots give a block's frames under ``history`` and no block address
(torch/cuda/_memory_viz.py ``_block_extra_legacy``); a bare list of segments is accepted as memory_viz does.

The pickle is read with an unpickler that refuses every global: a snapshot holds only dicts, lists, tuples,
strings and numbers, so any class or function reference is refused with one line (no code runs).

* **Peak.** With trace entries, the allocated bytes are replayed backwards from the snapshot's state (undoing
  ``alloc`` and ``free_requested``, which is when ``memory_allocated`` changes, CUDACachingAllocator.cpp ``free``)
  and the blocks alive at the largest total are the peak's; without them the snapshot's own active blocks are.
* **Attribution.** Each block's frames, innermost first, name its category through the phase of its first
  deciding frame (:func:`trainmem.doctor.frames.frame_phase`): model loading → parameters; ``torch/optim``
  ``_init_group`` (state creation) → optimizer states, other optimizer frames → temporaries; the autograd engine →
  gradients (a C++ ``AccumulateGrad`` frame makes it certain; with Python-only stacks the gradients of
  activations made during backward are counted here too); forward and loss → activations; ``torch/utils/data`` →
  data loader; no deciding frame → other. Frames under an evaluation function mark the block as evaluation.
* **Fragmentation.** Reserved = Σ segment sizes; the inactive bytes of segments that also hold a live block are
  *stranded* (``empty_cache`` cannot return them, a request larger than the largest inactive block cannot use
  them); fully free segments would be released on an OOM retry.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field

from trainmem.doctor.frames import Frame, frame_phase, is_eval_func
from trainmem.errors import ConfigError
from trainmem.units import round_up_bytes

__all__ = ["SnapshotSummary", "load_snapshot", "summarise_snapshot", "block_category", "SafeUnpickler"]

CATEGORIES = ("parameters", "gradients", "optimizer_states", "activations", "temporaries", "dataloader", "other")
_OPT_STATE_FUNCS = ("_init_group", "_init_state", "initialize_optimizer_states", "_create_fp32_partitions",
                    "__init__", "_init")


class SafeUnpickler(pickle.Unpickler):
    """Unpickles plain data only: every global (class, function) is refused."""

    def find_class(self, module: str, name: str):  # noqa: ANN201
        raise pickle.UnpicklingError(f"{module}.{name}"[:120])

    def persistent_load(self, pid):  # noqa: ANN001, ANN201
        raise pickle.UnpicklingError("persistent id")


def load_snapshot(data: bytes, name: str) -> dict:
    """The snapshot dict of pickle ``data``; ConfigError (one line) for anything else."""
    if data[:1] != b"\x80" and data[:1] not in (b"(", b"}", b"]"):
        raise ConfigError(f"--snapshot {name}: not a pickle (expected torch.cuda.memory._dump_snapshot output)")
    try:
        obj = SafeUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        msg = str(e)
        if "." in msg and " " not in msg:
            raise ConfigError(f"--snapshot {name}: the pickle holds a Python object ({msg}), not a memory "
                              "snapshot; refused (only plain data is read)") from None
        raise ConfigError(f"--snapshot {name}: not a readable pickle ({msg[:80]})") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, OverflowError, MemoryError, AttributeError):
        raise ConfigError(f"--snapshot {name}: a truncated or corrupt pickle") from None
    if isinstance(obj, list):
        obj = {"segments": obj, "device_traces": []}
    if not isinstance(obj, dict) or not isinstance(obj.get("segments"), list):
        raise ConfigError(f"--snapshot {name}: not a torch.cuda.memory._snapshot() dict (no segments list)")
    for seg in obj["segments"]:
        if not (isinstance(seg, dict) and isinstance(seg.get("total_size"), int) and isinstance(seg.get("blocks"), list)
                and all(isinstance(b, dict) and isinstance(b.get("size"), int) for b in seg["blocks"])):
            raise ConfigError(f"--snapshot {name}: a segment without total_size and blocks (not a memory snapshot)")
    return obj


def _frames(raw: object) -> list[Frame]:
    out = []
    if isinstance(raw, list):
        for f in raw:
            if isinstance(f, dict):
                out.append(Frame(str(f.get("filename", "")), int(f.get("line") or 0), str(f.get("name", ""))))
    return out


def block_category(frames: list[Frame]) -> tuple[str, bool]:
    """(category, under an evaluation function) of a block allocated with ``frames`` (innermost first)."""
    in_eval = any(is_eval_func(f.func) for f in frames)
    if any("AccumulateGrad" in f.func or "accumulate_grad" in f.func for f in frames):
        return "gradients", in_eval
    for f in frames:
        if not f.file.endswith(".py"):
            continue
        ph = frame_phase(f)
        if ph is None:
            continue
        if ph == "optimizer_step":
            fn = f.func.rsplit(".", 1)[-1]
            return ("optimizer_states" if fn in _OPT_STATE_FUNCS else "temporaries"), in_eval
        return {"model_load": "parameters", "forward": "activations", "loss": "activations",
                "backward": "gradients", "dataloader": "dataloader"}[ph], in_eval
    return "other", in_eval


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    reserved_bytes: int
    allocated_bytes: int
    """Blocks ``active_allocated`` at the snapshot."""
    inactive_bytes: int
    stranded_bytes: int
    """Inactive bytes in segments that also hold live blocks."""
    largest_inactive_bytes: int
    n_segments: int
    expandable: bool
    peak_bytes: int
    peak_source: str
    """``trace`` (replayed) or ``segments`` (the snapshot's own state)."""
    by_category: dict[str, int] = field(default_factory=dict)
    """Bytes alive at the peak per category (:data:`CATEGORIES`)."""
    eval_activation_bytes: int = 0
    frames_present: bool = False
    oom_request_bytes: int | None = None
    oom_device_free_bytes: int | None = None


def _blocks(snap: dict) -> list[tuple[int, dict, dict]]:
    """(address, block, segment) of every block; addresses computed where old snapshots lack them."""
    out = []
    for seg in snap["segments"]:
        addr = int(seg.get("address") or 0)
        for b in seg["blocks"]:
            out.append((int(b.get("address", addr)), b, seg))
            addr += b["size"]
    return out


def _block_frames(b: dict) -> list[Frame]:
    if "frames" in b:
        return _frames(b["frames"])
    hist = b.get("history")
    return _frames(hist[0].get("frames")) if isinstance(hist, list) and hist and isinstance(hist[0], dict) else []


def _trace(snap: dict) -> list[dict]:
    traces = snap.get("device_traces")
    if not isinstance(traces, list):
        return []
    lists = [t for t in traces if isinstance(t, list)]
    best = max(lists, key=len, default=[])
    return [e for e in best if isinstance(e, dict) and isinstance(e.get("size"), int)]


def _alloc_frames(trace: list[dict]) -> list[list[Frame]]:
    """For each entry, the frames of the allocation it concerns (the latest ``alloc`` at its address)."""
    last: dict[int, list[Frame]] = {}
    out = []
    for e in trace:
        fr = _frames(e.get("frames"))
        if e.get("action") == "alloc":
            last[e.get("addr", -1)] = fr
            out.append(fr)
        else:
            out.append(last.get(e.get("addr", -1), fr))
    return out


def _peak_alive(alive: dict[int, tuple[int, list[Frame]]], trace: list[dict]) -> tuple[int, dict]:
    """Undo the trace from the snapshot's state; (peak allocated, blocks alive at the peak)."""
    frames_of = _alloc_frames(trace)
    total = sum(s for s, _ in alive.values())
    best, best_i = total, len(trace)
    for i in range(len(trace) - 1, -1, -1):
        total += _undo(alive, trace[i], frames_of[i], apply=False)
        if total > best:
            best, best_i = total, i
    state = dict(alive)  # the walk above did not change ``alive``; replay it to the peak
    for i in range(len(trace) - 1, best_i - 1, -1):
        _undo(state, trace[i], frames_of[i], apply=True)
    return best, state


def _undo(state: dict, e: dict, frames: list[Frame], apply: bool) -> int:
    """The change of allocated bytes when entry ``e`` is undone (and, with ``apply``, undo it in ``state``)."""
    act, addr, size = e.get("action"), e.get("addr", -1), round_up_bytes(e["size"])
    if act == "alloc":
        if apply:
            state.pop(addr, None)
        return -size
    if act == "free_requested":
        if apply:
            state[addr] = (size, frames)
        return size
    return 0


def summarise_snapshot(snap: dict) -> SnapshotSummary:
    blocks = _blocks(snap)
    reserved = sum(int(s["total_size"]) for s in snap["segments"])
    live = [(a, b) for a, b, _ in blocks if b.get("state", "active_allocated") == "active_allocated"]
    allocated = sum(b["size"] for _, b in live)
    stranded, largest = 0, 0
    for seg in snap["segments"]:
        inactive = [b["size"] for b in seg["blocks"] if b.get("state") == "inactive"]
        largest = max([largest, *inactive])
        if len(inactive) < len(seg["blocks"]):
            stranded += sum(inactive)
    alive = {a: (b["size"], _block_frames(b)) for a, b in live}
    trace = _trace(snap)
    peak, at_peak = _peak_alive(alive, trace) if trace else (allocated, alive)
    by_cat = {c: 0 for c in CATEGORIES}
    eval_act = 0
    for size, frames in at_peak.values():
        cat, in_eval = block_category(frames)
        by_cat[cat] += size
        if in_eval and cat == "activations":
            eval_act += size
    ooms = [e for e in trace if e.get("action") == "oom"]
    return SnapshotSummary(
        reserved_bytes=reserved, allocated_bytes=allocated, inactive_bytes=reserved - allocated,
        stranded_bytes=stranded, largest_inactive_bytes=largest, n_segments=len(snap["segments"]),
        expandable=any(bool(s.get("is_expandable")) for s in snap["segments"]), peak_bytes=peak,
        peak_source="trace" if trace else "segments", by_category=by_cat, eval_activation_bytes=eval_act,
        frames_present=any(fr for _, fr in at_peak.values()),
        oom_request_bytes=ooms[-1]["size"] if ooms else None,
        oom_device_free_bytes=ooms[-1].get("device_free") if ooms else None)
