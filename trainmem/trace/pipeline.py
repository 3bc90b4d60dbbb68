"""One pipeline stage, traced: the stage's slice of the real model and its 1F1B micro-batches.

A stage of ``p`` holds layers ``layers_of_stage`` (the setup's ``stage_layers``, else Megatron/torchtitan's
even split with the remainder on the first stages); the first stage also holds the embedding, the last the final norm, the LM head and
the loss (torchtitan ``pipeline_module_split``: the untied head on the last stage). Stage ``i`` runs
1F1B with ``min(p − i, m)`` micro-batches in flight: their forwards fill the pipeline, each keeping
its output for the backward, then each backward receives the output's gradient from the next stage
(the first stage's is a new b·s·h tensor, as a P2P receive allocates one); the last stage receives its
input (a leaf needing grad) and runs the loss. This is the shape of the steady phase the estimator
models; P2P buffers beyond the received tensors are not traced.

Traced for families whose decoder layers are all alike (no per-layer attention or MoE patterns).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import nn

from trainmem.memory.states import layers_of_stage

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["FAMILIES", "unsupported", "stage_spec", "make_stage", "in_flight", "micro_batches"]

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3")


def unsupported(spec: "ModelSpec", setup: "TrainingSetup") -> str | None:
    """Why this pipeline setup cannot be traced (None when it can)."""
    if spec.model_type not in FAMILIES or spec.is_moe or spec.sliding_window:
        return f"pp({setup.pp}) with {spec.model_type} (a pipeline stage is traced for {', '.join(FAMILIES)})"
    if setup.tp > 1 or setup.vpp > 1 or setup.is_lora or setup.loss != "hf" or spec.head != "lm":
        return f"pp({setup.pp}) with tp, vpp, LoRA, a chunked/fused loss or a task head"
    return None


def stage_spec(spec: "ModelSpec", setup: "TrainingSetup", stage: int) -> "ModelSpec":
    """The spec whose model is stage ``stage``'s slice: its number of layers."""
    n = len(layers_of_stage(spec, setup, stage))
    return dataclasses.replace(spec, hf_config={**spec.hf_config, "num_hidden_layers": n})


def make_stage(model: nn.Module, setup: "TrainingSetup", stage: int) -> None:
    """Drop what the stage does not hold: the embedding (not the first stage), the final norm and the LM
    head (not the last). A tied head keeps its own copy of the embedding weight on the last stage."""
    first, last = stage == 0, stage == setup.pp - 1
    base = model.model
    if not first:
        if last and model.config.tie_word_embeddings:
            model.lm_head.weight = nn.Parameter(base.embed_tokens.weight.detach().clone())
        base.embed_tokens = nn.Identity()
    if not last:
        base.norm = nn.Identity()
        model.lm_head = nn.Identity()


def in_flight(setup: "TrainingSetup", stage: int) -> int:
    return min(setup.pp - stage, setup.grad_accum)


def micro_batches(model: nn.Module, spec: "ModelSpec", setup: "TrainingSetup", stage: int, tracker: Any,
                  autocast: Callable[[], Any], labels_of: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """The stage's 1F1B steady phase: ``in_flight`` forwards, then as many backwards."""
    k, last = in_flight(setup, stage), stage == setup.pp - 1
    vocab = int(spec.hf_config.get("vocab_size", spec.vocab_size))
    b, s, h = setup.micro_batch, setup.seq_len, spec.hidden_size
    dtype = next(model.parameters()).dtype if setup.precision in ("bf16", "fp16") else torch.float32
    kept: list[tuple[Any, Any]] = []
    for i in range(k):
        tracker.phase = f"forward[{i}]"
        ids = torch.randint(0, vocab, (b, s))
        x = None if stage == 0 else torch.randn(b, s, h, dtype=dtype, requires_grad=True)  # received
        with autocast():
            if last:
                out = model(input_ids=ids if x is None else None, inputs_embeds=x, labels=labels_of(ids),
                            use_cache=False).loss / setup.grad_accum
            else:
                # (through the root module, whose FSDP2 hooks gather the embedding; the head is an Identity)
                out = model(input_ids=ids if x is None else None, inputs_embeds=x, use_cache=False).logits
        kept.append((out, x))
        del ids
    for i in range(k):
        tracker.phase = f"backward[{i}]"
        out, x = kept[i]
        kept[i] = (None, None)
        if last:
            out.backward()
        else:
            out.backward(torch.randn_like(out))  # the gradient received from the next stage
        del out, x
