"""Chinese for the messages of ``--kbit-prep`` (trainmem/memory/kbit_prep.py, its checks in trainmem/setup.py; format:
see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "kbit prep peft (prepare_model_for_kbit_training): the frozen weights that are not quantized "
    "(embeddings, norms, LM head) held in fp32, and the fp32 residual stream's checkpointed layer inputs "
    "(--recompute full); the other fp32 activations it leads to (inside the layers, norm outputs, logits) "
    "and autocast's 16-bit copy of the fp32 LM head are not modelled":
        "kbit prep peft（prepare_model_for_kbit_training）：未量化的冻结权重（embedding、norm、LM head）以 fp32 "
        "保存，并计入 fp32 残差流中被 checkpoint 的各层输入（--recompute full）；由此产生的其他 fp32 激活（层内、"
        "norm 输出、logits）以及 autocast 为 fp32 LM head 做的 16 位副本未建模",
    "kbit prep norms-fp32: the norm weights held in fp32 (TRL <= 0.21 peft_module_casting_to_bf16, "
    "LLaMA-Factory upcast_layernorm), and the checkpointed inputs of the layers after the first in "
    "fp32 (--recompute full); the other fp32 activations they lead to are not modelled":
        "kbit prep norms-fp32：norm 权重以 fp32 保存（TRL <= 0.21 peft_module_casting_to_bf16，"
        "LLaMA-Factory upcast_layernorm），第一层之后各层被 checkpoint 的输入为 fp32（--recompute full）；"
        "由此产生的其他 fp32 激活未建模",
    "kbit_prep peft: the quantized base's other weights are all fp32 (PEFT's prepare_model_for_kbit_training)":
        "kbit_prep peft：量化基座的其余权重全为 fp32（PEFT 的 prepare_model_for_kbit_training）",
    "precision bf16: the 4-bit linears compute in bnb_4bit_compute_dtype bfloat16 (the fp32 weights are PEFT's "
    "upcast)":
        "precision bf16：4 位线性层以 bnb_4bit_compute_dtype bfloat16 计算（fp32 权重来自 PEFT 的上转）",
    "kbit_prep norms-fp32: only the norm weights are fp32": "kbit_prep norms-fp32：只有 norm 权重为 fp32",
}

PATTERNS: list[tuple[str, str]] = [
    ("--kbit-prep {k:w} needs LoRA (--lora-rank > 0)", "--kbit-prep {k} 需要 LoRA（--lora-rank > 0）"),
    ("--kbit-prep {k:w} is modelled with --engine torch (TRL and axolotl skip prepare_model_for_kbit_training for "
     "sharded QLoRA: FSDP, ZeRO-3)",
     "--kbit-prep {k} 只在 --engine torch 下建模（分片 QLoRA：FSDP、ZeRO-3 时 TRL 和 axolotl 不调用 "
     "prepare_model_for_kbit_training）"),
    ("--kbit-prep {k:w} casts 16-bit weights to fp32: with --precision fp32 there are none",
     "--kbit-prep {k} 把 16 位权重转为 fp32：--precision fp32 时没有 16 位权重"),
]
