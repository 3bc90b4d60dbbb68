"""Reference counts: build the real ``transformers`` model on the meta device and classify its
parameters by module name into the ``ParamCounts`` components (conventions of ``hf.py``)."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from trainmem.model.spec import ModelSpec

_LAYER = re.compile(r"\.(?:layers|layer|h)\.(\d+)\.(.+)$")
_RESIDUAL_NORM = re.compile(
    r"^(input_layernorm|post_attention_layernorm|pre_feedforward_layernorm|post_feedforward_layernorm"
    r"|ln_1|ln_2|ln_attn|ln_mlp|ln_cross_attn|attention\.output\.LayerNorm|output\.LayerNorm"
    r"|crossattention\.output\.LayerNorm|self_attn_layer_norm|final_layer_norm)\.")
_ATTENTION = ("self_attn.", "attn.", "attention.", "self_attention.", "crossattention.")
_EMBEDDING = ("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight")
# (OPT: its learned positions, and project_in, the first stage's other parameters, count with the positions;
# project_out falls to "other")
_POSITION = ("wpe.weight", "position_embeddings.weight", "token_type_embeddings.weight", "embed_positions.weight",
             "decoder.project_in.weight")
_FINAL_NORM = (".norm.", "ln_f.", "final_layer_norm.", "embeddings.LayerNorm.")


@dataclass
class Reference:
    total: int = 0
    embedding: int = 0
    position_embedding: int = 0
    final_norm: int = 0
    lm_head: int = 0
    other: int = 0
    layers: dict[int, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))


def _layer_component(rest: str) -> str:
    if _RESIDUAL_NORM.match(rest):
        return "norms"
    if "shared_expert" in rest:
        return "shared_experts"
    if ".experts." in rest:
        return "experts"
    if rest.startswith("mlp.gate."):
        return "router"
    if rest.startswith(_ATTENTION):
        return "attention"
    return "mlp"


def build_meta(architecture: str, hf_config: dict):
    """The transformers model ``architecture`` built from ``hf_config`` on the meta device."""
    import torch
    import transformers

    cfg = dict(hf_config)
    model_type = cfg.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    with torch.device("meta"):
        return getattr(transformers, architecture)(config)


def reference_counts(model) -> Reference:
    ref = Reference(total=sum(p.numel() for p in model.parameters()))
    for name, p in model.named_parameters():  # tied parameters appear once, under their first name
        n = p.numel()
        m = _LAYER.search(name)
        if m:
            layer = ref.layers[int(m[1])]
            layer[_layer_component(m[2])] += n
            if p.ndim >= 2:
                layer["matmul"] += n
        elif name.endswith(_EMBEDDING):
            ref.embedding += n
        elif name.endswith(_POSITION):
            ref.position_embedding += n
        elif name.startswith(("lm_head.", "cls.")):
            ref.lm_head += n
        elif any(k in name for k in _FINAL_NORM):
            ref.final_norm += n
        else:
            ref.other += n
    return ref


def assert_matches_transformers(spec: ModelSpec) -> None:
    """Total, top-level components and every layer's components equal the meta-built model's."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    ref = reference_counts(build_meta(spec.architecture, spec.hf_config))
    p = spec.params
    assert (p.total, p.embedding, p.position_embedding, p.final_norm, p.lm_head, p.other) == (
        ref.total, ref.embedding, ref.position_embedding, ref.final_norm, ref.lm_head, ref.other)
    assert len(p.layers) == len(ref.layers) == spec.num_layers
    for i, layer in enumerate(p.layers):
        ours = {k: getattr(layer, k) for k in
                ("attention", "norms", "mlp", "experts", "shared_experts", "router", "matmul")}
        theirs = {k: ref.layers[i].get(k, 0) for k in ours}
        assert ours == theirs, f"layer {i}"
