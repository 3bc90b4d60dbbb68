"""What the performance model needs to know about one GPU: peaks, achievable fractions, SMs, HBM."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainmem.errors import ConfigError
from trainmem.hardware.catalog import GPU
from trainmem.perf import calibration as cal

__all__ = ["Device", "device_of", "matmul_kind", "mfu_peak_flops_per_s"]


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    arch: str
    peak16_flops: float
    """Dense 16-bit tensor peak, FLOP/s."""
    peak8_flops: float
    """Dense fp8 peak, FLOP/s (0 without fp8)."""
    peak32_flops: float
    """Dense fp32 (non-TF32) peak, FLOP/s (0 where none is tabulated)."""
    eff16: float
    """Achievable fraction of ``peak16_flops`` for large GEMMs (MAMF)."""
    eff8: float
    hbm_bytes_per_s: float
    """Achieved HBM bandwidth of pointwise kernels, bytes/s (datasheet × HBM_EFFICIENCY)."""
    sms: int
    """0 where unknown: no wave quantization."""
    mamf_measured: bool
    """False where the MAMF figure is borrowed from a sibling or the default."""
    sustained: float = 1.0
    """Fraction of the isolated-kernel throughput tensor-core kernels sustain in a training step
    (calibration.SUSTAINED_FRACTION)."""

    def gemm_eff(self, kind: str) -> float:
        """Fraction of the peak a large GEMM sustains in training: MAMF × sustained (``kind`` 16/fp8/fp32)."""
        return (self.eff8 if kind == "fp8" else self.eff16) * self.sustained


@lru_cache(maxsize=64)
def device_of(gpu: GPU) -> Device:
    """The model's view of ``gpu``; a GPU without a published 16-bit peak or HBM bandwidth is a
    one-line ConfigError (the step time cannot be computed)."""
    if not gpu.bf16_tflops:
        raise ConfigError(f"gpu: {gpu.name} has no published dense 16-bit peak (bf16_tflops), so its step time "
                          "cannot be modelled")
    if not gpu.hbm_gbps:
        raise ConfigError(f"gpu: {gpu.name} has no published memory bandwidth (hbm_gbps), so its step time "
                          "cannot be modelled")
    sibling = cal.MAMF_BORROWED.get(gpu.name, gpu.name)
    eff16 = cal.MAMF_BF16.get(sibling, cal.DEFAULT_MAMF_BF16)
    eff8 = cal.MAMF_FP8.get(gpu.name) or cal.MAMF_FP8.get(
        sibling, eff16 * cal.MAMF_FP8["H100-SXM-80G"] / cal.MAMF_BF16["H100-SXM-80G"])
    return Device(
        name=gpu.name, arch=cal.arch_of(gpu.name), peak16_flops=gpu.bf16_tflops * 1e12,
        peak8_flops=(gpu.fp8_tflops or 0.0) * 1e12, peak32_flops=cal.FP32_TFLOPS.get(gpu.name, 0.0) * 1e12,
        eff16=eff16, eff8=eff8, hbm_bytes_per_s=gpu.hbm_gbps * 1e9 * cal.HBM_EFFICIENCY,
        sms=cal.SM_COUNT.get(gpu.name, 0), mamf_measured=gpu.name in cal.MAMF_BF16,
        sustained=cal.SUSTAINED_FRACTION)


def matmul_kind(precision: str, compute_bytes: int) -> str:
    """``fp32`` | ``16`` | ``fp8``: the tensor-core path a setup's matmuls take."""
    if compute_bytes == 4:
        return "fp32"
    return "fp8" if precision == "fp8" else "16"


def mfu_peak_flops_per_s(dev: Device, precision: str) -> float:
    """FLOP/s per GPU that MFU divides by: the dense peak of the number format the recipe (or planner
    family) ``precision`` asks for — fp8 → fp8, fp32 → fp32 (non-TF32), every 16-bit recipe (bf16, fp16,
    amp-*, mixed-*) → 16-bit — not of the kernel path an engine falls back to. PaLM's MFU (Chowdhery et
    al. 2022, Appendix B) divides achieved model FLOP/s by the hardware's peak for the training's format; a
    recipe an engine runs in fp32 (torchtitan's TP without FSDP: trainmem.memory.layers.base.tp_only_fp32)
    is charged against the 16-bit peak it was chosen for, so MFU and tokens/s tell the same story."""
    if precision == "fp8":
        return dev.peak8_flops
    if precision == "fp32":
        return dev.peak32_flops
    return dev.peak16_flops


def check_precision(dev: Device, kind: str) -> None:
    """fp8 needs fp8 tensor cores, fp32 a tabulated fp32 peak (one-line ConfigError otherwise)."""
    if kind == "fp8" and dev.peak8_flops <= 0:
        raise ConfigError(f"gpu: {dev.name} has no published fp8 peak (fp8_tflops); use a 16-bit precision")
    if kind == "fp32" and dev.peak32_flops <= 0:
        raise ConfigError(f"gpu: {dev.name} has no tabulated fp32 peak, so an fp32 step time cannot be modelled; "
                          "use a 16-bit precision")
