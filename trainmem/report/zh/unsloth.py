"""Chinese for unsloth's kernels (``--kernels unsloth``, ``--loss unsloth``: trainmem/memory/unsloth.py) and their
checks in trainmem/setup.py (format: see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

from trainmem.memory.unsloth import KERNELS_NOTE, LOSS_NOTE

EXACT: dict[str, str] = {
    "--kernels unsloth is unsloth's patched model under LoRA (get_peft_model: lora_dropout 0) on one process: it "
    "needs --lora-rank, no --lora-dropout and --engine torch":
        "--kernels unsloth 是 unsloth 在 LoRA 下打过补丁的模型（get_peft_model：lora_dropout 为 0），单进程运行："
        "需要 --lora-rank，不带 --lora-dropout，且 --engine torch",
    "--loss unsloth (unsloth's cross-entropy kernel) with tp, cp or megatron is not modelled":
        "--loss unsloth（unsloth 的交叉熵 kernel）与 tp、cp 或 megatron 的组合未建模",
    KERNELS_NOTE:
        "unsloth 的 kernel（unslothai/unsloth @ ef70177a24 (2023-12-23)）：fast RMSNorm 保存其 16 位输入和每行一个 fp32 "
        "rstd（kernels/rms_layernorm.py），RoPE 原地计算、不按 token 保存任何张量（rope_embedding.py）；当 gate+up+down / "
        "q+k+v / o 全部带 LoRA 时，LoRA_MLP / LoRA_QKV / LoRA_W 取代 PEFT（kernels/fast_lora.py：MLP 保存 X、e、g；"
        "QKV 保存 X；O 保存注意力 kernel 已保存的注意力输出）",
    LOSS_NOTE:
        "unsloth 的 fast_cross_entropy_loss（unslothai/unsloth @ ef70177a24 (2023-12-23) kernels/cross_entropy_loss.py）："
        "16 位 logits 原样保存，每个 token 一个 fp32 logsumexp，梯度原地写回 logits",
}

PATTERNS: list[tuple[str, str]] = [
    ("--kernels unsloth: unsloth (ef70177a24) patches Llama and Mistral models; not {t}",
     "--kernels unsloth：unsloth（ef70177a24）只给 Llama 和 Mistral 模型打补丁；{t} 不在其中"),
]
