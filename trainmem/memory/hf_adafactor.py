"""transformers' own Adafactor (``--optimizer hf-adafactor``): HF Trainer ``optim="adafactor"``.

transformers 5.24.0 ``src/transformers/optimization.py`` ``class Adafactor`` (Trainer's handler
``trainer_optimizer.py`` ``_get_adafactor`` adds ``scale_parameter=False, relative_step=False``; ``beta1=None`` by
default, so no first moment). It is not ``torch.optim.Adafactor`` (trainmem's ``adafactor``, a foreach
implementation with a group-wide temporary):

- **state**, per parameter at its first step: a matrix (``len(shape) >= 2``) keeps ``exp_avg_sq_row``
  (``shape[:-1]``) and ``exp_avg_sq_col`` (``shape[:-2] + shape[-1:]``), a vector a full ``exp_avg_sq``, all in
  the dtype of ``grad``, which is upcast first (``if grad.dtype in {float16, bfloat16}: grad = grad.float()``):
  always fp32. ``state["RMS"]`` is a 0-d tensor (512 B a parameter; not counted, < 1 MiB on the models here).
- **step**, one parameter at a time (a Python loop, no foreach): ``update = (grad**2) + eps`` (``grad**2`` and
  the sum, two full-size fp32 tensors for a moment), ``update = self._approx_sq_grad(row, col)`` (the outer
  product is made while the previous ``update`` is still bound: two), ``p_data_fp32.add_(-update)`` (``-update``:
  two). A 16-bit parameter adds its fp32 copy (``p_data_fp32 = p.float()``) and the fp32 ``grad`` copy. So the
  step's transient peak is that of the largest trainable tensor: 8 B per element (fp32 parameters), 16 B (16-bit).

Core module: no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.states import adafactor_state_bytes

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["HF_ADAFACTOR", "hf_adafactor_state_bytes", "largest_trainable_numel", "hf_adafactor_step_temp_bytes",
           "hf_adafactor_bytes"]

HF_ADAFACTOR = "hf-adafactor"
#: The fp32 state / update element (grad.float()).
_F32 = 4


def _lora_matrices(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[int, int]]:
    """(rows, cols) of every LoRA matrix: lora_A (r × in) and lora_B (out × r) of each adapted linear."""
    from trainmem.model.lora_targets import targeted_head_linear, targeted_layer_linears, targeted_model_linears

    r = setup.lora_rank
    lins = [lin for idx in range(spec.num_layers) for lin in targeted_layer_linears(spec, setup.lora_targets, idx)]
    lins += list(targeted_model_linears(spec, setup.lora_targets))
    head = targeted_head_linear(spec, setup.lora_targets)
    lins += [head] if head else []
    return [m for lin in lins for m in ((r, lin.fin), (lin.fout, r))]


def hf_adafactor_state_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of transformers' Adafactor state: fp32 row + column factors per matrix, a full fp32 second moment
    per vector (module docstring); LoRA: the factors of every lora_A / lora_B. Each tensor is rounded up to the
    caching allocator's 512 B (a full fine-tune reuses :func:`trainmem.memory.states.adafactor_state_bytes`,
    whose factor shapes are the same)."""
    from trainmem.memory.states import round_up_bytes

    if not setup.is_lora:
        return adafactor_state_bytes(spec, _F32)
    return sum(round_up_bytes(_F32 * r) + round_up_bytes(_F32 * c) for r, c in _lora_matrices(spec, setup))


def largest_trainable_numel(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of the largest trainable parameter tensor: a LoRA matrix under LoRA; else the token embedding,
    the LM head, a layer's largest linear weight or a stacked routed-expert weight (``experts.gate_up_proj``
    (E, 2·i, h) in transformers 5.x)."""
    from trainmem.model.lora_targets import layer_linears

    if setup.is_lora:
        return max((r * c for r, c in _lora_matrices(spec, setup)), default=0)
    pc = spec.params
    sizes = [pc.embedding, pc.lm_head]
    for idx, lp in enumerate(pc.layers):
        sizes += [lin.fin * lin.fout for lin in layer_linears(spec, idx)]
        if lp.experts:
            sizes.append(2 * lp.experts // 3 if spec.mlp_gated else lp.experts // 2)
    return max(sizes)


def hf_adafactor_step_temp_bytes(largest_numel: int, param_elem_bytes: int) -> int:
    """Transient peak of ``Adafactor.step`` (transformers 5.24 optimization.py): two full-size fp32 tensors of the
    largest parameter (``update`` and the next one being computed), plus, for a 16-bit parameter, its fp32 copy
    ``p.float()`` and the fp32 ``grad.float()``."""
    upcast = 2 * _F32 * largest_numel if param_elem_bytes < _F32 else 0
    return 2 * _F32 * largest_numel + upcast


def hf_adafactor_bytes(spec: ModelSpec, setup: TrainingSetup, param_elem_bytes: int) -> tuple[int, int]:
    """(state bytes, step transient bytes) of transformers' Adafactor for the torch engine's model states."""
    return (hf_adafactor_state_bytes(spec, setup),
            hf_adafactor_step_temp_bytes(largest_trainable_numel(spec, setup), param_elem_bytes))
