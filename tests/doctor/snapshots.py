"""Snapshots in ``torch.cuda.memory._snapshot()``'s format, built from its documented schema (torch/cuda/memory.py
``_snapshot`` docstring, torch 2.13: Segment / Block / Frame / TraceEntry): this machine has no GPU to take one.

Frames are innermost first, as the allocator's unwinder records them (torch/cuda/_memory_viz.py reverses them for
flame graphs); the paths and lines are those of torch 2.13 and transformers 5.24 files.
"""

from __future__ import annotations

from trainmem.units import GiB, MiB

SITE = "/usr/lib/python3.11/site-packages"


def _f(path: str, line: int, name: str) -> dict:
    return {"filename": path, "line": line, "name": name}


TRAIN = _f("/work/train.py", 40, "train")
FRAMES = {
    "parameters": [_f(f"{SITE}/torch/nn/modules/module.py", 1341, "convert"),
                   _f(f"{SITE}/torch/nn/modules/module.py", 942, "_apply"),
                   _f(f"{SITE}/torch/nn/modules/module.py", 1355, "to"), _f("/work/train.py", 12, "main")],
    "gradients": [_f("??", 0, "torch::autograd::AccumulateGrad::apply(std::vector<at::Tensor>&&)"),
                  _f(f"{SITE}/torch/autograd/graph.py", 829, "_engine_run_backward"),
                  _f(f"{SITE}/torch/autograd/__init__.py", 364, "backward"),
                  _f(f"{SITE}/torch/_tensor.py", 630, "backward"), TRAIN],
    "optimizer_states": [_f(f"{SITE}/torch/optim/adamw.py", 111, "_init_group"),
                         _f(f"{SITE}/torch/optim/adamw.py", 220, "step"), TRAIN],
    "temporaries": [_f(f"{SITE}/torch/optim/adamw.py", 606, "_multi_tensor_adamw"),
                    _f(f"{SITE}/torch/optim/adamw.py", 220, "step"), TRAIN],
    "activations": [_f(f"{SITE}/torch/nn/modules/linear.py", 125, "forward"),
                    _f(f"{SITE}/torch/nn/modules/module.py", 1762, "_call_impl"),
                    _f(f"{SITE}/transformers/models/llama/modeling_llama.py", 160, "forward"), TRAIN],
    "eval": [_f(f"{SITE}/torch/nn/modules/linear.py", 125, "forward"),
             _f(f"{SITE}/torch/nn/modules/module.py", 1762, "_call_impl"), _f("/work/train.py", 77, "evaluate")],
    "dataloader": [_f(f"{SITE}/torch/utils/data/_utils/pin_memory.py", 68, "pin_memory"),
                   _f(f"{SITE}/torch/utils/data/_utils/pin_memory.py", 37, "do_one_step")],
}


def segment(address: int, blocks: list[tuple[int, str, str]]) -> dict:
    """A segment of (size, state, frames key) blocks, laid out from ``address``."""
    out, addr = [], address
    for size, state, key in blocks:
        out.append({"size": size, "requested_size": size, "address": addr, "state": state,
                    "frames": list(FRAMES.get(key, []))})
        addr += size
    total = addr - address
    alloc = sum(b["size"] for b in out if b["state"] == "active_allocated")
    return {"address": address, "total_size": total, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
            "allocated_size": alloc, "active_size": alloc, "blocks": out}


def snapshot(segments: list[dict], trace: list[dict] | None = None) -> dict:
    return {"segments": segments, "device_traces": [trace or []]}


def training_peak() -> dict:
    """A step's peak: 4 GiB parameters, 4 GiB gradients, 8 GiB optimizer states, 6 GiB activations, packed."""
    base = 0x7F0000000000
    return snapshot([segment(base, [(4 * GiB, "active_allocated", "parameters")]),
                     segment(base + 8 * GiB, [(4 * GiB, "active_allocated", "gradients")]),
                     segment(base + 16 * GiB, [(8 * GiB, "active_allocated", "optimizer_states")]),
                     segment(base + 32 * GiB, [(6 * GiB, "active_allocated", "activations"),
                                               (20 * MiB, "inactive", "")])])


def fragmented(request: int = 1 * GiB) -> dict:
    """Ten 1 GiB segments each holding one 256 MiB block: 7.5 GiB free in 768 MiB pieces; an OOM for ``request``."""
    base = 0x7E0000000000
    segs = [segment(base + i * 2 * GiB, [(256 * MiB, "active_allocated", "activations"), (768 * MiB, "inactive", "")])
            for i in range(10)]
    trace = [{"action": "oom", "size": request, "device_free": 300 * MiB, "stream": 0, "frames": FRAMES["activations"]}]
    return snapshot(segs, trace)


def eval_kept() -> dict:
    base = 0x7D0000000000
    return snapshot([segment(base, [(2 * GiB, "active_allocated", "parameters")]),
                     segment(base + 4 * GiB, [(3 * GiB, "active_allocated", "eval")])])


def loader() -> dict:
    base = 0x7C0000000000
    return snapshot([segment(base, [(2 * GiB, "active_allocated", "parameters")]),
                     segment(base + 4 * GiB, [(512 * MiB, "active_allocated", "dataloader")])])


def replayed_peak() -> dict:
    """Parameters at the snapshot; the trace shows 4 × 1 GiB of activations allocated and freed before it."""
    base = 0x7B0000000000
    segs = [segment(base, [(2 * GiB, "active_allocated", "parameters")]),
            segment(base + 4 * GiB, [(4 * GiB, "inactive", "")])]
    trace = []
    for i in range(4):
        trace.append({"action": "alloc", "addr": base + 4 * GiB + i * GiB, "size": GiB, "stream": 0,
                      "frames": FRAMES["activations"]})
    for i in range(4):
        trace.append({"action": "free_requested", "addr": base + 4 * GiB + i * GiB, "size": GiB, "stream": 0,
                      "frames": FRAMES["gradients"]})
        trace.append({"action": "free_completed", "addr": base + 4 * GiB + i * GiB, "size": GiB, "stream": 0,
                      "frames": []})
    return snapshot(segs, trace)


# --------------------------------------------------------------------------- the corpus of issue 19


def fragmented_2g() -> dict:
    return fragmented(2 * GiB)


def fragmented_small_pieces() -> dict:
    """Forty 256 MiB segments each holding one 64 MiB block: 7.5 GiB free in 192 MiB pieces; an OOM for 512 MiB."""
    base = 0x7A0000000000
    segs = [segment(base + i * GiB, [(64 * MiB, "active_allocated", "activations"), (192 * MiB, "inactive", "")])
            for i in range(40)]
    trace = [{"action": "oom", "size": 512 * MiB, "device_free": 100 * MiB, "stream": 0,
              "frames": FRAMES["activations"]}]
    return snapshot(segs, trace)


def fragmented_no_oom() -> dict:
    """The layout of :func:`fragmented` with no OOM in the trace: free cached blocks that nothing asked for."""
    snap = fragmented()
    snap["device_traces"] = [[]]
    return snap


def cached_free() -> dict:
    """Between two steps: the model states packed, the freed activations' blocks kept by the cache inside
    partly used segments (what every healthy run looks like), no OOM."""
    base = 0x790000000000
    return snapshot([segment(base, [(4 * GiB, "active_allocated", "parameters")]),
                     segment(base + 8 * GiB, [(4 * GiB, "active_allocated", "gradients")]),
                     segment(base + 16 * GiB, [(8 * GiB, "active_allocated", "optimizer_states")]),
                     segment(base + 32 * GiB, [(512 * MiB, "active_allocated", "activations"),
                                               (5 * GiB + 512 * MiB, "inactive", "")]),
                     segment(base + 40 * GiB, [(20 * MiB, "active_allocated", "temporaries"),
                                               (2 * GiB - 20 * MiB, "inactive", "")])])


def loader_small() -> dict:
    base = 0x780000000000
    return snapshot([segment(base, [(2 * GiB, "active_allocated", "parameters")]),
                     segment(base + 4 * GiB, [(96 * MiB, "active_allocated", "dataloader")])])


def loader_large() -> dict:
    base = 0x770000000000
    return snapshot([segment(base, [(2 * GiB, "active_allocated", "parameters")]),
                     segment(base + 4 * GiB, [(1536 * MiB, "active_allocated", "dataloader")])])


def eval_small() -> dict:
    """An evaluation under no_grad, caught mid-forward: one layer's output alive (64 MiB)."""
    base = 0x760000000000
    return snapshot([segment(base, [(2 * GiB, "active_allocated", "parameters")]),
                     segment(base + 4 * GiB, [(64 * MiB, "active_allocated", "eval")])])


def eval_kept_large() -> dict:
    base = 0x750000000000
    return snapshot([segment(base, [(6 * GiB, "active_allocated", "parameters")]),
                     segment(base + 8 * GiB, [(9 * GiB, "active_allocated", "eval")])])


def mid_step() -> dict:
    """In the forward of a step: model states and 3 GiB of activations, a 1 GiB cached block free, no OOM."""
    base = 0x740000000000
    return snapshot([segment(base, [(4 * GiB, "active_allocated", "parameters")]),
                     segment(base + 8 * GiB, [(8 * GiB, "active_allocated", "optimizer_states")]),
                     segment(base + 16 * GiB, [(3 * GiB, "active_allocated", "activations"),
                                               (1 * GiB, "inactive", "")])])
