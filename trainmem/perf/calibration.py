"""Every constant of the performance model, with what it was measured or calibrated on.

Each constant is a published kernel microbenchmark, an engine's own documented default, or an assumption
that says so in its docstring — except the two calibrated ones at the end, fitted on the held-in published
training runs only (see the last section; docs/performance.md has the held-in and held-out accuracy).

Sources used throughout:

- MAMF: S. Bekman, *Machine Learning Engineering*, ``compute/accelerator/README.md`` ("Maximum
  Achievable Matmul FLOPS comparison table", v2 measurement: ``torch.mm`` best shape of a sweep, mean of
  100 iterations after 50 warm-up), github.com/stas00/ml-engineering @ b9e2972 (B200 and H200 fp8 rows
  @ 744d01e).
- torchao roofline: pytorch/ao ``torchao/testing/training/roofline_utils.py`` @ 0598012 (H100 figures
  "based on experimental observation": GEMMs reach 78 % of peak, pointwise kernels 92 % of HBM
  bandwidth, a kernel takes at least 2 µs of GPU time).
- FA3 kernel sweep: pytorch/benchmark PR #2391 (tritonbench ``flash_attention``, H100, head dim 128,
  batch·seq = 16k, 16 heads): FlashAttention-3 forward 430, 517, 566, 590, 614, 621 TFLOP/s and the
  Triton FlashAttention-2 tutorial kernel 329, 390, 434, 458, 471, 477 TFLOP/s at seq 512 … 16384.
- FlashAttention-2 (Dao 2023, arXiv 2307.08691, abstract): 50–73 % of the A100's peak.
- FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608, abstract): FlashAttention-2 reaches only
  35 % of the H100's peak.
- XLA GEMM table: openxla/xla ``xla/service/gpu/model/matmul_interpolator_data.h`` (as vendored in
  tensorflow/tensorflow ``third_party/xla/…`` @ 372d578), ``sm_90`` entries: measured cuBLAS bf16 FLOP/s of
  batched GEMMs up to 4·4096×4096×4096 on an H100.
- Lee et al. 2025, "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep
  Learning: Performance and Power Implications" (arXiv 2507.03114, abstract): compute overlapped with
  communication runs on average 18.9 % slower (max 40 %) than alone, on A100, H100, MI250 and MI210.

Two constants at the end (``SUSTAINED_FRACTION``, ``STEP_OVERHEAD_SECONDS``) are NOT microbenchmarks:
they are calibrated on the HELD-IN subset of ``benchmarks/published_throughput.json`` defined by
:func:`is_held_in` (Megatron-Core's own H100 table and torchtitan's H100 benchmarks); every other published
point is held out and reported separately (``benchmarks/plan_vs_published.py``, docs/performance.md).
"""

from __future__ import annotations

__all__ = ["MAMF_BF16", "MAMF_FP8", "MAMF_BORROWED", "GEMM_FIXED_SECONDS", "OVERLAP_CONTENTION",
           "SUSTAINED_FRACTION", "STEP_OVERHEAD_SECONDS", "HELD_IN_PREFIXES", "is_held_in", "SM_COUNT",
           "FP32_TFLOPS", "HBM_EFFICIENCY",
           "KERNEL_FLOOR_SECONDS", "GEMM_TILE", "SPLIT_K_DEPTH", "MISALIGNED_GEMM_FACTOR", "ATTN_MAX_EFFICIENCY",
           "ATTN_HALF_SATURATION_KEYS", "ATTN_BACKWARD_EFFICIENCY_RATIO", "ATTN_BACKWARD_FLOP_RATIO",
           "CPU_ADAM_PARAMS_PER_SECOND_PER_NODE", "TORCH_CPU_ADAM_SLOWDOWN", "DEFAULT_MAMF_BF16", "arch_of"]

#: Achievable fraction of the dense 16-bit peak for large, well-shaped GEMMs (MAMF / spec).
#: Measured rows of Bekman's MAMF table (v2): A100 SXM 271.2/312, A100 PCIe 252.9/312, H100 SXM
#: 794.5/989, B200 SXM 1745.0/2250, MI300X 668.4/1300; MI250X (one GCD) from the v1 table, 147.0/191.5
#: (ml-engineering ``compute/accelerator/README.md`` @ 744d01e).
MAMF_BF16: dict[str, float] = {
    "A100-SXM-80G": 0.869, "A100-SXM-40G": 0.869,
    "A100-PCIe-80G": 0.811, "A100-PCIe-40G": 0.811,
    "H100-SXM-80G": 0.803, "B200-180G": 0.776,
    "MI300X-192G": 0.514,
    "MI250X-GCD-64G": 0.767,
}
#: Achievable fraction of the dense fp8 peak (float8_e4m3fn ``torch._scaled_mm``): H100 SXM
#: 1402.6/1979, H200 SXM 1453.4/1979, B200 SXM 3432.5/4500 (MAMF v2 table).
MAMF_FP8: dict[str, float] = {"H100-SXM-80G": 0.709, "H200-SXM-141G": 0.734, "B200-180G": 0.763}
#: GPUs without a measured row take a sibling's figure (same die and power class), stated as such.
MAMF_BORROWED: dict[str, str] = {
    "A800-SXM-80G": "A100-SXM-80G",
    "H800-SXM-80G": "H100-SXM-80G", "H200-SXM-141G": "H100-SXM-80G", "H100-PCIe-80G": "H100-SXM-80G",
    "H100-NVL-94G": "H100-SXM-80G", "H20-96G": "H100-SXM-80G",
    # Meta's Grand Teton H100 (96 GB HBM2e, 500 W; torchtitan benchmarks/llama3_h100_202412_torchtitan.md),
    # built by benchmarks/plan_vs_published.py: the same die as the SXM part
    "H100-SXM-96G-HBM2e-500W": "H100-SXM-80G",
}
#: Any other GPU: the A100 PCIe figure (the lowest measured NVIDIA data-centre row), an assumption.
DEFAULT_MAMF_BF16 = 0.811

#: Streaming multiprocessors (AMD: compute units of one GCD), for wave quantization. NVIDIA
#: architecture whitepapers (Hopper: H100 SXM5 132, PCIe 114; Ampere GA100 108, GA102 RTX 3090 82,
#: A6000 84, GA102 A10 72; Ada AD102 RTX 4090 128, L40S 142, AD104 L4 58; Volta V100 80; Turing T4 40;
#: Blackwell B200 148, ml-engineering ``training/performance/README.md`` "Do more SMs give more TFLOPS?");
#: AMD CDNA3 whitepaper (MI300X 304 CUs), CDNA2 (MI250X 110 CUs per GCD); H20's 78 from the catalog row.
SM_COUNT: dict[str, int] = {
    "H100-SXM-80G": 132, "H100-PCIe-80G": 114, "H100-NVL-94G": 132, "H800-SXM-80G": 132,
    "H200-SXM-141G": 132, "H20-96G": 78,
    "A100-SXM-80G": 108, "A100-PCIe-80G": 108, "A100-SXM-40G": 108, "A100-PCIe-40G": 108, "A800-SXM-80G": 108,
    "L40S-48G": 142, "L4-24G": 58, "A10-24G": 72, "A6000-48G": 84, "RTX-4090-24G": 128, "RTX-3090-24G": 82,
    "V100-SXM2-32G": 80, "V100-SXM2-16G": 80, "T4-16G": 40, "MI300X-192G": 304, "MI250X-GCD-64G": 110,
    "B200-180G": 148, "H100-SXM-96G-HBM2e-500W": 132,
}

#: Dense FP32 (no TF32: ``torch.backends.cuda.matmul.allow_tf32`` is False by default) TFLOP/s from the
#: vendor datasheets (as tabulated in Bekman's "TFLOPS comparison table"; Ampere/Ada/Volta/Turing
#: datasheets for the others). GPUs missing here have no fp32 step time.
FP32_TFLOPS: dict[str, float] = {
    "H100-SXM-80G": 67.0, "H800-SXM-80G": 67.0, "H200-SXM-141G": 67.0, "H100-PCIe-80G": 51.0,
    "A100-SXM-80G": 19.5, "A100-PCIe-80G": 19.5, "A100-SXM-40G": 19.5, "A100-PCIe-40G": 19.5, "A800-SXM-80G": 19.5,
    "L40S-48G": 91.6, "B200-180G": 80.0, "MI300X-192G": 163.4, "V100-SXM2-32G": 15.7, "V100-SXM2-16G": 15.7,
    "T4-16G": 8.1, "RTX-4090-24G": 82.6, "RTX-3090-24G": 35.6, "A6000-48G": 38.7, "A10-24G": 31.2, "L4-24G": 30.3,
}

#: Achieved fraction of the HBM bandwidth by large pointwise kernels (torchao roofline, H100: "would
#: hit about 2.2k GBPS" of 2.4 TB/s); used for every GPU.
HBM_EFFICIENCY = 0.92
#: Least GPU time of any kernel, seconds (torchao roofline: a one-element Triton kernel on H100).
KERNEL_FLOOR_SECONDS = 2e-6
#: Fixed GPU time of one GEMM kernel beyond its roofline time (prologue, pipeline fill, epilogue, tail):
#: least-squares value of t = max(2mnk / (peak · MAMF · wave_eff), bytes / HBM) + t₀ over 21 ``sm_90`` entries
#: of the XLA GEMM table (b·m ≥ 256, k ≥ 512; 4.0 µs: median error +0.5 %, 5.0 µs: +2.6 %; 4.5 µs taken:
#: median +1.6 %, range −19.7 % at k = 512 to +6.3 %). ``tests/perf/test_kernels.py`` checks the model
#: against those entries.
GEMM_FIXED_SECONDS = 4.5e-6
#: Output tile of the cuBLAS kernels assumed for tile and wave quantization (NVIDIA, "Matrix
#: Multiplication Background User's Guide", §2.3 and §3: 128×128 is the typical large tile).
GEMM_TILE = 128
#: Assumption: when the output has fewer tiles than SMs, cuBLAS splits k (split-K) into slices of this
#: depth to fill the GPU. Not measured; it only matters for GEMMs smaller than one wave.
SPLIT_K_DEPTH = 2048
#: Throughput of a GEMM whose k or n is not a multiple of 8 relative to an aligned neighbour: H100,
#: [b·h]×[h, d_ff] with h = 4096, d_ff = 10922 → 272.7 TFLOP/s vs 10944 → 398.4 TFLOP/s (Bekman,
#: ``training/performance/README.md`` "SwiGLU-based MLP", swiglu-maf-bench.py).
MISALIGNED_GEMM_FACTOR = 272.73 / 398.38

#: Attention kernels: fraction of the 16-bit peak approached at long key lengths, forward pass.
#: ``fa3``: FlashAttention-3 / cuDNN fused attention on Hopper (Transformer Engine): 0.64, the
#: asymptote of the FA3 sweep above (621 TFLOP/s at 16k keys of 989). ``fa2-hopper``: FlashAttention-2
#: (torch SDPA's flash backend, the first in its default priority order, torch 2.13) on Hopper, 0.35
#: (FlashAttention-3 abstract). ``fa2``: FlashAttention-2 on Ampere/Ada, 0.70 (the top of the 50–73 %
#: of the FlashAttention-2 abstract; the sweep's saturation below takes it lower at short sequences).
#: ``other``: memory-efficient SDPA kernels elsewhere (Volta, Turing, AMD), 0.35, an assumption.
#: ``triton-*``: flash-attn's Triton FlashAttention (flash_attn/flash_attn_triton.py, flash-attn v1.0; vendored
#: by llm-foundry on the pre-MLIR Triton, llmfoundry/models/layers/flash_attn_triton.py) at
#: TRITON_ATTENTION_FACTOR of FlashAttention-2 on the same GPU (on Hopper it is mma.sync-class code, as
#: FlashAttention-2 is). Calibrated, below.
#: Calibrated: the Triton kernel's share of FlashAttention-2's efficiency. The sources bound it: its header says
#: "Overall Triton forward + backward is slightly slower than CUDA forward + backward" (FlashAttention-1) while
#: "Triton forward is generally faster than CUDA forward", and FlashAttention-1 reaches "25-40%" of the peak
#: where FlashAttention-2 reaches "50-73%" (Dao 2023, abstract): 0.34-0.80. Within it, 0.70 is the optimum
#: (mean |ln ratio| 2.7 %, grid 0.50-0.80 by 0.02) over the 21 rows of llm-foundry's H100 BF16 table of models of
#: 760M-13B at 4k-64k tokens (``benchmarks/llm_foundry_h100_rows.json``, none a point of
#: published_throughput.json; ``benchmarks/plan_vs_published.py --calibrate-triton`` re-runs it).
TRITON_ATTENTION_FACTOR = 0.70
ATTN_MAX_EFFICIENCY: dict[str, float] = {"fa3": 0.64, "fa2-hopper": 0.35, "fa2": 0.70, "other": 0.35}
ATTN_MAX_EFFICIENCY.update({"triton-" + k: v * TRITON_ATTENTION_FACTOR for k, v in tuple(ATTN_MAX_EFFICIENCY.items())
                            if k in ("fa2", "fa2-hopper")})
#: Keys per query at which an attention kernel reaches half its asymptotic efficiency:
#: efficiency = max · s/(s + s½). Fitted on the two H100 forward sweeps above (s½ = 238 and 243).
ATTN_HALF_SATURATION_KEYS = 240.0
#: Assumption: the backward kernel runs at this fraction of the forward's efficiency (FlashAttention-2
#: and -3 report slower backward than forward passes; no single figure was retrieved).
ATTN_BACKWARD_EFFICIENCY_RATIO = 0.8
#: The flash backward does 2.5× the forward's matmul FLOPs (recomputes QKᵀ; dV, dP, dQ, dK):
#: flash-attention ``benchmarks/benchmark_flash_attention.py`` counts bwd FLOPs = 2.5 × fwd.
ATTN_BACKWARD_FLOP_RATIO = 2.5

#: DeepSpeedCPUAdam throughput of one node's CPUs, parameters per second. Assumption of the order the
#: ZeRO-Offload paper (Ren et al. 2021, §5) reports for CPU-Adam on a two-socket host (1–2 billion
#: parameters per second per socket); the exact table could not be retrieved here.
CPU_ADAM_PARAMS_PER_SECOND_PER_NODE = 3.0e9
#: torch's CPU AdamW (FSDP2 CPUOffloadPolicy, Megatron's CPU optimizer) relative to DeepSpeedCPUAdam:
#: "DeepSpeedCPUAdam is 5X–7X faster than the standard PyTorch implementation" (DeepSpeed ZeRO-Offload
#: tutorial, docs/_tutorials/zero-offload.md); the middle, 6.
TORCH_CPU_ADAM_SLOWDOWN = 6.0


def arch_of(gpu_name: str) -> str:
    """``hopper`` | ``ampere`` | ``ada`` | ``blackwell`` | ``volta`` | ``turing`` | ``cdna`` | ``other``, from
    the catalog name (H100/H800/H200/H20; A100/A800/A10/A6000/RTX-30xx; L4/L40S/RTX-40xx/RTX-6000-Ada …)."""
    n = gpu_name.upper()
    if n.startswith(("H100", "H800", "H200", "H20")):
        return "hopper"
    if n.startswith("B200") or n.startswith("B100") or n.startswith("GB"):
        return "blackwell"
    if n.startswith(("A100", "A800", "A10", "A6000", "RTX-30", "A40", "A30")):
        return "ampere"
    if n.startswith(("L40", "L4", "RTX-40", "RTX-6000-ADA")):
        return "ada"
    if n.startswith("V100"):
        return "volta"
    if n.startswith("T4"):
        return "turing"
    if n.startswith("MI"):
        return "cdna"
    return "other"


#: Compute slowdown while a collective runs concurrently (NCCL kernels take SMs, L2 and HBM bandwidth):
#: 18.9 %, the average of Lee et al. 2025 (arXiv 2507.03114) over A100, H100, MI250 and MI210. Applied to the
#: compute that a hidden collective overlaps (trainmem.perf.overlap).
OVERLAP_CONTENTION = 0.189

# ---------------------------------------------------------------------------------------------------------
# Calibrated constants. Nothing above is fitted to published training throughput; these two are, on the
# HELD-IN points only (``is_held_in``; 14 points once the unexpressible ones are excluded): a grid search
# (SUSTAINED_FRACTION 0.78–0.90 by 0.01 × STEP_OVERHEAD_SECONDS 0–0.20 s by 0.01 s) minimising the mean
# |ln(predicted / measured)| of tokens/s/GPU over them; ``benchmarks/plan_vs_published.py --calibrate`` re-runs
# it. Result: 0.83 and 0.10 s (held-in mean |ln ratio| 6.8 %, median |error| 6.0 %; 0.84 before the interleaved
# torchtitan 405B point became expressible with its uneven split). A third candidate, a
# per-layer per-pass host overhead, was tried and dropped: at the optimum it lowers no held-in error. The
# held-out points (A100 Megatron-LM 2021, NeMo/Megatron-Bridge, llm-foundry, BLOOM, MT-NLG) never enter the fit.
# ---------------------------------------------------------------------------------------------------------

#: Fraction of the isolated-kernel throughput (MAMF GEMMs, FlashAttention sweeps) that tensor-core kernels
#: sustain inside a training step, for every GPU. What it stands for, with published sizes: sustained clocks
#: under the power limit while HBM, NVLink and NICs also draw power (the MAMF loop runs one GEMM shape with
#: the rest of the chip idle); the slowest of the job's GPUs setting the pace (Bekman, ml-engineering
#: ``compute/accelerator/README.md`` "Not all accelerators are created equal": 5 % and more MAMF spread within
#: one 8-GPU node); the real shapes' cuBLAS heuristics (the MAMF figure is the best shape of a sweep).
#: Calibrated (see above).
SUSTAINED_FRACTION = 0.84
#: Host-side time per optimizer step outside the micro-batches, seconds: data loading, the loss and
#: gradient-norm host synchronisations (``.item()``), logging, the optimizer's kernel launches. Calibrated (see
#: above); it only matters for short steps (a 0.5 s step of a 1.7B model: 20 %; a 10 s step: 1 %).
STEP_OVERHEAD_SECONDS = 0.10

#: torchtitan's async TP (``async_tp``): the share of the tensor-parallel time that a full chunked overlap would hide
#: (trainmem.perf.overlap.chunked_overlap_seconds, as for Megatron's --tp-comm-overlap) that inductor's
#: micro-pipelined all-gather-matmul / matmul-reduce-scatter does hide. Fitted on the one published pair that
#: differs in async TP alone — torchtitan's Llama-3.1-70B on 256 H100s, FSDP 32 × TP 8, 829 → 876 tokens/s/GPU
#: (benchmarks/llama3_h100_202412_torchtitan.md, points tt-70b-fsdp32-tp8 and its -asynctp twin): the value
#: whose predicted ratio equals the measured 1.057 (0.338, rounded). Full hiding would predict 1.19; the PyTorch async-TP post
#: (2024) likewise reports ~8 % end to end for 70B-size runs against ~29 % on the forward alone.
ASYNC_TP_HIDDEN_SHARE = 0.34

#: The calibration split: point ids starting with these are held in (Megatron-Core's H100 table of the
#: Megatron-LM README, Mixtral in the Megatron-Core MoE README; torchtitan's H100 benchmarks); every other
#: point of benchmarks/published_throughput.json is held out.
HELD_IN_PREFIXES = ("mcore-h100-", "tt-")


def is_held_in(point_id: str) -> bool:
    """Whether a published point (by its id) is in the calibration's held-in subset."""
    return point_id.startswith(HELD_IN_PREFIXES)
