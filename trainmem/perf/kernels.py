"""Seconds of one kernel: GEMMs (roofline with tile/wave quantization), attention, pointwise ops.

The GEMM model is torchao's training roofline (``torchao/testing/training/roofline_utils.py``
``get_individual_gemm_time_sympy``: max of compute at an achievable fraction of peak, memory traffic at
an achievable fraction of HBM bandwidth, and a per-kernel floor) with three additions: tile quantization
and wave quantization over the GPU's SMs (NVIDIA's "Matrix Multiplication Background User's Guide" §3), the
measured penalty of dimensions that are not multiples of 8, and a fixed per-kernel time fitted to XLA's
measured H100 GEMM table (calibration.GEMM_FIXED_SECONDS).

Callers pass the fraction of the peak *sustained in training* (``Device.gemm_eff``: MAMF ×
SUSTAINED_FRACTION) and, for attention, the peak × SUSTAINED_FRACTION; with ``eff`` = MAMF and the raw
peak these functions reproduce the isolated-kernel microbenchmarks (tests/perf/test_kernels.py).
"""

from __future__ import annotations

from functools import lru_cache

from trainmem.errors import ConfigError
from trainmem.perf import calibration as cal
from trainmem.perf.device import Device

__all__ = ["wave_efficiency", "gemm_seconds", "attention_efficiency", "attention_kernel",
           "attention_forward_seconds", "attention_backward_seconds", "pointwise_seconds"]


def wave_efficiency(m: int, n: int, k: int, sms: int, tile: int = cal.GEMM_TILE) -> float:
    """Useful fraction of the tiles × waves a GEMM's output occupies (tile and wave quantization, NVIDIA
    Matrix Multiplication Background §3.1–3.2). Fewer tiles than SMs: split-K over ``SPLIT_K_DEPTH``-deep
    slices of k fills more SMs (an assumption, see calibration). ``sms`` 0: 1.0 (unknown GPU)."""
    if sms <= 0 or m <= 0 or n <= 0:
        return 1.0
    tm, tn = -(-m // tile), -(-n // tile)
    tiles = tm * tn
    tile_q = (m * n) / (tiles * tile * tile)
    if tiles >= sms:
        waves = -(-tiles // sms)
        return tile_q * tiles / (waves * sms)
    splits = max(1, min(-(-sms // tiles), -(-k // cal.SPLIT_K_DEPTH)))
    return tile_q * min(1.0, tiles * splits / sms)


@lru_cache(maxsize=65536)
def gemm_seconds(m: int, n: int, k: int, peak_flops: float, eff: float, hbm_bytes_per_s: float, sms: int,
                 in_bytes: float, out_bytes: float) -> float:
    """Seconds of an (m×k)·(k×n) GEMM: max(2mnk / (peak · eff · wave_eff · align), bytes / HBM,
    KERNEL_FLOOR_SECONDS) + GEMM_FIXED_SECONDS. ``eff`` is the achievable fraction of ``peak_flops``
    (MAMF, or MAMF × sustained); bytes = inputs (m·k + k·n) at ``in_bytes`` plus the output m·n at
    ``out_bytes`` (torchao roofline's traffic count)."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    e = eff * wave_efficiency(m, n, k, sms)
    if n % 8 or k % 8:
        e *= cal.MISALIGNED_GEMM_FACTOR
    compute = 2.0 * m * n * k / (peak_flops * e)
    memory = ((m * k + k * n) * in_bytes + m * n * out_bytes) / hbm_bytes_per_s
    return max(compute, memory, cal.KERNEL_FLOOR_SECONDS) + cal.GEMM_FIXED_SECONDS


def attention_kernel(dev: Device, engine: str, choice: str | None = None) -> str:
    """The fused attention kernel a setup runs: Transformer Engine (Megatron) on Hopper picks cuDNN's
    fused attention (FlashAttention-3 class); torch SDPA and HF ``flash_attention_2`` run
    FlashAttention-2 kernels (SDPA's default backend order is flash, efficient, math, cudnn:
    ``torch._C._get_sdp_priority_order()`` in torch 2.13). ``choice`` (``TrainingSetup.attn_kernel``) names
    the kernel: ``fa2``, ``fa3`` (Hopper and Blackwell only: FlashAttention-3 targets sm90+), ``triton``
    (flash-attn's Triton port)."""
    if choice == "fa3":
        if dev.arch not in ("hopper", "blackwell"):
            raise ConfigError(f"--attn-kernel fa3: FlashAttention-3 needs a Hopper or Blackwell GPU, not {dev.name}")
        return "fa3"
    if choice in ("fa2", "triton"):
        if dev.arch not in ("hopper", "ampere", "ada", "blackwell"):
            return "other"
        base = "fa2-hopper" if dev.arch == "hopper" else "fa2"
        return base if choice == "fa2" else "triton-" + base
    if dev.arch == "hopper":
        return "fa3" if engine == "megatron" else "fa2-hopper"
    if dev.arch in ("ampere", "ada", "blackwell"):
        return "fa3" if (dev.arch == "blackwell" and engine == "megatron") else "fa2"
    return "other"


def attention_efficiency(kernel: str, keys_per_query: float) -> float:
    """Fraction of the 16-bit peak a fused attention forward reaches: max · s/(s + s½) with s the keys
    each query attends to (calibration: ATTN_MAX_EFFICIENCY, ATTN_HALF_SATURATION_KEYS)."""
    s = max(keys_per_query, 1.0)
    return cal.ATTN_MAX_EFFICIENCY[kernel] * s / (s + cal.ATTN_HALF_SATURATION_KEYS)


def attention_forward_seconds(flops: float, kernel: str, keys_per_query: float, peak_flops: float) -> float:
    """Seconds of a fused attention forward of ``flops`` (QKᵀ and PV, causal share only)."""
    if flops <= 0:
        return 0.0
    return max(flops / (peak_flops * attention_efficiency(kernel, keys_per_query)), cal.KERNEL_FLOOR_SECONDS)


def attention_backward_seconds(forward_flops: float, kernel: str, keys_per_query: float,
                               peak_flops: float) -> float:
    """Seconds of the fused attention backward: 2.5× the forward's FLOPs (it recomputes QKᵀ) at
    ATTN_BACKWARD_EFFICIENCY_RATIO of the forward's efficiency."""
    if forward_flops <= 0:
        return 0.0
    eff = attention_efficiency(kernel, keys_per_query) * cal.ATTN_BACKWARD_EFFICIENCY_RATIO
    return max(cal.ATTN_BACKWARD_FLOP_RATIO * forward_flops / (peak_flops * eff), cal.KERNEL_FLOOR_SECONDS)


def pointwise_seconds(nbytes: float, kernels: int, hbm_bytes_per_s: float) -> float:
    """Memory-bound ops: bytes read and written / achieved HBM bandwidth, at least ``kernels`` ×
    KERNEL_FLOOR_SECONDS."""
    return max(nbytes / hbm_bytes_per_s, kernels * cal.KERNEL_FLOOR_SECONDS)
