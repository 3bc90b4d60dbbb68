"""The assumptions a step-time prediction rests on, one sentence each (Chinese in trainmem/report/zh/perf.py)."""

from __future__ import annotations

__all__ = ["_NOTE", "borrowed_mamf_note"]

_NOTE: dict[str, str] = {
    "kernels": "GEMMs run at the GPU's measured achievable matmul fraction (MAMF) times the share sustained in "
               "training (calibrated on published runs), with tile and wave quantization and a fixed cost per GEMM; "
               "memory-bound ops at 92 % of the HBM bandwidth (torchao roofline); eager mode without torch.compile "
               "except under torchao float8.",
    "fused": "Megatron with Transformer Engine: fused QKV and fc1 GEMMs and fused norm, RoPE, SwiGLU and "
             "bias-dropout-add kernels.",
    "hf": "transformers modules in eager mode: unfused RMSNorm, rotary embedding and activation kernels.",
    "fa3": "Attention runs FlashAttention-3-class kernels (cuDNN fused attention under Transformer Engine) on the "
           "causal half of the score matrix.",
    "fa2": "Attention runs FlashAttention-2 kernels (the flash backend of torch SDPA) on the causal half of the "
           "score matrix.",
    "other": "Attention runs a memory-efficient fused kernel at an assumed 35 % of the 16-bit peak.",
    "triton": "Attention runs flash-attn's Triton FlashAttention (llm-foundry attn_impl triton) at half of "
              "FlashAttention-2's efficiency on the causal half of the score matrix.",
    "eager": "Eager attention: batched matmuls over the whole score matrix and an fp32 softmax.",
    "tp": "Tensor-parallel collectives are exposed (no async-TP or --tp-comm-overlap); with sequence parallelism "
          "their volume equals the all-reduce's.",
    "tp-overlap": "Megatron with sequence parallelism runs --tp-comm-overlap, as the published recipes do: each "
                  "tensor-parallel collective is pipelined with its GEMM in tp chunks, one chunk stays exposed.",
    "tp-async": "torchtitan's async TP micro-pipelines each tensor-parallel all-gather and reduce-scatter with its "
                "matmul in tp chunks (inductor's micro_pipeline_tp, under torch.compile); one chunk stays exposed.",
    "contention": "Communication hidden under compute slows that compute by 18.9 % while both run (Lee et al. 2025); "
                  "the extra time is counted as communication.",
    "step": "Each optimizer step adds a fixed host overhead (data loading, host synchronisations, logging), "
            "calibrated on published runs and counted with the optimizer.",
    "cp": "Context parallelism exchanges K and V around the ring while each chunk's attention runs; only the excess "
          "is exposed.",
    "ep": "Expert-parallel all-to-alls (dispatch and combine) are exposed, and routing is assumed balanced.",
    "moe": "MoE routing is assumed balanced: every expert gets top-k times tokens divided by E rows.",
    "ddp": "DDP all-reduces the gradients once per step (no_sync during accumulation), overlapped with the last "
           "backward except the last 25 MiB bucket.",
    "fsdp2": "FSDP2 (torchtitan) all-gathers parameters and reduce-scatters fp32 gradients every micro-batch, "
             "overlapped layer by layer with compute.",
    "fsdp2-pp": "FSDP2 under pipeline parallelism gathers parameters once per step and reduce-scatters gradients "
                "once after the last backward.",
    "megatron": "Megatron runs with --overlap-grad-reduce and --overlap-param-gather (as the published recipes do) "
                "and reduces bf16 gradients in fp32.",
    "deepspeed": "DeepSpeed keeps overlap_comm at its default (off for ZeRO-0/1/2, on for ZeRO-3) and reduces "
                 "16-bit gradients.",
    "ds-pipe": "Megatron-DeepSpeed: DeepSpeed's PipelineEngine blocks on each pipeline send and receive (4 per "
               "micro-batch on an interior stage, each TP rank sending 1/tp and all-gathering the rest), bf16 "
               "accumulates every micro-batch's gradients into fp32 (BF16_Optimizer), and the gradient all-reduce, "
               "the tied-embedding all-reduce and the parameter all-gather run after the pipeline flush.",
    "bubble": "The pipeline bubble is (pp - 1) / vpp micro-batch times of the slowest stage (Narayanan et al. "
              "2021, section 2.2).",
    "pp": "Pipeline sends and receives are exposed each micro-batch, except Megatron's interleaved schedule, "
          "which overlaps them after the warm-up.",
    "full": "Full recomputation re-runs each layer's forward, with its tensor-parallel and expert-parallel "
            "communication, in the backward.",
    "selective-megatron": "Selective recomputation (Megatron) re-runs each layer's attention core in the backward.",
    "selective-sac": "Selective recomputation (torchtitan op-level SAC) re-runs every second matmul and all "
                     "memory-bound ops of each layer in the backward.",
    "fp8-te": "fp8 (Transformer Engine): the layers' linear GEMMs run in fp8 at the measured fp8 matmul fraction, "
              "casts fused into the producing kernels and weights cast once per step; attention, router and LM head "
              "stay 16-bit.",
    "fp8-torchao": "fp8 (torchao rowwise float8 with compiled casts): the layers' linear GEMMs run in fp8, inputs, "
                   "gradients and weights cast every micro-batch; attention, router and LM head stay 16-bit.",
    "fp32-tp": "torchtitan applies no fully_shard to tensor parallelism without data or context parallelism "
               "(dp = cp = 1) and then disables mixed precision (maybe_enable_amp: \"Mixed precision training with "
               "TP or PP is only supported when FSDP/HSDP/CP is enabled\"), so this recipe computes in fp32 at the "
               "fp32 (non-TF32) peak, and MFU is against the 16-bit peak it asks for; dp or cp of 2 or more, or "
               "the pure bf16 recipe (torchtitan training.dtype = bfloat16), computes in 16 bits.",
    "amp": "torch autocast casts every fp32 weight to 16 bits in each forward and keeps the residual stream in fp32.",
    "offload": "The CPU optimizer runs at an assumed 3 billion parameters per second per node (DeepSpeedCPUAdam; "
               "torch's CPU AdamW 6 times slower), over the GPU's host link.",
    "lora": "LoRA: the frozen base weights skip their weight-gradient GEMMs and the adapters run as small GEMMs.",
    "qlora": "QLoRA: each NF4 weight is dequantised to 16 bits for the forward and for the input-gradient GEMM.",
    "placement": "Ranks are placed in Megatron's order tp-cp-ep-dp-pp; a group that spans nodes uses the inter-node "
                 "link at each GPU's share of the NICs.",
    "optimizer": "The optimizer step is memory-bound: the owned parameters' tensors are read and written once per "
                 "kernel pass.",
}


def borrowed_mamf_note(gpu: str) -> str:
    """The note for a GPU whose achievable GEMM fraction is borrowed from a sibling or the default."""
    notes = [f"gpu {gpu} has no published matmul benchmark; its achievable GEMM fraction is borrowed from a sibling "
             "GPU or the A100 PCIe figure"]
    return notes[0]
