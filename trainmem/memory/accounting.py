"""Other accountings of model-state memory, so that trainmem can show where each one differs.

None of these is what trainmem reports (it simulates what the engine really allocates); they are here
to reproduce the published figures and to explain the gaps (``trainmem explain``).
"""

from __future__ import annotations

__all__ = ["seed_model_states_bytes", "seed_zero_bytes", "zero_paper_bytes", "deepspeed_estimator_gpu_bytes",
           "seed_activation_bytes", "korthikanti_layer_activation_bytes", "megatron_theoretical_bytes"]


def seed_model_states_bytes(n_params: int) -> int:
    """The seed article (§1.2, §4.1): FP16 params 2 + FP32 master 4 + FP16 grads 2 + Adam 8 = 16 B/param."""
    return 16 * n_params


def seed_zero_bytes(n_params: int, stage: int, n_gpus: int) -> int:
    """The seed's ZeRO arithmetic (§2.4, §4.1): stage 1 shards Adam (8 B), stage 2 also the FP16 grads
    (2 B); the FP32 master copy (4 B) stays whole on every GPU; stage 3 also shards the FP16 params.
    7B, stage 2, 8 GPUs: 14 + 28 + 14/8 + 56/8 = 50.75 GB."""
    p = n_params
    if stage == 0:
        return 16 * p
    if stage == 1:
        return 2 * p + 4 * p + 2 * p + 8 * p // n_gpus
    if stage == 2:
        return 2 * p + 4 * p + (2 * p + 8 * p) // n_gpus
    return 4 * p + (2 * p + 2 * p + 8 * p) // n_gpus


def zero_paper_bytes(n_params: int, stage: int, n_gpus: int, k: int = 12) -> int:
    """Rajbhandari et al. 2020, Figure 1: P_os 4Ψ + KΨ/N; P_os+g 2Ψ + (2+K)Ψ/N; P_os+g+p (4+K)Ψ/N;
    K = 12 for mixed-precision Adam (fp32 master, momentum, variance)."""
    p = n_params
    if stage == 0:
        return (4 + k) * p
    if stage == 1:
        return 4 * p + k * p // n_gpus
    if stage == 2:
        return 2 * p + (2 + k) * p // n_gpus
    return (4 + k) * p // n_gpus


def deepspeed_estimator_gpu_bytes(n_params: int, stage: int, n_gpus: int, largest_layer_params: int = 0) -> int:
    """DeepSpeed's own estimators (no offload): ``estimate_zero2_model_states_mem_needs``
    (deepspeed/runtime/zero/stage_1_and_2.py): 2P + 18P/N, "18 = 2 grads_16bit + 4 grads_32bit +
    4 params_32bit + 8 optimizer_states_32bit"; ``estimate_zero3_model_states_mem_needs``
    (stage3.py): 4·largest_layer + 18P/N. DeepSpeed has no ZeRO-1 estimator; stage 1 uses stage 2's."""
    if stage == 3:
        return 4 * largest_layer_params + 18 * n_params // n_gpus
    return 2 * n_params + 18 * n_params // n_gpus


def megatron_theoretical_bytes(n_params: int, dp: int, distributed_optimizer: bool) -> int:
    """megatron/training/theoretical_memory_usage.py: 18 B/param, or 6 + 12/dp with the distributed optimizer."""
    if distributed_optimizer:
        return 6 * n_params + 12 * n_params // dp
    return 18 * n_params


def seed_activation_bytes(micro_batch: int, seq_len: int, hidden: int, n_layers: int, elem_bytes: int = 2) -> int:
    """The seed's activation formula (§1.3): b·s·h·L·bytes — one hidden state per layer.
    7B (h=4096, L=32), s=2048, b=1, fp16: 536,870,912 B = 512 MiB (the seed says "512 MB")."""
    return micro_batch * seq_len * hidden * n_layers * elem_bytes


def korthikanti_layer_activation_bytes(micro_batch: int, seq_len: int, hidden: int, heads: int,
                                       tp: int = 1, sp: bool = False, selective: bool = False) -> int:
    """Korthikanti et al. 2022, Table 2: bytes per layer, 16-bit, GPT block (4h GeLU MLP, dropout):
    s·b·h·(34 + 5·a·s/h); with TP t: s·b·h·(10 + 24/t + 5·a·s/(h·t)); with TP + SP: ÷ t overall;
    selective recomputation drops the 5·a·s/h term."""
    s, b, h, a = seq_len, micro_batch, hidden, heads
    attn = 0 if selective else 5 * a * s / h
    if sp:
        per = (34 + attn) / tp
    else:
        per = 10 + 24 / tp + attn / tp
    return int(s * b * h * per)
