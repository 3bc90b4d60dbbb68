"""The optimizer step on the GPU (memory-bound) and the cost of offloading it (PCIe + CPU Adam).

GPU step: every owned parameter's tensors are read and written once per pass; bytes per parameter:

- Megatron / DeepSpeed FusedAdam (apex/TE ``multi_tensor_adam``, one pass): read fp32 master, fp32 grad,
  exp_avg, exp_avg_sq (16 B), write master, exp_avg, exp_avg_sq (12 B) and the 16-bit model copy (2 B);
  gradient-norm clipping reads the fp32 gradients and scales them (12 B); zeroing the grad buffer 4 B.
  DeepSpeed ZeRO-1/2 also copies the 16-bit gradient partition into fp32 (2 + 4 B).
- torch AdamW ``fused`` (torchtitan's default ``implementation = "fused"``): p, g, m, v read, p, m, v
  written: 7 tensors of the state dtype; torch AdamW ``foreach`` (the default of ``torch.optim.AdamW``
  on CUDA, used by HF Trainer's ``adamw_torch``): 20 tensor passes (torch/optim/adam.py
  ``_multi_tensor_adam``: mul_ (weight decay) 2, lerp_ 3, mul_ 2, addcmul_ 3, sqrt 2, div_ 2, add_ 2,
  addcdiv_ 4); clipping 3 passes.
"""

from __future__ import annotations

from trainmem.perf import calibration as cal

__all__ = ["gpu_optimizer_bytes_per_param", "gpu_optimizer_seconds", "cpu_adam_seconds", "offload_seconds"]

_PASSES_FUSED = {"adamw": 7, "adam": 7, "sgd": 3, "sgd-momentum": 5, "lion": 5, "adafactor": 6}
_PASSES_FOREACH = {"adamw": 20, "adam": 18, "sgd": 3, "sgd-momentum": 6, "lion": 9, "adafactor": 14,
                   "hf-adafactor": 20}  # (transformers' Adafactor.step, factored: 20 tensor passes, one tensor at a time)


def gpu_optimizer_bytes_per_param(engine: str, optimizer: str, state_bytes: int, zero: int) -> float:
    """HBM bytes one owned parameter costs in one optimizer step (module docstring)."""
    if optimizer == "paged-adamw":  # bitsandbytes 32-bit Adam kernel, one pass: p, g, m, v read; p, m, v written
        return 7 * state_bytes
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):  # bitsandbytes 8-bit Adam: p, g (state dtype) and two 1-byte states
        return 3 * state_bytes + 4 + 3 * state_bytes
    if engine in ("megatron", "deepspeed") and optimizer in ("adamw", "adam"):
        extra = 6 if (engine == "deepspeed" and zero in (1, 2)) else 0
        return 30 + 12 + 4 + extra
    passes = (_PASSES_FUSED if engine == "fsdp2" else _PASSES_FOREACH).get(optimizer, 20)
    return (passes + 3) * state_bytes


def gpu_optimizer_seconds(owned_params: float, bytes_per_param: float, hbm_bytes_per_s: float) -> float:
    """Seconds of the optimizer step on the GPU: owned_params · bytes / achieved HBM bandwidth."""
    return owned_params * bytes_per_param / hbm_bytes_per_s


def cpu_adam_seconds(owned_params: float, ranks_per_node: int, torch_cpu: bool) -> float:
    """Seconds of the CPU optimizer step of one rank: the node's CPU-Adam rate shared by its ranks
    (CPU_ADAM_PARAMS_PER_SECOND_PER_NODE, an assumption); torch's CPU AdamW is TORCH_CPU_ADAM_SLOWDOWN
    times slower than DeepSpeedCPUAdam (DeepSpeed tutorial)."""
    rate = cal.CPU_ADAM_PARAMS_PER_SECOND_PER_NODE / max(ranks_per_node, 1)
    if torch_cpu:
        rate /= cal.TORCH_CPU_ADAM_SLOWDOWN
    return owned_params / rate


def offload_seconds(engine: str, offload: str, owned_params: float, host_bytes_per_s: float, ranks_per_node: int,
                    micro_batches: int, window_mb: float, zero: int) -> float:
    """Exposed seconds per step of optimizer (and parameter) offload.

    - deepspeed ZeRO-Offload: gradients D2H (16-bit, per micro-batch under ZeRO-2, once under ZeRO-1),
      overlapped with the backward; DeepSpeedCPUAdam on the CPU; updated 16-bit parameters H2D (exposed).
      ZeRO-3 ``offload_param``: each micro-batch's forward and backward fetch the 16-bit partition H2D,
      prefetched under compute (exposed beyond it).
    - megatron ``--optimizer-cpu-offload``: fp32 gradients D2H and fp32 parameters H2D once per step,
      torch's CPU AdamW (HybridDeviceOptimizer), all exposed.
    - fsdp2 CPUOffloadPolicy: every micro-batch copies the fp32 shards H2D before each all-gather and the
      fp32 gradient shards D2H (overlapped with compute), torch's CPU AdamW on the host.

    ``window_mb``: seconds of one micro-batch the copies can hide under (its compute plus the exposed
    data-parallel communication, which runs on other engines), so that the step is never shorter than the
    longest of compute, communication and host transfers.
    """
    if offload == "none" or owned_params <= 0:
        return 0.0
    pcie = host_bytes_per_s
    if engine == "deepspeed":
        d2h = 2 * owned_params * (micro_batches if zero == 2 else 1) / pcie
        fetch = 2 * 2 * owned_params / pcie if offload == "optimizer+params" else 0.0
        t = max(0.0, d2h + micro_batches * fetch - window_mb * micro_batches)
        return t + cpu_adam_seconds(owned_params, ranks_per_node, False) + 2 * owned_params / pcie
    if engine == "megatron":
        return (4 + 4) * owned_params / pcie + cpu_adam_seconds(owned_params, ranks_per_node, True)
    gathers = 2 if zero == 3 else 1
    per_mb = (gathers + 1) * 4 * owned_params / pcie
    return micro_batches * max(0.0, per_mb - window_mb) + cpu_adam_seconds(owned_params, ranks_per_node, True)
