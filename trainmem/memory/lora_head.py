"""LoRA on the output head (``--lora-targets ...,lm_head``): what its adapter keeps and makes, per micro-batch.

PEFT 0.21.2 ``tuners/lora/layer.py`` ``Linear.forward`` on the frozen head (h → V, T = b·s tokens)::

    result = self.base_layer(x)                      # the base logits, the base's dtype
    x = self._cast_input_dtype(x, lora_A.weight.dtype)
    result = result + lora_B(lora_A(dropout(x))) * scaling
    result = result.to(torch_result_dtype)           # back to the base's dtype: the logits

``lora_dropout`` 0 (PEFT's default, torchtune's configs): ``dropout`` is ``nn.Identity``, the adapter reads x
itself. ``lora_dropout`` > 0 (litgpt's default 0.05 with ``lora_head: true``; litgpt 0.5 ``lora.py``
``LoRALinear.forward``: ``self.lora_dropout(x) @ lora_A.T @ lora_B.T``, the same order as PEFT's): ``nn.Dropout``
on the (cast) input keeps its bool mask (torch ``native_dropout``, 1 B per element) and lora_A keeps the dropout's
output in place of x (:func:`head_dropout_saved_per_token`).
The base keeps no input (its weight is frozen); ``lora_A`` keeps its input, ``lora_B`` the rank
activation. Four dtype cases (``e``: bytes of an adapter activation element):

- bf16/fp16 base, fp32 adapters (PEFT's ``autocast_adapter_dtype=True``), no autocast: x is cast to an fp32 copy
  (kept by lora_A, 4·h), lora_B's output and its scaled copy are fp32 (4·V each) and the sum with the 16-bit
  base logits is fp32 (type promotion), cast back to 16 bits at the end;
- the same under autocast (amp recipes): the fp32 copy of x is a frame local (4·h, alive through the call),
  lora_A keeps autocast's 16-bit cast of it (2·h) and autocast's cache the 16-bit copies of both adapter
  weights (2·r·(h + V), saved by their matmuls); the adapter's outputs and the sum are 16-bit;
- 16-bit adapters (``adapter_dtype`` bf16: torchtune's ``LoRALinear``, PEFT ``autocast_adapter_dtype=False``):
  nothing is cast, lora_A keeps x itself (the final norm's output), everything is 16-bit;
- fp32: lora_A keeps x itself, everything is fp32.

torchtune's ``LoRALinear.forward`` (modules/peft/lora.py) computes ``out + lora_out`` the same way with its
adapters in the model's dtype (the 16-bit case). Checked against traced PEFT steps
(tests/trace/test_lora_head_trace.py).

Core module: no torch import.
"""

from __future__ import annotations

from trainmem.memory.layers.base import adapters_16bit, compute_bytes, is_amp
from trainmem.model.lora_targets import LoraLinear, targeted_head_linear
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["adapted_head", "head_adapter_keeps_input", "head_dropout_saved_per_token", "head_adapter_saved_bytes",
           "head_adapter_forward_bytes", "head_adapter_backward_bytes"]


def adapted_head(spec: ModelSpec, setup: TrainingSetup) -> LoraLinear | None:
    """The output head's LoRA linear when the setup adapts it, else None."""
    if not setup.is_lora:
        return None
    return targeted_head_linear(spec, setup.lora_targets)


def _tokens(setup: TrainingSetup) -> int:
    return setup.micro_batch * setup.seq_len // setup.cp


def _chunk_tokens(setup: TrainingSetup) -> int:
    """Tokens of one head call: all of them, or one of the ``k`` sequence chunks torchtune's chunked output runs
    the head on one at a time (``--loss chunked``: ``TransformerDecoder.chunked_output``, trace/losses.py)."""
    T = _tokens(setup)
    if setup.loss != "chunked":
        return T
    k = setup.loss_chunks or 8
    return -(-T // k)


def _fp32_adapters_on_16bit_base(setup: TrainingSetup) -> bool:
    return setup.precision != "fp32" and not adapters_16bit(setup)


def head_adapter_keeps_input(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether lora_A keeps the final norm's output itself (adapters in the base's dtype, or fp32, no dropout): then
    the tensor the forward holds while the loss runs (activations.lora_head_frame_bytes) is a saved one."""
    return (adapted_head(spec, setup) is not None and not _fp32_adapters_on_16bit_base(setup)
            and not setup.lora_dropout)


def head_dropout_saved_per_token(setup: TrainingSetup, width: int) -> int:
    """Bytes per token the head adapter's dropout keeps for backward in place of lora_A's input x: its bool mask
    (1 B per element: ``native_dropout`` returns ``(output, mask)``, ``NativeDropoutBackward`` keeps the mask) and
    its output, lora_A's saved input — in the adapter dtype (4 B fp32, 2 B bf16) as PEFT casts x before dropout;
    under autocast with fp32 adapters lora_A keeps autocast's 16-bit cast of the fp32 dropout output (2 B), the
    dropout output itself a frame temporary freed when lora_A returns. 0 without dropout."""
    if not setup.lora_dropout:
        return 0
    amp32 = _fp32_adapters_on_16bit_base(setup) and is_amp(setup)
    e = 2 if (adapters_16bit(setup) or amp32) else 4
    return (1 + e) * width


def head_adapter_saved_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes the head's adapter keeps for backward: lora_A's input (fp32 copy 4·h without autocast, autocast's
    16-bit cast 2·h with it, x itself in the 16-bit-adapter and fp32 cases: e·h) and lora_B's input (e·r) per
    token; under autocast with fp32 adapters also the cached 16-bit adapter weights (2·r·(h + V))."""
    head = adapted_head(spec, setup)
    if head is None:
        return 0
    T, r = _tokens(setup), setup.lora_rank
    if setup.lora_dropout:  # (the mask and the dropout's output in place of lora_A's input)
        e = 2 if (adapters_16bit(setup) or is_amp(setup)) else 4
        weights = 2 * r * (head.fin + head.fout) if (_fp32_adapters_on_16bit_base(setup) and is_amp(setup)) else 0
        return (head_dropout_saved_per_token(setup, head.fin) + e * r) * T + weights
    if _fp32_adapters_on_16bit_base(setup) and is_amp(setup):
        return (2 * head.fin + 2 * r) * T + 2 * r * (head.fin + head.fout)
    e = 2 if adapters_16bit(setup) else 4
    x_elem = 4 if _fp32_adapters_on_16bit_base(setup) else e
    return (x_elem * head.fin + e * r) * T


def head_adapter_forward_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Peak bytes of the head's forward beyond the logits and the saved tensors, at ``result + lora_B(...) *
    scaling``: the base logits (c·V), the adapter's output and its scaled copy being made (e·V each; the
    output is freed once scaled, then the sum takes its place), less the logits (c·V) that the sum becomes.
    fp32 adapters on a 16-bit base without autocast: 2 + 4 + 4 − 2 = 8 B per logit (the fp32 sum is cast back
    after); under autocast 2 + 2 + 2 − 2 = 4 and the fp32 frame copy of x (4·h); 16-bit adapters 4; fp32 8. With
    the chunked loss, for one chunk's tokens (the chunks run one after another; every chunk's logits are kept)."""
    head = adapted_head(spec, setup)
    if head is None:
        return 0
    T, V, c = _chunk_tokens(setup), head.fout, compute_bytes(setup)
    amp32 = _fp32_adapters_on_16bit_base(setup) and is_amp(setup)
    e = 2 if (adapters_16bit(setup) or amp32) else 4
    per_token = (c + 2 * e - c) * V + (4 * head.fin if amp32 else 0)
    return per_token * T


def head_adapter_backward_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Peak bytes of the head's backward beyond the logits' gradient (c·V, the walk's): the scaled gradient lora_B's
    backward reads (e·V, ``MulBackward``); with fp32 adapters on a 16-bit base without autocast the fp32 sum's
    gradient too (the cast back's backward, 4·V) and its 16-bit share for the base, less the logits' gradient,
    freed once cast: 8 B per logit alive in all, as traced with the fused cross-entropy (whose small loss backward
    leaves the head's the peak; tests/trace/test_lora_head_trace.py). Chunked loss: one chunk's."""
    head = adapted_head(spec, setup)
    if head is None:
        return 0
    T, V = _chunk_tokens(setup), head.fout
    if _fp32_adapters_on_16bit_base(setup) and not is_amp(setup):
        return (4 + 4 + 2 - 2 - 2) * V * T
    e = 2 if (adapters_16bit(setup) or is_amp(setup)) else 4
    return e * V * T
