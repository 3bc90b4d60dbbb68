"""ModelSpec: what the memory model needs to know about an architecture, and exact parameter counts.

A ``ModelSpec`` is built from a Hugging Face ``config.json`` (``trainmem.model.hf``) and carries
the raw config so that the tracer can build the very same ``transformers`` model.
Conventions: ``h`` = hidden_size, ``a`` = num_attention_heads, ``kv`` = num_key_value_heads,
``d`` = head_dim, ``V`` = vocab_size, ``L`` = num_layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["LayerParams", "ParamCounts", "ModelSpec", "attention_layer_types"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerParams:
    """Exact parameter counts of one decoder (or encoder) layer, by component."""

    attention: int
    """q/k/v/o projections (and MLA's low-rank projections and their norms), biases included."""
    norms: int
    """The layer's own norm weights/biases (input, post-attention, pre/post-feedforward...)."""
    mlp: int
    """Dense MLP (0 in a MoE layer without a dense branch)."""
    experts: int = 0
    """All routed experts of this layer together (0 in a dense layer)."""
    shared_experts: int = 0
    """Shared (always-on) experts and their gate, if any."""
    router: int = 0
    """Router / gate weights (and DeepSeek's e_score_correction_bias is a buffer, not counted)."""
    matmul: int = 0
    """Parameters that are weights of matmuls (nn.Linear weights; experts' grouped weights). Under
    torch AMP each of these is cast to 16 bits and that copy is saved for backward."""

    @property
    def total(self) -> int:
        return self.attention + self.norms + self.mlp + self.experts + self.shared_experts + self.router


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamCounts:
    """Exact parameter counts, equal to ``sum(p.numel() for p in model.parameters())`` of the
    ``transformers`` model built from the same config (tied weights counted once)."""

    embedding: int
    """Token embedding (V·h)."""
    position_embedding: int
    """Learned absolute positions (gpt2, bert) and token-type embeddings (bert); else 0."""
    layers: tuple[LayerParams, ...]
    final_norm: int
    """Final norm of the decoder (or the embeddings' LayerNorm for bert-style encoders)."""
    lm_head: int
    """Output projection V·h (+ bias); 0 when tied to the embedding. For *ForMaskedLM this is the
    MLM head (transform dense + LayerNorm + decoder bias; decoder weight tied)."""
    other: int = 0
    """Anything else (pooler, etc.)."""
    vision: int = 0
    """A vision-language model's vision tower and projector (``trainmem.model.vlm``); 0 for a text model."""

    @property
    def total(self) -> int:
        return (self.embedding + self.position_embedding + sum(l.total for l in self.layers)
                + self.final_norm + self.lm_head + self.other + self.vision)

    @property
    def layers_total(self) -> int:
        return sum(l.total for l in self.layers)

    @property
    def expert_total(self) -> int:
        """Routed-expert parameters of the whole model (what expert parallelism shards)."""
        return sum(l.experts for l in self.layers)

    @property
    def largest_layer(self) -> int:
        return max((l.total for l in self.layers), default=0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """An architecture, as far as training memory is concerned."""

    name: str
    """Catalog name or the path/id the user gave."""
    model_type: str
    """HF ``model_type`` (llama, qwen2, gemma2, mixtral, deepseek_v3, gpt2, bert, ...)."""
    architecture: str
    """HF class the tracer builds: ``LlamaForCausalLM``, ``BertForMaskedLM``, ..."""
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    """Per-head dim of q/k (for MLA: qk_nope_head_dim + qk_rope_head_dim)."""
    v_head_dim: int
    """Per-head dim of v (= head_dim except MLA)."""
    intermediate_size: int
    """Dense MLP width (DeepSeek: of the first_k_dense layers)."""
    vocab_size: int
    tie_word_embeddings: bool
    mlp_gated: bool
    """SwiGLU/GeGLU style gate*up (llama, qwen, gemma, phi3, mixtral experts); False for GPT-2 style."""
    hidden_act: str
    norm: Literal["rmsnorm", "layernorm"]
    position: Literal["rope", "learned", "alibi", "none"]
    max_position_embeddings: int
    parallel_residual: bool = False
    """Attention and MLP read the same input (gpt_neox use_parallel_residual, falcon parallel_attn)."""
    is_encoder: bool = False
    """Bidirectional encoder (bert, roberta) trained with a masked-LM head."""
    # Mixture of experts (0 = dense model)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layer_indices: tuple[int, ...] = ()
    """Indices of the layers whose MLP is a MoE block."""
    # Multi-head latent attention (DeepSeek-V2/V3); None otherwise
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    # Extras that change activation memory
    rotary_dim: int | None = None
    """Dimensions of each q/k head that RoPE rotates when it rotates only part of the head (nemotron's
    ``partial_rotary_factor``: the rotary cos/sin are (s, rotary_dim)); None: the whole head (or, for MLA,
    ``qk_rope_head_dim``)."""
    attn_logit_softcapping: float | None = None
    final_logit_softcapping: float | None = None
    sliding_window: int | None = None
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    logits_upcast: bool = True
    """The model's own loss upcasts the logits to fp32 (transformers' ``ForCausalLMLoss``); False where its
    forward runs ``CrossEntropyLoss`` on the 16-bit logits (Qwen1's ``QWenLMHeadModel``)."""
    params: ParamCounts
    source: str = ""
    """Where the config came from (catalog citation, path or hub id)."""
    alias_note: str = ""
    """How the name the user gave was mapped onto a catalog entry (an ``-instruct`` variant onto its
    base's shapes, Llama-3 onto Llama-3.1's); '' when the name was the entry itself. For the assumptions."""
    head: Literal["lm", "seq_cls", "tok_cls"] = "lm"
    """The task head: language model (causal or masked), sequence or token classification."""
    num_labels: int = 0
    """Classes of a classification head (0 for the LM head)."""
    approximate_shape: bool = False
    """True for a bare size like ``7B``: counts are the requested size, the shape a Llama-2-style guess."""
    hf_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The raw HF config dict, so the tracer can build the same model."""
    derived: Any = field(default=None, compare=False, repr=False)
    """For a family without a layer description here: its ``trainmem.model.derive.DerivedLayers`` (what a
    layer saves, measured from transformers on demand; the engine paths it supports); None otherwise."""
    vision: Any = field(default=None, compare=False, repr=False)
    """A vision-language model's ``trainmem.model.vlm.VisionTower`` (sizes, what it saves, measured on demand);
    the other fields describe its language model. None for a text model."""
    multimodal_config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The multimodal config.json a text model was taken from (Gemma 3's ``Gemma3ForConditionalGeneration``: its text
    model alone by default); a setup with images builds it whole (``trainmem.model.vlm.with_vision``). {} otherwise."""

    @property
    def output_size(self) -> int:
        """Width of the head's logits: the vocabulary, or the classes of a classification head."""
        return self.num_labels if self.head != "lm" else self.vocab_size

    @property
    def n_params(self) -> int:
        return self.params.total

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def attention_layer_types(spec: ModelSpec) -> list[str]:
    """Each decoder layer's attention, ``sliding_attention`` or ``full_attention``: the config's ``layer_types``
    where it lists one per layer, else as transformers 5.24 fills them in — gemma2 and gpt_oss slide on every
    other layer from the first (``"sliding_attention" if bool((i + 1) % 2)``, configuration_gemma2.py /
    configuration_gpt_oss.py), gemma3 on all but every ``sliding_window_pattern``-th (default 6,
    configuration_gemma3.py) — and a Mistral-style window (mistral, mixtral, phi3, qwen with
    use_sliding_window) on every layer, which without a window are all full."""
    n = spec.num_layers
    types = spec.hf_config.get("layer_types")
    if isinstance(types, list) and len(types) == n and n:
        return [str(x) for x in types]
    if spec.model_type in ("gemma2", "gpt_oss"):
        period = 2
    elif spec.model_type in ("gemma3", "gemma3_text"):
        period = int(spec.hf_config.get("sliding_window_pattern") or 6)
    else:
        return ["sliding_attention" if spec.sliding_window else "full_attention"] * n
    return ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]
