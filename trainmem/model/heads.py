"""Task heads other than the language-model head: ``*ForSequenceClassification`` and
``*ForTokenClassification`` (a config whose ``architectures`` names one of them).

Parameter counts follow transformers 5.24's modules:

- decoders (llama, mistral, qwen2/3, gemma/gemma2, phi3, mixtral, qwen2/3-moe): ``GenericForSequenceClassification``
  (transformers/modeling_layers.py): ``score = Linear(h, num_labels, bias=False)`` on every position, the
  last non-pad token's logits pooled; ``GenericForTokenClassification``: dropout + ``score = Linear(h,
  num_labels)`` with bias.
- gpt2 / gpt_neox / falcon: sequence classification ``score`` without bias; token classification
  ``classifier`` (gpt_neox, falcon, gpt2) with bias.
- bert: sequence classification keeps the pooler (dense h→h + tanh) and a ``classifier`` with bias; token
  classification has no pooler. roberta: ``RobertaClassificationHead`` (dense h→h, out_proj h→labels, both
  with bias) on the first token; token classification a ``classifier`` with bias.

The LM head (and its tie to the embedding) is gone: ``ParamCounts.lm_head`` holds the task head.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.model.spec import ModelSpec

__all__ = ["HEADS", "head_of", "with_head"]

HEADS = ("ForSequenceClassification", "ForTokenClassification")
_PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "gemma": "Gemma",
           "gemma2": "Gemma2", "phi3": "Phi3", "mixtral": "Mixtral", "qwen2_moe": "Qwen2Moe",
           "qwen3_moe": "Qwen3Moe", "gpt2": "GPT2", "gpt_neox": "GPTNeoX", "falcon": "Falcon",
           "bert": "Bert", "roberta": "Roberta"}
MAX_LABELS = 1 << 20


def head_of(cfg: Mapping[str, Any]) -> str | None:
    """The task head a config's ``architectures`` asks for (``ForSequenceClassification`` …), or None."""
    archs = cfg.get("architectures")
    if not isinstance(archs, (list, tuple)):
        return None
    for a in archs:
        for head in HEADS:
            if isinstance(a, str) and a.endswith(head):
                return head
    return None


def _num_labels(cfg: Mapping[str, Any], where: str) -> int:
    n = cfg.get("num_labels")
    if n is None:
        id2label = cfg.get("id2label")
        n = len(id2label) if isinstance(id2label, Mapping) and id2label else 2
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_LABELS:
        raise ConfigError(f"{where}: num_labels({n!r}) is not an integer between 1 and {MAX_LABELS}")
    return n


def _head_params(model_type: str, head: str, h: int, n: int) -> tuple[int, int]:
    """(task head parameters, other parameters such as BERT's pooler)."""
    seq = head == "ForSequenceClassification"
    if model_type == "bert":
        return h * n + n, (h * h + h) if seq else 0
    if model_type == "roberta":
        return (h * h + h + h * n + n) if seq else h * n + n, 0
    return (h * n if seq else h * n + n), 0


def with_head(spec: ModelSpec, cfg: Mapping[str, Any], where: str = "config.json") -> ModelSpec:
    """``spec`` (built for the LM head) with the task head its config's ``architectures`` names."""
    head = head_of(cfg)
    if head is None:
        return spec
    prefix = _PREFIX.get(spec.model_type)
    if prefix is None:
        raise UnsupportedError(f"{spec.model_type} with a {head[3:]} head is not modelled; "
                               f"heads are modelled for {', '.join(_PREFIX)}")
    n = _num_labels(cfg, where)
    task, other = _head_params(spec.model_type, head, spec.hidden_size, n)
    p = spec.params
    encoder_norm = p.final_norm  # bert/roberta: the embeddings' LayerNorm stays
    params = dataclasses.replace(p, lm_head=task, other=p.other + other, final_norm=encoder_norm)
    return dataclasses.replace(spec, architecture=prefix + head, params=params, tie_word_embeddings=False,
                               head="seq_cls" if head == HEADS[0] else "tok_cls", num_labels=n)
