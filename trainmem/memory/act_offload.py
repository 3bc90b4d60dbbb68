"""Activation offloading (``--offload-activations``): the decoder layers' saved tensors in pinned host memory.

The implementation modelled is torchtune's ``OffloadActivations`` (torchtune/training/_activation_offloading.py,
v0.6), which TRL copies (trl/models/activation_offloading.py ``get_act_offloading_ctx_manager``) and axolotl's
``activation_offloading: true`` runs (src/axolotl/core/trainers/mixins/activation_checkpointing.py, main: TRL's
manager with ``use_streams=True`` around each ``training_step``, the decoder layers checkpointed with
``gradient_checkpointing``, so only their inputs are offloaded; its ``legacy`` value is ``use_streams=False`` —
synchronous copies, nothing left in flight — and ``disk`` / ``hidden_states`` are other implementations, not
modelled; with streams it also clones non-contiguous saved tensors on the compute stream before packing). A
``saved_tensors_hooks`` pair:

- pack (forward): a saved tensor of at least ``min_offload_size`` = 1024 B that is not a Parameter is copied into
  a new pinned host tensor (``torch.empty_like(..., pin_memory=True, device="cpu")``, ``copy_(non_blocking=True)``)
  on a side stream (``use_streams``, the default); the GPU tensor stays referenced in ``fwd_stash`` until the
  ``max_fwd_stash_size`` = 5th later pack (tensor ids count every pack), then it is freed. So while a layer runs,
  at most 5 of the saved tensors are still on the GPU: with gradient checkpointing a layer packs one, its input
  (torch 2.13 ``torch/utils/checkpoint.py`` ``_CheckpointFrame.save_inputs``, one SavedTensor per tensor argument;
  transformers 5.24 passes ``hidden_states`` alone positionally; measured, tests/memory/test_act_offload.py), so
  the last 5 layers' inputs (torch 2.4–2.6's ``_NoopSaveInputs`` packed a 0-element ``dummy`` too: 3 layers);
  without it a layer's last 5 tensors;
- the LM head runs under a ``NoOpManager`` (nothing of it offloaded); the final norm's ≥ 4 packs (pow, rsqrt,
  mul) push the last layer's tensors out of the stash before the loss; the loss's own saved tensors stay on the
  GPU through the loss backward (the stash holds them until the first offloaded unpack, and log_softmax's output
  is in the stash or brought back when its backward runs): trainmem leaves the final norm, LM head and loss as
  they are;
- unpack (backward): a tensor comes back to the GPU (``.to("cuda", non_blocking=True)``) when the autograd node
  that needs it runs and is freed after the next node (``bwd_tensor_stash``). trainmem brings a layer's saved
  tensors back together when its backward starts (an upper bound of one layer, freed as the walk frees them);
  a checkpointed layer's input comes back when its recomputation starts;
- under autocast the 16-bit weight copies the linears save are tensors, not Parameters: offloaded too, while the
  autocast cache keeps the GPU copy until autocast exits (after the loss); they come back per layer in backward.

Host memory: the offloaded bytes of one micro-batch, each tensor rounded up to a power of two by torch's
pinned-memory ``CachingHostAllocator`` (aten/src/ATen/core/CachingHostAllocator.h ``allocate``:
``c10::llvm::PowerOf2Ceil(size)``). Exact with gradient checkpointing (one input per layer, rounded). Without
it, a lower bound: the saved bytes unrounded (up to 2× more after rounding), and ``pack`` copies a tensor once per
op that saves it (full fine-tuning's q/k/v_proj each save the same input), counted once here (on a tiny
Llama, bf16, CPU: packed bytes 1.17× the distinct storages under full fine-tuning, 1.09× with LoRA on q, v).

``torch.autograd.graph.save_on_cpu(pin_memory=True)`` (FSDP's ``offload_wrapper``) differs: it copies every
saved tensor, parameters included, synchronously; not modelled.

Core module: no torch import.
"""

from __future__ import annotations

from trainmem.memory.activations import layer_saved
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["MIN_OFFLOAD_BYTES", "MAX_FWD_STASH", "CHECKPOINT_PACKS", "pinned_bytes", "stash_bytes",
           "stash_window_layers", "offloaded_host_bytes", "exposed_transfer_seconds", "OFFLOAD_NOTE"]

#: The assumption line of an offloaded run (estimate.py).
OFFLOAD_NOTE = ("activation offloading (torchtune/TRL OffloadActivations, use_streams): the decoder layers' saved "
                "tensors of >= 1024 B in pinned host memory (host_memory_bytes; each rounded to a power of two with "
                "checkpointing, a lower bound without), the last 5 in flight on the GPU, each layer's brought back for "
                "its backward; the LM head and the loss stay on the GPU; the copies cost step time where they outlast "
                "the forward or backward")

#: torchtune/TRL ``OffloadActivations(min_offload_size=1024)``: smaller saved tensors stay on the GPU.
MIN_OFFLOAD_BYTES = 1024
#: ``max_fwd_stash_size=5``: offloaded tensors whose copy may still be in flight, kept alive on the GPU.
MAX_FWD_STASH = 5
#: Packs of one non-reentrant checkpointed layer in torch 2.13: its input (``_CheckpointFrame.save_inputs``).
CHECKPOINT_PACKS = 1


def pinned_bytes(n_bytes: int) -> int:
    """Bytes the pinned CachingHostAllocator reserves for a tensor of ``n_bytes``: the next power of two
    (torch aten/src/ATen/core/CachingHostAllocator.h); tensors under ``MIN_OFFLOAD_BYTES`` are not offloaded."""
    if n_bytes < MIN_OFFLOAD_BYTES:
        return 0
    return 1 << (n_bytes - 1).bit_length()


def stash_window_layers(setup: TrainingSetup, recompute: str) -> int:
    """How many consecutive layers' offloaded tensors the forward stash can span: a checkpointed layer packs
    ``CHECKPOINT_PACKS`` tensor, so 5 layers' inputs; otherwise one layer (it packs more than 5)."""
    return -(-MAX_FWD_STASH // CHECKPOINT_PACKS) if recompute == "full" else 1


def stash_bytes(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, recompute: str, kept_bytes: int) -> int:
    """Bytes of layer ``layer_idx``'s offloaded tensors still on the GPU after its forward: its checkpointed input
    (full recompute), else its 5 largest saved terms (a term holds one tensor or more: an upper bound), at most
    what it keeps (``kept_bytes``)."""
    if recompute == "full":
        return kept_bytes
    terms = sorted((t.bytes for t in layer_saved(spec, setup, layer_idx).terms), reverse=True)
    return min(kept_bytes, sum(terms[:MAX_FWD_STASH]))


def offloaded_host_bytes(recompute: str, kept_bytes: int, weight_copy_bytes: int) -> int:
    """Pinned host bytes a layer offloads for one micro-batch: under full recompute its checkpointed
    input (``kept_bytes``; the checkpointed forward saves nothing else through the offload hook, weight copies
    included), rounded by :func:`pinned_bytes` — exact; otherwise what it keeps through the forward and its
    autocast 16-bit weight copies, unrounded: a lower bound (a term may hold several tensors, each rounded up to a
    power of two by the allocator, up to 2×; tensors saved by several ops are copied once per op)."""
    if recompute == "full":
        return pinned_bytes(kept_bytes)
    return kept_bytes + weight_copy_bytes


def exposed_transfer_seconds(offloaded_bytes: int, host_bytes_per_s: float, gpus_sharing_link: int,
                             forward_seconds: float, backward_seconds: float) -> float:
    """Seconds per micro-batch the offload copies add to the step: ``offloaded_bytes`` go device → host during the
    forward and come back host → device during the backward, each direction over the host link shared by
    ``gpus_sharing_link`` GPUs, overlapped with that pass's compute (``use_streams``: a side stream), so only what
    exceeds the pass is exposed: max(0, t − forward) + max(0, t − backward)."""
    if offloaded_bytes <= 0:
        return 0.0
    t = offloaded_bytes * max(1, gpus_sharing_link) / host_bytes_per_s
    return max(0.0, t - forward_seconds) + max(0.0, t - backward_seconds)
