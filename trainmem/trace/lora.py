"""LoRA as a PEFT user sets it up, applied to the traced model (PEFT 0.21.2, on fake tensors).

trainmem's LoRA setup (the estimator models the same, ``memory/activations.py`` ``_lora_terms``):

- the frozen base is loaded in 16 bits for every 16-bit recipe (``from_pretrained(..., dtype=bfloat16)``,
  as PEFT/TRL examples do): ``bf16`` trains without autocast, ``amp-bf16`` / ``amp-fp16`` wrap the
  forward in ``torch.autocast`` (HF Trainer with ``bf16=True``); ``fp32`` keeps an fp32 base;
- ``get_peft_model(model, LoraConfig(r, lora_alpha=16, lora_dropout=0.0, bias="none",
  target_modules=...))`` with ``autocast_adapter_dtype=True`` (the default): adapters in fp32;
  ``--adapter-dtype bf16``: ``autocast_adapter_dtype=False``, adapters in the base's dtype (torchtune's);
  ``lora_dropout`` 0.0 is LoraConfig's default (PEFT ``tuners/lora/config.py``);
- with ``--recompute full``: gradient checkpointing (non-reentrant) and
  ``model.enable_input_require_grads()``, as HF Trainer / ``prepare_model_for_kbit_training`` do;
  without it the embedding output does not require grad (nothing before the first adapter is saved).

The transformers model itself (with the adapters injected in place) is returned, not the ``PeftModel``
wrapper: ``PeftModelForCausalLM.forward`` calls the same module for LoRA, and the tracer's hooks (loss
phase, module names) stay those of the plain model.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["LORA_ALPHA", "LORA_DROPOUT", "lora_base_dtype", "adapter_torch_dtype", "apply_lora", "inject_lora"]

LORA_ALPHA = 16
LORA_DROPOUT = 0.0
"""LoraConfig's default; the tracer uses the setup's ``lora_dropout``."""
_BASE_16 = {"bf16": torch.bfloat16, "amp-bf16": torch.bfloat16, "fp16": torch.float16, "amp-fp16": torch.float16}


def lora_base_dtype(setup: "TrainingSetup") -> torch.dtype:
    """dtype of the frozen base model: 16-bit for every 16-bit recipe (autocast ones included), else fp32."""
    return _BASE_16.get(setup.precision, torch.float32)


def adapter_torch_dtype(setup: "TrainingSetup") -> torch.dtype:
    """The adapters' dtype: fp32 (PEFT's ``autocast_adapter_dtype=True``) or the base's 16-bit dtype."""
    return torch.bfloat16 if setup.adapter_dtype == "bf16" else torch.float32


def apply_lora(model: nn.Module, spec: "ModelSpec", setup: "TrainingSetup") -> nn.Module:
    """Inject PEFT LoRA adapters into ``model`` (in place) and return it; only adapters require grad."""
    from trainmem.model.lora_targets import peft_target_modules

    return inject_lora(model, peft_target_modules(spec, setup.lora_targets), setup)


def inject_lora(model: nn.Module, target: str | list[str], setup: "TrainingSetup") -> nn.Module:
    """:func:`apply_lora` on ``LoraConfig.target_modules`` given (derive_seq2seq.py probes its copy so)."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.tuners_utils import BaseTunerLayer

    if setup.recompute == "full":
        model.enable_input_require_grads()
    config = LoraConfig(r=setup.lora_rank, lora_alpha=LORA_ALPHA, lora_dropout=setup.lora_dropout, bias="none",
                        target_modules=target)
    adapter_dtype = adapter_torch_dtype(setup)
    # PEFT moves each new adapter to the base layer's device and dtype (Module.to), then upcasts it to fp32
    # (autocast_adapter_dtype). Module.to swaps FakeTensor parameters (torch.utils.swap_tensors), which
    # fails on the tracked fake tensors; the adapters are created fp32 on the base's (fake) device already,
    # so skipping the move (and device moves that change nothing) gives the same end state: fp32
    # adapters next to the base.
    move, to = BaseTunerLayer._move_adapter_to_device_of_base_layer, nn.Module.to

    def same_device_to(self: nn.Module, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        if dtype is None and all(device is None or t.device == torch.device(device) for t in tensors):
            return self
        return to(self, *args, **kwargs)

    # 16-bit adapters (``autocast_adapter_dtype=False``): PEFT's move would cast them to the base's dtype; they are
    # created in it instead (nn.Linear takes the default dtype).
    BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda self, *args, **kwargs: None
    nn.Module.to = same_device_to
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(adapter_dtype)
    try:
        with warnings.catch_warnings():  # PEFT's own chatter would corrupt --json users' logs
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            warnings.filterwarnings("ignore", message="fan_in_fan_out is set to False.*")  # GPT-2's Conv1D
            warnings.filterwarnings("ignore", message=".*tie_word_embeddings.*")  # lm_head on a tied model
            peft_model = get_peft_model(model, config, autocast_adapter_dtype=adapter_dtype == torch.float32)
    finally:
        torch.set_default_dtype(default_dtype)
        BaseTunerLayer._move_adapter_to_device_of_base_layer = move
        nn.Module.to = to
    bad = [n for n, p in model.named_parameters() if p.requires_grad and (p.dtype != adapter_dtype or "lora_" not in n)]
    if bad:
        raise RuntimeError(f"LoRA set-up: trainable parameters other than {adapter_dtype} adapters: {bad[:3]}")
    return peft_model.get_base_model()
