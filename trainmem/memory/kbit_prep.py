"""The frozen 16-bit weights a framework casts to fp32 before LoRA / QLoRA training (``--kbit-prep``).

Read from the frameworks' sources:

- PEFT ``prepare_model_for_kbit_training`` (peft/utils/other.py, 0.4 through 0.21.2 and main @ 781cac46): every
  parameter whose dtype is float16 or bfloat16 and whose class is not ``Params4bit`` gets
  ``param.data = param.data.to(torch.float32)`` (bitsandbytes' ``Int8Params`` are int8, so untouched): with a
  4-bit or 8-bit base that is the embeddings, the norms and the LM head (``llm_int8_skip_modules`` keeps lm_head
  16-bit); with an unquantized base, the whole base. ``--kbit-prep peft``.
- TRL ``SFTTrainer`` 0.8–0.21 (trl/trainer/sft_trainer.py): calls it for a k-bit model unless sharded QLoRA
  (``is_sharded_qlora``: the Params4bit on cpu/meta, FSDP / ZeRO-3), then with ``bf16``
  ``peft_module_casting_to_bf16`` (trl/trainer/utils.py): norms to fp32, ``lm_head`` / ``embed_tokens`` back to
  bf16 (and, in 0.8.x only, the LoRA layers to bf16): ``--kbit-prep norms-fp32``. TRL 0.22 on (1.16.0 included)
  calls neither; from 0.26 it casts a quantized model's trainable parameters to bf16 instead
  (``param.data = param.data.to(torch.bfloat16)``: the trl stack's ``adapter_dtype`` bf16 with ``--qlora``).
- axolotl (src/axolotl/utils/models.py @ dc71d887, loaders/model.py @ eac4a61f and v0.18.0): calls it for qlora /
  8-bit LoRA, then converts the norms, ``lm_head`` and ``embed_tokens`` back to the torch dtype (2023: with
  flash attention; since the loaders: for every LoRA / QLoRA run that is not QLoRA + FSDP): nothing stays fp32.
- LLaMA-Factory (src/llamafactory/model/model_utils/checkpointing.py ``prepare_model_for_training``, v0.9.5): does
  not call it; ``upcast_layernorm: true`` (default false) casts the 1-D norm weights to fp32: ``norms-fp32``.
- ms-swift 1.x (swift/llm/sft.py, swift/llm/tuner.py @ 4312aeb2) and v4.5.2: does not call it (only
  ``fix_fp16_trainable_bug``: trainable fp16 parameters to fp32).

The weights' fp32 copies are counted here; of what they do to the activations, only the checkpointed layer inputs
(``--recompute full``) under ``peft``: an fp32 embedding makes the residual stream fp32 (the adds promote) and
bitsandbytes' ``Linear4bit`` casts its input to its compute dtype and its output back to the input's dtype
(``.to(inp_dtype)``, bitsandbytes/nn/modules.py 0.42.0 through 0.50), so every layer reads an fp32 hidden state
(memory/layers/model_wide.py ``checkpoint_input_elem_bytes``). Not modelled: the fp32 tensors inside the layers
(an fp32 norm weight makes its output fp32: HF's RMSNorm returns ``weight * hidden.to(input_dtype)``; q/k/v and
the MLP's outputs follow their fp32 inputs), the fp32 logits of an fp32 LM head outside autocast and, under
autocast (HF Trainer ``bf16=True``), the 16-bit copy of the fp32 head weight that each ``F.linear`` makes (frozen
weights are not in autocast's cache: aten/src/ATen/autocast_mode.cpp caches leaves that require grad). Under
``norms-fp32`` the stream turns fp32 inside layer 0 (its fp32 norm output feeds the linears, the residual add
promotes): the checkpointed inputs of the layers after it are fp32. :data:`KBIT_PREP_NOTES` says so in the
assumptions.
"""

from __future__ import annotations

from trainmem.memory.states import RankParams, layers_of_stage
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["kbit_prep_fp32_extra_bytes", "kbit_prep_upcast_params", "rank_norm_params", "KBIT_PREP_NOTES"]

#: The assumption line of each cast that changes something.
KBIT_PREP_NOTES = {
    "peft": "kbit prep peft (prepare_model_for_kbit_training): the frozen weights that are not quantized "
            "(embeddings, norms, LM head) held in fp32, and the fp32 residual stream's checkpointed layer inputs "
            "(--recompute full); the other fp32 activations it leads to (inside the layers, norm outputs, logits) "
            "and autocast's 16-bit copy of the fp32 LM head are not modelled",
    "norms-fp32": "kbit prep norms-fp32: the norm weights held in fp32 (TRL <= 0.21 peft_module_casting_to_bf16, "
                  "LLaMA-Factory upcast_layernorm), and the checkpointed inputs of the layers after the first in "
                  "fp32 (--recompute full); the other fp32 activations they lead to are not modelled",
}


def kbit_prep_fp32_extra_bytes(n_upcast: int) -> int:
    """Bytes added by casting ``n_upcast`` 16-bit parameters to fp32 in place (``param.data =
    param.data.to(torch.float32)``, peft/utils/other.py ``prepare_model_for_kbit_training``): 4 - 2 = 2 B each.
    The 16-bit storage is freed (the caching allocator keeps it; not counted)."""
    return 2 * n_upcast


def rank_norm_params(spec: ModelSpec, s: TrainingSetup, rp: RankParams) -> int:
    """Norm parameters this rank holds: each decoder layer's norms plus the final norm on the last stage
    (trainmem/model/spec.py ParamCount ``layers[i].norms``, ``final_norm``)."""
    pc = spec.params
    last = rp.stage == s.pp - 1
    return sum(pc.layers[i].norms for i in layers_of_stage(spec, s, rp.stage)) + (pc.final_norm if last else 0)


def kbit_prep_upcast_params(spec: ModelSpec, s: TrainingSetup, rp: RankParams) -> int:
    """Parameters of this rank that ``s.kbit_prep`` casts from 16 bits to fp32. ``peft``: every frozen parameter
    that is not quantized (NF4 / LLM.int8 linears are not floating point; the adapters do not exist yet:
    PEFT and TRL call it before ``get_peft_model``); ``norms-fp32``: the norms; ``none``: 0."""
    if s.kbit_prep == "peft":
        return rp.total - rp.trainable - rp.frozen_quantized
    if s.kbit_prep == "norms-fp32":
        return rank_norm_params(spec, s, rp)
    return 0
