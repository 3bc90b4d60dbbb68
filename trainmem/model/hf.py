"""Build a ``ModelSpec`` from a Hugging Face ``config.json`` dict, with exact parameter counts.

Pure Python: no torch, no transformers. Every count mirrors the module definitions of
``transformers`` 5.24 (``models/<family>/modeling_<family>.py``) and every missing key takes the
default of the family's config class (``configuration_<family>.py``), so that the totals equal
``sum(p.numel() for p in model.parameters())`` of the model built from the same config (tied
weights once). ``tests/model/test_hf.py`` checks this against meta-device builds.

Conventions (see ``spec.py``): a layer's ``attention`` holds q/k/v/o and whatever lives inside the
attention module (MLA low-rank projections and their norms, qwen3/gemma3 q_norm/k_norm over the
head dim, gpt_oss's per-head sinks); ``norms`` holds the norms on the residual stream (input/post-attention/
pre- and post-feedforward; BERT's two LayerNorms). ``matmul`` counts the weights that enter a matmul:
``nn.Linear``/``Conv1D`` weights, grouped expert tensors (gpt_oss's 2-D grouped expert biases with them)
and MoE router weights (used through ``F.linear``). A missing ``hidden_size``/``num_hidden_layers``
(and, for a top-level config, ``num_attention_heads``/``vocab_size``) is an error, not a default:
``config.json`` files always carry them; only the ``text_config`` nested in a gemma3 config is
written sparsely.

A config is checked as transformers' strict config classes and modules would check it (one
``ConfigError`` line naming the field and value): integer fields are ints within ``_BOUNDS`` (sizes
positive, size guards above any real model), booleans are booleans, heads divide hidden where the
family requires it and kv heads divide heads, the activation is an ``ACT2FN`` key, the RoPE type a
``ROPE_INIT_FUNCTIONS`` key, and a MoE routes 1 ≤ top-k ≤ experts (:func:`_check_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.model.spec import LayerParams, ModelSpec, ParamCounts

__all__ = ["SUPPORTED_MODEL_TYPES", "KNOWN_ACTIVATIONS", "KNOWN_ROPE_TYPES", "MAX_LAYERS", "spec_from_hf_config"]

_Pair = tuple[int, int]
"""(parameters, of which matmul weights)."""

MAX_LAYERS = 2048
"""Size guard: the largest models published have ~130 layers (Llama-3.1-405B: 126; DeepNet: 1000).
Beyond a few thousand heterogeneous layers with recompute the estimate takes seconds (it grows
faster than linearly there), so 2048 keeps every estimate well under a second or two."""
_WIDTH, _HEADS, _VOCAB, _EXPERTS, _POSITIONS = 2**20, 2**16, 2**24, 2**20, 2**32
"""Size guards with wide headroom: hidden/FFN widths ≤ 1,048,576 (largest real ~ 53k), heads and
head dims ≤ 65,536, vocabularies ≤ 16.8M (largest real ~ 262k), experts ≤ 1,048,576 (PEER's
"million experts"), positions ≤ 4.3G (Llama 4 Scout: 10M)."""

_BOUNDS: dict[str, tuple[int, int | None]] = {
    # (smallest, largest) accepted value of an integer field; other fields: >= 0, no upper limit.
    **dict.fromkeys(("hidden_size", "n_embd", "n_embed"), (1, _WIDTH)),
    **dict.fromkeys(("num_hidden_layers", "n_layer"), (1, MAX_LAYERS)),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_key_value_heads", "num_kv_heads"), (1, _HEADS)),
    **dict.fromkeys(("head_dim", "v_head_dim", "qk_rope_head_dim", "kv_lora_rank", "q_lora_rank"), (1, _HEADS)),
    "qk_nope_head_dim": (0, _HEADS),
    "vocab_size": (1, _VOCAB),
    **dict.fromkeys(("intermediate_size", "n_inner", "ffn_hidden_size", "moe_intermediate_size", "ffn_dim",
                     "word_embed_proj_dim"), (1, _WIDTH)),
    "shared_expert_intermediate_size": (0, _WIDTH),
    **dict.fromkeys(("max_position_embeddings", "n_positions"), (1, _POSITIONS)),
    "type_vocab_size": (1, _HEADS),
    **dict.fromkeys(("num_local_experts", "num_experts", "n_routed_experts"), (0, _EXPERTS)),
    "n_shared_experts": (0, _HEADS),
    "num_experts_per_tok": (1, _EXPERTS),
    "decoder_sparse_step": (1, MAX_LAYERS),
    "first_k_dense_replace": (0, MAX_LAYERS),
    **dict.fromkeys(("n_group", "topk_group"), (1, _EXPERTS)),
}

#: ``transformers.activations.ACT2FN`` keys of transformers 5.24 (kept here: the core imports no torch;
#: tests/model/test_hf.py checks the list against the installed transformers).
KNOWN_ACTIVATIONS: frozenset[str] = frozenset((
    "gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
    "gelu_pytorch_tanh", "hardswish", "laplace", "leaky_relu", "linear", "mish", "prelu", "quick_gelu",
    "relu", "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "xielu"))
#: ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` keys of transformers 5.24, plus "default"
#: (the plain RoPE, computed by each model's rotary embedding).
KNOWN_ROPE_TYPES: frozenset[str] = frozenset((
    "default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional"))
#: Families whose config class checks ``hidden_size % num_attention_heads`` even when head_dim is
#: given (``validate_architecture`` of llama, gemma2, gemma3, deepseek_v2, gpt_neox; gpt2, falcon,
#: bert, roberta and opt derive head_dim and raise in their attention modules; nemotron floors h // a unchecked).
_HEADS_DIVIDE_HIDDEN = frozenset(("llama", "gemma2", "gemma3_text", "deepseek_v2", "gpt_neox", "gpt2",
                                  "falcon", "bert", "roberta", "opt"))


def _linear(n_in: int, n_out: int, bias: bool) -> _Pair:
    """nn.Linear(n_in, n_out, bias): n_in·n_out weights (+ n_out bias)."""
    return n_in * n_out + (n_out if bias else 0), n_in * n_out


def _add(*pairs: _Pair) -> _Pair:
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def _glu_mlp(h: int, inter: int, bias: bool = False) -> _Pair:
    """gate/up (h→inter) and down (inter→h) projections; phi3's fused gate_up counts the same."""
    return _add(_linear(h, inter, bias), _linear(h, inter, bias), _linear(inter, h, bias))


def _plain_mlp(h: int, inter: int) -> _Pair:
    """GPT-2/BERT/NeoX/Falcon-with-bias MLP: h→inter→h, both with bias."""
    return _add(_linear(h, inter, True), _linear(inter, h, True))


class _Config:
    """Read access to a config dict with the family's defaults and key names in errors."""

    def __init__(self, raw: Mapping[str, Any], model_type: str, where: str = "config.json") -> None:
        self.raw = raw
        self.model_type = model_type
        self.where = where

    def has(self, key: str) -> bool:
        return key in self.raw

    def get(self, key: str, default: Any = None) -> Any:
        """The value if the key is present (even null), else ``default``."""
        return self.raw[key] if key in self.raw else default

    def get_int(self, key: str, default: int | None = None, *, required: bool = False) -> int:
        """An integer field; ``default`` when absent (or null), ConfigError naming the key if bad."""
        value = self.raw.get(key)
        if value is None:
            if required or default is None:
                raise ConfigError(f"{self.where} (model_type {self.model_type!r}) lacks {key!r}")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{self.where} (model_type {self.model_type!r}): {key}={value!r} "
                              "is not a non-negative integer")
        low, high = _BOUNDS.get(key, (0, None))
        if value < low:
            raise ConfigError(f"{self.where}: {key}({value}) must be >= {low}")
        if high is not None and value > high:
            raise ConfigError(f"{self.where}: {key}({value:,}) is above trainmem's limit of {high:,}")
        return value

    def opt_int(self, key: str, default: int | None) -> int | None:
        """An optional integer (null allowed): ``default`` only when the key is absent."""
        if key not in self.raw:
            return default
        return None if self.raw[key] is None else self.get_int(key)

    def flag(self, key: str, default: bool) -> bool:
        """A boolean field; null takes the default; anything but true/false is refused (as the
        strict config classes of transformers 5 do: ``"yes"`` or ``1`` is not a bool)."""
        value = self.raw.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where}: {key}={value!r} is not a boolean (true or false)")
        return value

    def num(self, key: str, default: float | None) -> float | None:
        """A float field (dropout, softcapping); null stays None."""
        value = self.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{self.where} (model_type {self.model_type!r}): {key}={value!r} is not a number")
        return float(value)


# --------------------------------------------------------------------------- rope decoders
@dataclass(frozen=True, slots=True)
class _Family:
    """Defaults and module layout of one llama-style family (from its transformers 5.24 files)."""

    architecture: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int | None
    """Class default of num_key_value_heads; None means "= num_attention_heads"."""
    head_dim: int | None
    """Class default of head_dim; None means hidden_size // num_attention_heads."""
    intermediate: int
    max_pos: int
    tie: bool
    act_key: str = "hidden_act"
    act: str = "silu"
    bias: str = "none"
    """"attention_bias" (q,k,v,o follow attention_bias), "qkv" (always), "qkv_bias" (qwen2_moe's
    qkv_bias, default True), "none"."""
    mlp_bias: bool = False
    """llama's mlp_bias key."""
    qk_norm: bool = False
    norms_per_layer: int = 2
    sliding: str = "none"
    """"plain": sliding_window as given; "flag": only when use_sliding_window; "layer_types": the window
    of the layers ``layer_types`` names ``sliding_attention`` (None when it names none); "none"."""
    sliding_default: int | None = None
    softcap: tuple[float | None, float | None] | None = None
    """Class defaults of (attn_logit_softcapping, final_logit_softcapping); None: no such keys."""
    bias_default: bool = False
    """Class default of attention_bias (bias "attention_bias"): gpt_oss's is True."""
    sinks: bool = False
    """The attention module holds ``sinks``, one learned logit per head (gpt_oss)."""


_FAMILIES: dict[str, _Family] = {
    "llama": _Family("LlamaForCausalLM", 32000, 4096, 32, 32, None, None, 11008, 2048, False,
                     bias="attention_bias", mlp_bias=True),
    "mistral": _Family("MistralForCausalLM", 32000, 4096, 32, 32, 8, None, 14336, 131072, False,
                       sliding="plain", sliding_default=4096),
    "qwen2": _Family("Qwen2ForCausalLM", 151936, 4096, 32, 32, 32, None, 22016, 32768, False,
                     bias="qkv", sliding="flag", sliding_default=4096),
    "qwen3": _Family("Qwen3ForCausalLM", 151936, 4096, 32, 32, 32, 128, 22016, 32768, False,
                     bias="attention_bias", qk_norm=True, sliding="flag", sliding_default=4096),
    "gemma": _Family("GemmaForCausalLM", 256000, 3072, 28, 16, 16, 256, 24576, 8192, True,
                     act="gelu_pytorch_tanh", bias="attention_bias"),
    "gemma2": _Family("Gemma2ForCausalLM", 256000, 2304, 26, 8, 4, 256, 9216, 8192, True,
                      act_key="hidden_activation", act="gelu_pytorch_tanh", bias="attention_bias",
                      norms_per_layer=4, sliding="plain", sliding_default=4096, softcap=(50.0, 30.0)),
    "gemma3_text": _Family("Gemma3ForCausalLM", 262208, 2304, 26, 8, 4, 256, 9216, 131072, True,
                           act_key="hidden_activation", act="gelu_pytorch_tanh",
                           bias="attention_bias", qk_norm=True, norms_per_layer=4, sliding="plain",
                           sliding_default=4096, softcap=(None, None)),
    "phi3": _Family("Phi3ForCausalLM", 32064, 3072, 32, 32, None, None, 8192, 4096, False,
                    sliding="plain", sliding_default=None),
    "mixtral": _Family("MixtralForCausalLM", 32000, 4096, 32, 32, 8, None, 14336, 131072, False,
                       sliding="plain", sliding_default=None),
    "qwen2_moe": _Family("Qwen2MoeForCausalLM", 151936, 2048, 24, 16, 16, None, 5632, 32768, False,
                         bias="qkv_bias", sliding="flag", sliding_default=4096),
    "qwen3_moe": _Family("Qwen3MoeForCausalLM", 151936, 2048, 24, 32, 4, None, 6144, 32768, False,
                         bias="attention_bias", qk_norm=True, sliding="flag", sliding_default=4096),
    # GptOssConfig (configuration_gpt_oss.py): q/k/v/o biases on by default, per-head attention sinks,
    # layer_types alternating sliding_attention / full_attention (sliding first), window 128
    "gpt_oss": _Family("GptOssForCausalLM", 201088, 2880, 36, 64, 8, 64, 2880, 131072, False,
                       bias="attention_bias", bias_default=True, sinks=True, sliding="layer_types",
                       sliding_default=128),
}


@dataclass(frozen=True, slots=True)
class _Moe:
    """Routed-expert layout shared by mixtral, qwen2_moe, qwen3_moe and deepseek."""

    num_experts: int
    top_k: int
    expert_inter: int
    layers: tuple[int, ...]
    """Indices of the MoE layers; the others have the dense MLP."""
    num_shared: int = 0
    shared_inter: int = 0
    """Width of the one shared MLP (deepseek: moe_intermediate_size · n_shared_experts)."""
    has_shared: bool = False
    """The block always builds the shared MLP (qwen2_moe, deepseek), even of width 0."""
    shared_gate: bool = False
    """qwen2_moe's shared_expert_gate = Linear(h, 1)."""
    shared_bias: bool = False
    expert_bias: bool = False
    """gpt_oss's GptOssExperts: gate_up_proj_bias (E, 2·inter) and down_proj_bias (E, h)."""
    router_bias: bool = False
    """gpt_oss's GptOssTopKRouter: a bias (E) with its (E, h) weight."""

    def block(self, h: int) -> tuple[_Pair, _Pair, _Pair]:
        """(experts, shared experts + gate, router) of one MoE layer: experts are two 3-D tensors,
        gate_up (E, 2·inter, h) and down (E, h, inter); the router an (E, h) weight (``*TopKRouter``,
        applied with F.linear). gpt_oss's grouped expert biases (E, 2·inter) and (E, h) count with
        the grouped expert tensors in ``matmul`` too (every 2-D-or-more expert tensor does), so that
        ``matmul - experts`` stays the layer's non-expert matmul weights; its router bias (E) does not."""
        experts = self.num_experts * 3 * h * self.expert_inter
        if self.expert_bias:
            experts += self.num_experts * (2 * self.expert_inter + h)
        shared = _glu_mlp(h, self.shared_inter, self.shared_bias) if self.has_shared else (0, 0)
        if self.shared_gate:
            shared = _add(shared, _linear(h, 1, False))
        router = self.num_experts * h
        return (experts, experts), shared, (router + (self.num_experts if self.router_bias else 0), router)


def _layer_params(num_layers: int, h: int, attention: _Pair, norms: int, dense: _Pair,
                  moe: _Moe | None) -> tuple[LayerParams, ...]:
    """Per-layer counts: the same attention and norms everywhere, the dense MLP or a MoE block."""
    layers = []
    for i in range(num_layers):
        if moe is not None and i in moe.layers:
            experts, shared, router = moe.block(h)
            mlp: _Pair = (0, 0)
        else:
            experts = shared = router = (0, 0)
            mlp = dense
        layers.append(LayerParams(
            attention=attention[0], norms=norms, mlp=mlp[0], experts=experts[0],
            shared_experts=shared[0], router=router[0],
            matmul=attention[1] + mlp[1] + experts[1] + shared[1] + router[1]))
    return tuple(layers)


def _moe_of(c: _Config, num_layers: int, inter: int) -> _Moe | None:
    """MoE layout of mixtral/qwen2_moe/qwen3_moe/gpt_oss, or None for a dense family."""
    mt = c.model_type
    if mt == "mixtral":  # MixtralSparseMoeBlock in every layer; attribute_map num_experts→num_local_experts
        e = c.get_int("num_local_experts", c.get_int("num_experts", 8))
        return _Moe(e, c.get_int("num_experts_per_tok", 2), inter, tuple(range(num_layers)))
    if mt == "gpt_oss":  # GptOssMLP (router + experts, both with biases) in every layer; experts of width
        # intermediate_size; attribute_map num_experts→num_local_experts
        e = c.get_int("num_local_experts", c.get_int("num_experts", 128))
        return _Moe(e, c.get_int("num_experts_per_tok", 4), inter, tuple(range(num_layers)),
                    expert_bias=True, router_bias=True)
    if mt in ("qwen2_moe", "qwen3_moe"):
        default_e, default_k, default_i = (60, 4, 1408) if mt == "qwen2_moe" else (128, 8, 768)
        e = c.get_int("num_experts", c.get_int("num_local_experts", default_e))
        step = c.get_int("decoder_sparse_step", 1)
        only_dense = c.get("mlp_only_layers") or []
        if not isinstance(only_dense, list) or not all(type(i) is int for i in only_dense):
            raise ConfigError(f"{c.where}: mlp_only_layers={only_dense!r} is not a list of layer indices")
        only_dense = set(only_dense)
        # Qwen2MoeDecoderLayer: MoE iff not in mlp_only_layers and num_experts>0 and (i+1) % step == 0
        moe_layers = tuple(i for i in range(num_layers)
                           if i not in only_dense and e > 0 and step > 0 and (i + 1) % step == 0)
        top_k, expert_inter = c.get_int("num_experts_per_tok", default_k), c.get_int("moe_intermediate_size", default_i)
        if mt == "qwen3_moe":
            return _Moe(e, top_k, expert_inter, moe_layers)
        return _Moe(e, top_k, expert_inter, moe_layers, num_shared=1, has_shared=True, shared_gate=True,
                    shared_inter=c.get_int("shared_expert_intermediate_size", 5632))
    return None


def _kv_heads(c: _Config, default: int | None, heads: int) -> int:
    if not c.has("num_key_value_heads"):
        return heads if default is None else default
    return c.get_int("num_key_value_heads", heads)  # null → = heads (each family's __post_init__)


def _rope_decoder(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, mixtral, qwen2_moe, qwen3_moe, gpt_oss."""
    f = _FAMILIES[c.model_type]
    h = c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", None if top_level else f.heads)
    vocab = c.get_int("vocab_size", None if top_level else f.vocab)
    kv = _kv_heads(c, f.kv_heads, heads)
    head_dim = _head_dim(c, f, h, heads)
    inter = c.get_int("intermediate_size", f.intermediate)
    tie = c.flag("tie_word_embeddings", f.tie)

    attention = _rope_attention(c, f, h, heads, kv, head_dim)
    moe = _moe_of(c, num_layers, inter)
    dense = _glu_mlp(h, inter, f.mlp_bias and c.flag("mlp_bias", False))
    layers = _layer_params(num_layers, h, attention, f.norms_per_layer * h, dense, moe)
    act = c.get(f.act_key, f.act) or f.act
    if c.model_type == "gemma" and act == "gelu":  # GemmaConfig.__post_init__ maps legacy "gelu"
        act = "gelu_pytorch_tanh"
    return ModelSpec(
        name=name, model_type=c.model_type, architecture=f.architecture, hidden_size=h,
        num_layers=num_layers, num_attention_heads=heads, num_kv_heads=kv, head_dim=head_dim,
        v_head_dim=head_dim, intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie,
        mlp_gated=True, hidden_act=str(act), norm="rmsnorm", position="rope",
        max_position_embeddings=c.get_int("max_position_embeddings", f.max_pos),
        num_experts=moe.num_experts if moe else 0, num_experts_per_tok=moe.top_k if moe else 0,
        moe_intermediate_size=moe.expert_inter if moe else 0,
        num_shared_experts=moe.num_shared if moe else 0,
        shared_expert_intermediate_size=moe.shared_inter if moe else 0,
        moe_layer_indices=moe.layers if moe else (),
        attn_logit_softcapping=c.num("attn_logit_softcapping", f.softcap[0]) if f.softcap else None,
        final_logit_softcapping=c.num("final_logit_softcapping", f.softcap[1]) if f.softcap else None,
        sliding_window=_sliding_window(c, f),
        attention_dropout=c.num("attention_dropout", 0.0) or 0.0,
        hidden_dropout=(c.num("resid_pdrop", 0.0) or 0.0) if c.model_type == "phi3" else 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=0, layers=layers,
                           final_norm=h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


def _rope_attention(c: _Config, f: _Family, h: int, heads: int, kv: int, head_dim: int) -> _Pair:
    """q (h→a·d), k, v (h→kv·d), o (a·d→h) and, in qwen3/gemma3, q_norm + k_norm (RMSNorm(d));
    gpt_oss's ``sinks`` (a). phi3 fuses q/k/v into one qkv_proj of the same size."""
    if f.bias == "attention_bias":
        qkv_bias = o_bias = c.flag("attention_bias", f.bias_default)
    elif f.bias == "qkv":
        qkv_bias, o_bias = True, False
    elif f.bias == "qkv_bias":
        qkv_bias, o_bias = c.flag("qkv_bias", True), False
    else:
        qkv_bias = o_bias = False
    attention = _add(_linear(h, heads * head_dim, qkv_bias), _linear(h, kv * head_dim, qkv_bias),
                     _linear(h, kv * head_dim, qkv_bias), _linear(heads * head_dim, h, o_bias))
    if f.sinks:
        attention = _add(attention, (heads, 0))
    return _add(attention, (2 * head_dim, 0)) if f.qk_norm else attention


def _sliding_window(c: _Config, f: _Family) -> int | None:
    """The window as the config class resolves it (qwen: only with use_sliding_window; gpt_oss: only
    when a layer is a ``sliding_attention`` one, :func:`_layer_types`)."""
    if f.sliding == "flag" and not c.flag("use_sliding_window", False):
        return None
    if f.sliding == "none":
        return None
    if f.sliding == "layer_types" and "sliding_attention" not in _layer_types(c):
        return None
    return c.opt_int("sliding_window", f.sliding_default) or None


_LAYER_TYPES = ("sliding_attention", "full_attention")
"""The keys of GptOssModel.forward's ``causal_mask_mapping``: any other layer type is a KeyError there."""


def _layer_types(c: _Config) -> list[str]:
    """gpt_oss's ``layer_types``: absent or null, GptOssConfig.__post_init__ alternates
    ``sliding_attention`` (even layers) and ``full_attention`` (odd ones); given, one entry per layer
    (the config's ``validate_layer_type``), each a key of the model's mask mapping."""
    n = c.get_int("num_hidden_layers", required=True)
    types = c.get("layer_types")
    if types is None:
        return [_LAYER_TYPES[i % 2] for i in range(n)]
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        raise ConfigError(f"{c.where}: layer_types={types!r} is not a list of layer type names")
    if len(types) != n:
        raise ConfigError(f"{c.where}: layer_types has {len(types)} entries for num_hidden_layers({n})")
    bad = sorted({t for t in types if t not in _LAYER_TYPES})
    if bad:
        raise ConfigError(f"{c.where}: layer_types entry {bad[0]!r} is not sliding_attention or full_attention "
                          f"(the layer types {c.model_type} builds masks for)")
    return types


def _head_dim(c: _Config, f: _Family, h: int, heads: int) -> int:
    """head_dim: declared field (qwen3, gemma*) defaults to 256/128; elsewhere
    ``getattr(config, "head_dim", h // a)`` (mistral/mixtral/llama also treat null as absent)."""
    value = c.get("head_dim")
    if value is not None:
        return c.get_int("head_dim")
    if f.head_dim is not None and not c.has("head_dim"):
        return f.head_dim
    if heads == 0 or h % heads:
        raise ConfigError(f"{c.where}: num_attention_heads({heads}) does not divide hidden_size({h}) "
                          "and no head_dim is given")
    return h // heads


# --------------------------------------------------------------------------- deepseek (MLA)
def _deepseek(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """DeepseekV2/V3ForCausalLM: multi-head latent attention, dense first_k_dense_replace layers,
    then MoE (routed experts + shared experts + TopkRouter) in every later layer. transformers
    5.24 ignores ``moe_layer_freq`` (every layer ≥ first_k_dense_replace is MoE) and builds no MTP
    layer (``num_nextn_predict_layers`` weights are skipped on load)."""
    v3 = c.model_type == "deepseek_v3"
    h = c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    kv = _kv_heads(c, 128 if v3 else None, heads)
    q_lora = c.opt_int("q_lora_rank", 1536)
    kv_lora = c.get_int("kv_lora_rank", 512)
    rope, nope = c.get_int("qk_rope_head_dim", 64), c.get_int("qk_nope_head_dim", 128)
    v_dim = c.get_int("v_head_dim", 128)
    bias = c.flag("attention_bias", False)
    qk = nope + rope
    if q_lora is None:
        q_part = _linear(h, heads * qk, False)
    else:  # q_a_proj, q_a_layernorm (RMSNorm q_lora), q_b_proj
        q_part = _add(_linear(h, q_lora, bias), (q_lora, 0), _linear(q_lora, heads * qk, False))
    attention = _add(q_part, _linear(h, kv_lora + rope, bias), (kv_lora, 0),
                     _linear(kv_lora, heads * (nope + v_dim), False), _linear(heads * v_dim, h, bias))

    inter = c.get_int("intermediate_size", 18432 if v3 else 11008)
    mlp_bias = (not v3) and c.flag("mlp_bias", False)  # DeepseekV2MLP(bias=mlp_bias); V3: no bias
    first_dense = c.get_int("first_k_dense_replace", 3 if v3 else 0)
    n_shared = c.get_int("n_shared_experts", 1 if v3 else 2)
    moe_inter = c.get_int("moe_intermediate_size", 2048 if v3 else 1407)
    n_experts = c.get_int("n_routed_experts", 256 if v3 else 64)
    # DeepseekV*MoE always builds shared_experts = MLP(moe_inter · n_shared)
    moe = _Moe(n_experts, c.opt_int("num_experts_per_tok", 8 if v3 else None) or 0, moe_inter,
               tuple(range(first_dense, num_layers)), num_shared=n_shared, shared_inter=moe_inter * n_shared,
               has_shared=True, shared_bias=mlp_bias)
    layers = _layer_params(num_layers, h, attention, 2 * h, _glu_mlp(h, inter, mlp_bias), moe)
    tie = c.flag("tie_word_embeddings", False)
    return ModelSpec(
        name=name, model_type=c.model_type,
        architecture="DeepseekV3ForCausalLM" if v3 else "DeepseekV2ForCausalLM",
        hidden_size=h, num_layers=num_layers, num_attention_heads=heads, num_kv_heads=kv,
        head_dim=qk, v_head_dim=v_dim, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=tie, mlp_gated=True, hidden_act=str(c.get("hidden_act", "silu")),
        norm="rmsnorm", position="rope",
        max_position_embeddings=c.get_int("max_position_embeddings", 4096 if v3 else 2048),
        num_experts=n_experts, num_experts_per_tok=moe.top_k, moe_intermediate_size=moe_inter,
        num_shared_experts=n_shared, shared_expert_intermediate_size=moe_inter * n_shared,
        moe_layer_indices=moe.layers, q_lora_rank=q_lora, kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope, qk_nope_head_dim=nope,
        attention_dropout=c.num("attention_dropout", 0.0) or 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=0, layers=layers,
                           final_norm=h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


# --------------------------------------------------------------------------- layernorm families
def _gpt2(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """GPT2LMHeadModel: wte + wpe, Conv1D c_attn (h→3h) / c_proj, c_fc (h→n_inner) / c_proj, all
    with bias; ln_1, ln_2, ln_f LayerNorms; lm_head tied by default. ``hidden_size`` etc. are
    attribute_map aliases of n_embd/n_layer/n_head/n_positions."""
    h = c.get_int("n_embd") if c.has("n_embd") else c.get_int("hidden_size", required=True)
    num_layers = c.get_int("n_layer") if c.has("n_layer") else c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("n_head") if c.has("n_head") else c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    positions = c.get_int("n_positions") if c.has("n_positions") else c.get_int("max_position_embeddings", 1024)
    inter = c.opt_int("n_inner", None) or 4 * h
    attention = _add(_linear(h, 3 * h, True), _linear(h, h, True))
    norms = 4 * h
    if c.flag("add_cross_attention", False):  # crossattention: c_attn h→2h, q_attn, c_proj; ln_cross_attn
        attention = _add(attention, _linear(h, 2 * h, True), _linear(h, h, True), _linear(h, h, True))
        norms += 2 * h
    mlp = _plain_mlp(h, inter)
    layer = LayerParams(attention=attention[0], norms=norms, mlp=mlp[0], matmul=attention[1] + mlp[1])
    tie = c.flag("tie_word_embeddings", True)
    if heads == 0 or h % heads:
        raise ConfigError(f"{c.where}: n_head({heads}) does not divide n_embd({h})")
    return ModelSpec(
        name=name, model_type="gpt2", architecture="GPT2LMHeadModel", hidden_size=h,
        num_layers=num_layers, num_attention_heads=heads, num_kv_heads=heads, head_dim=h // heads,
        v_head_dim=h // heads, intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie,
        mlp_gated=False, hidden_act=str(c.get("activation_function", "gelu_new")), norm="layernorm",
        position="learned", max_position_embeddings=positions,
        attention_dropout=c.num("attn_pdrop", 0.1) or 0.0, hidden_dropout=c.num("resid_pdrop", 0.1) or 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=positions * h,
                           layers=(layer,) * num_layers, final_norm=2 * h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


def _gpt_neox(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """GPTNeoXForCausalLM: embed_in, query_key_value (h→3h) + dense (bias=attention_bias), MLP with
    bias, two LayerNorms per layer, final_layer_norm, separate lm_head (``embed_out`` in the hub
    checkpoints) unless tie_word_embeddings."""
    h = c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    inter = c.get_int("intermediate_size", 24576)
    bias = c.flag("attention_bias", True)
    attention = _add(_linear(h, 3 * h, bias), _linear(h, h, bias))
    mlp = _plain_mlp(h, inter)
    layer = LayerParams(attention=attention[0], norms=4 * h, mlp=mlp[0], matmul=attention[1] + mlp[1])
    tie = c.flag("tie_word_embeddings", False)
    if heads == 0 or h % heads:
        raise ConfigError(f"{c.where}: num_attention_heads({heads}) does not divide hidden_size({h})")
    return ModelSpec(
        name=name, model_type="gpt_neox", architecture="GPTNeoXForCausalLM", hidden_size=h,
        num_layers=num_layers, num_attention_heads=heads, num_kv_heads=heads, head_dim=h // heads,
        v_head_dim=h // heads, intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie,
        mlp_gated=False, hidden_act=str(c.get("hidden_act", "gelu")), norm="layernorm",
        position="rope", max_position_embeddings=c.get_int("max_position_embeddings", 2048),
        parallel_residual=c.flag("use_parallel_residual", True),
        attention_dropout=c.num("attention_dropout", 0.0) or 0.0,
        hidden_dropout=c.num("hidden_dropout", 0.0) or 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=0, layers=(layer,) * num_layers,
                           final_norm=2 * h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


def _qwen(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """Qwen1's remote-code ``QWenLMHeadModel`` (``modeling_qwen.py`` / ``configuration_qwen.py`` of the
    Qwen/Qwen-7B hub repository; transformers has no class for it). ``transformer.wte`` (V·h), per block
    ``ln_1`` / ``ln_2`` (RMSNorm, weight only), ``attn.c_attn`` = nn.Linear(h, 3·a·kv_channels) *with* bias,
    ``attn.c_proj`` = nn.Linear(a·kv_channels → h, bias=not no_bias), ``mlp.w1`` / ``mlp.w2`` = nn.Linear(h,
    intermediate_size // 2) and ``mlp.c_proj`` (intermediate_size // 2 → h), all bias=not no_bias;
    ``transformer.ln_f``; an untied ``lm_head`` (V·h, no bias). The MLP is ``c_proj(w1(x) * silu(w2(x)))``:
    a SwiGLU of width intermediate_size // 2 (the spec's ``intermediate_size``). Attention is multi-head
    (no GQA); ``split_size = hidden_size`` and ``head_dim = hidden_size // heads`` split c_attn's output, so
    ``kv_channels · heads`` must equal ``hidden_size``. Config defaults: QWenConfig (vocab 151936, hidden 4096,
    32 layers and heads, kv_channels 128, intermediate 22016, no_bias true, 8192 positions, untied).

    ``QWenLMHeadModel.forward`` runs ``CrossEntropyLoss`` on ``lm_logits[..., :-1, :].contiguous()`` as they
    are (no fp32 upcast): ``logits_upcast=False``."""
    h = c.get_int("hidden_size", 4096)
    num_layers = c.get_int("num_hidden_layers", 32)
    heads = c.get_int("num_attention_heads", 32)
    vocab = c.get_int("vocab_size", 151936)
    kv_channels = c.get_int("kv_channels", 128)
    if heads * kv_channels != h:
        raise ConfigError(f"{c.where}: kv_channels({kv_channels}) * num_attention_heads({heads}) != hidden_size({h}) "
                          "(QWenAttention splits c_attn's output in hidden_size pieces)")
    config_inter = c.get_int("intermediate_size", 22016)
    inter = config_inter // 2
    if inter < 1:
        raise ConfigError(f"{c.where}: intermediate_size({config_inter}) // 2 must be >= 1 (QWenMLP's width)")
    bias = not c.flag("no_bias", True)
    attention = _add(_linear(h, 3 * h, True), _linear(h, h, bias))
    mlp = _glu_mlp(h, inter, bias)
    layer = LayerParams(attention=attention[0], norms=2 * h, mlp=mlp[0], matmul=attention[1] + mlp[1])
    tie = c.flag("tie_word_embeddings", False)
    rotary_pct = c.num("rotary_pct", 1.0)
    if (c.num("emb_dropout_prob", 0.0) or 0.0) > 0:  # QWenModel.drop on the embeddings: not modelled
        raise UnsupportedError(f"{c.where}: emb_dropout_prob > 0 (Qwen1's embedding dropout) is not modelled")
    if rotary_pct != 1.0:
        raise UnsupportedError(f"{c.where}: rotary_pct={rotary_pct} (partial rotary of Qwen1) is not modelled")
    return ModelSpec(
        name=name, model_type="qwen", architecture="QWenLMHeadModel", hidden_size=h, num_layers=num_layers,
        num_attention_heads=heads, num_kv_heads=heads, head_dim=kv_channels, v_head_dim=kv_channels,
        intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie, mlp_gated=True, hidden_act="silu",
        norm="rmsnorm", position="rope", max_position_embeddings=c.get_int("max_position_embeddings", 8192),
        attention_dropout=c.num("attn_dropout_prob", 0.0) or 0.0, logits_upcast=False,
        params=ParamCounts(embedding=vocab * h, position_embedding=0, layers=(layer,) * num_layers,
                           final_norm=h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


def _falcon(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """FalconForCausalLM. query_key_value width: new_decoder_architecture → (2·kv + a)·d;
    multi_query → h + 2d; else 3h. Norms: not parallel_attn → input + post_attention;
    parallel_attn with num_ln_in_parallel_attn == 2 (the default under new_decoder_architecture)
    → ln_attn + ln_mlp; else one input_layernorm. ``bias`` applies to every Linear."""
    h = c.get_int("n_embed") if c.has("n_embed") else c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    if heads == 0 or h % heads:
        raise ConfigError(f"{c.where}: num_attention_heads({heads}) does not divide hidden_size({h})")
    d = h // heads
    new_arch = c.flag("new_decoder_architecture", False)
    multi_query = c.flag("multi_query", True)
    parallel = c.flag("parallel_attn", True)
    bias = c.flag("bias", False)
    kv_cfg = c.opt_int("num_kv_heads", None) or heads
    if new_arch:
        qkv_out, kv = (2 * kv_cfg + heads) * d, kv_cfg
    elif multi_query:
        qkv_out, kv = h + 2 * d, 1
    else:
        qkv_out, kv = 3 * h, heads
    ffn = c.opt_int("ffn_hidden_size", None) or 4 * h
    n_ln = c.opt_int("num_ln_in_parallel_attn", None)
    if n_ln is None and new_arch:
        n_ln = 2
    norms = 2 * (2 if (not parallel or n_ln == 2) else 1) * h
    attention = _add(_linear(h, qkv_out, bias), _linear(h, h, bias))
    mlp = _add(_linear(h, ffn, bias), _linear(ffn, h, bias))
    layer = LayerParams(attention=attention[0], norms=norms, mlp=mlp[0], matmul=attention[1] + mlp[1])
    tie = c.flag("tie_word_embeddings", True)
    return ModelSpec(
        name=name, model_type="falcon", architecture="FalconForCausalLM", hidden_size=h,
        num_layers=num_layers, num_attention_heads=heads, num_kv_heads=kv, head_dim=d, v_head_dim=d,
        intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tie, mlp_gated=False,
        hidden_act=str(c.get("activation", "gelu") or "gelu"), norm="layernorm",
        position="alibi" if c.flag("alibi", False) else "rope",
        max_position_embeddings=c.get_int("max_position_embeddings", 2048),
        parallel_residual=parallel or new_arch,
        attention_dropout=c.num("attention_dropout", 0.0) or 0.0,
        hidden_dropout=c.num("hidden_dropout", 0.0) or 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=0, layers=(layer,) * num_layers,
                           final_norm=2 * h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


def _nemotron(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """NemotronForCausalLM (models/nemotron/modeling_nemotron.py, configuration_nemotron.py @ 5.24): q/k/v/o
    (``attention_bias``, default False) of ``head_dim`` (default h // a) with grouped kv heads; ``NemotronMLP``
    up_proj → ``relu2`` → down_proj (``mlp_bias``, default False), not gated; ``NemotronLayerNorm1P`` (an
    nn.LayerNorm with weight and bias, applied with weight + 1) as input, post-attention and final norm; partial
    RoPE (``partial_rotary_factor``, default 0.5, :func:`_nemotron_rotary_dim`); lm_head untied by default.
    ``NemotronConfig`` leaves ``num_key_value_heads`` None when it is absent and ``NemotronAttention`` divides by
    it (``num_heads // num_key_value_heads``): such a config cannot be built, a ConfigError here."""
    h = c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    if c.get("num_key_value_heads") is None:
        raise ConfigError(f"{c.where} (model_type 'nemotron') lacks 'num_key_value_heads' (NemotronConfig has no "
                          "default for it and NemotronAttention divides num_attention_heads by it)")
    kv = c.get_int("num_key_value_heads")
    if c.get("head_dim") is not None:
        d = c.get_int("head_dim")
    elif h // heads < 1:
        raise ConfigError(f"{c.where}: num_attention_heads({heads}) is above hidden_size({h}): head_dim would be 0")
    else:
        d = h // heads  # NemotronConfig.__post_init__: hidden_size // num_attention_heads (floor, no check)
    inter = c.get_int("intermediate_size", 24576)
    bias, mlp_bias = c.flag("attention_bias", False), c.flag("mlp_bias", False)
    attention = _add(_linear(h, heads * d, bias), _linear(h, kv * d, bias), _linear(h, kv * d, bias),
                     _linear(heads * d, h, bias))
    mlp = _add(_linear(h, inter, mlp_bias), _linear(inter, h, mlp_bias))
    layer = LayerParams(attention=attention[0], norms=4 * h, mlp=mlp[0], matmul=attention[1] + mlp[1])
    tie = c.flag("tie_word_embeddings", False)
    return ModelSpec(
        name=name, model_type="nemotron", architecture="NemotronForCausalLM", hidden_size=h,
        num_layers=num_layers, num_attention_heads=heads, num_kv_heads=kv, head_dim=d, v_head_dim=d,
        intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie, mlp_gated=False,
        hidden_act=str(c.get("hidden_act", "relu2")), norm="layernorm", position="rope",
        max_position_embeddings=c.get_int("max_position_embeddings", 4096),
        rotary_dim=_nemotron_rotary_dim(c, d),
        attention_dropout=c.num("attention_dropout", 0.0) or 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=0, layers=(layer,) * num_layers,
                           final_norm=2 * h, lm_head=0 if tie else vocab * h),
        source=source, hf_config=dict(c.raw))


def _nemotron_rotary_dim(c: _Config, d: int) -> int:
    """The rotated dimensions of a head: ``NemotronRotaryEmbedding.compute_default_rope_parameters`` builds
    ``inv_freq`` over ``dim = int(head_dim · partial_rotary_factor)`` (``arange(0, dim, 2)``: ceil(dim/2)
    frequencies) and ``cat((freqs, freqs))`` makes cos/sin of 2·ceil(dim/2) columns; ``apply_rotary_pos_emb``
    rotates ``q[..., :rot_dim]`` and passes the rest through. The factor is read where NemotronConfig puts it:
    ``rope_parameters`` (or the legacy ``rope_scaling``) when it names one, else the top-level key (default 0.5,
    ``NemotronConfig.__post_init__``); a null top-level factor leaves ``rope_parameters`` without one, and
    ``NemotronAttention`` then fails on ``rope_parameters["partial_rotary_factor"]``."""
    factor: Any = 0.5
    for key in ("rope_scaling", "rope_parameters"):
        params = c.get(key)
        if isinstance(params, Mapping) and "partial_rotary_factor" in params:
            factor = params["partial_rotary_factor"]
            break
    else:
        if c.has("partial_rotary_factor"):
            factor = c.get("partial_rotary_factor")
            if factor is None:
                raise ConfigError(f"{c.where}: partial_rotary_factor=null leaves NemotronAttention without one "
                                  "(rope_parameters['partial_rotary_factor'])")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ConfigError(f"{c.where}: partial_rotary_factor={factor!r} is not a number in (0, 1]")
    dim = int(d * factor)
    rot = 2 * ((dim + 1) // 2)
    if rot > d:  # an odd head fully rotated: cos has d + 1 columns, q[..., :d + 1] has d
        raise ConfigError(f"{c.where}: RoPE needs an even rotary dimension, got head_dim({d}) · "
                          f"partial_rotary_factor({factor}) = {dim}")
    return rot


def _opt(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """OPTForCausalLM (models/opt/modeling_opt.py, configuration_opt.py @ 5.24): ``embed_tokens`` (V ×
    word_embed_proj_dim, default hidden_size), ``OPTLearnedPositionalEmbedding`` (max_position_embeddings + 2
    rows: the fairseq offset of 2), ``project_in`` / ``project_out`` (Linear without bias, only when
    word_embed_proj_dim ≠ hidden_size: opt-350m); per layer q/k/v/out_proj and fc1/fc2 with bias
    (``enable_bias``), ``self_attn_layer_norm`` and ``final_layer_norm`` (nn.LayerNorm, weight and bias unless
    ``layer_norm_elementwise_affine`` is false); the decoder's ``final_layer_norm`` only with
    ``do_layer_norm_before`` (pre-LN; opt-350m is post-LN) and not ``_remove_final_layer_norm``; lm_head
    (word_embed_proj_dim → V) tied to embed_tokens by default.

    Components: project_in counts with the position embedding (the first stage's extra parameters),
    project_out in ``other`` (the last stage's); ``OPTAttention`` raises unless heads divide hidden_size."""
    h = c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    if h % heads:
        raise ConfigError(f"{c.where}: num_attention_heads({heads}) does not divide hidden_size({h})")
    ffn = c.get_int("ffn_dim", 3072)
    positions = c.get_int("max_position_embeddings", 2048)
    w = c.opt_int("word_embed_proj_dim", None) or h  # OPTConfig.__post_init__: None → hidden_size
    bias = c.flag("enable_bias", True)
    ln = 2 * h if c.flag("layer_norm_elementwise_affine", True) else 0
    pre_ln = c.flag("do_layer_norm_before", True)
    final_ln = ln if pre_ln and not c.flag("_remove_final_layer_norm", False) else 0
    attention = _add(*(_linear(h, h, bias),) * 4)
    mlp = _add(_linear(h, ffn, bias), _linear(ffn, h, bias))
    layer = LayerParams(attention=attention[0], norms=2 * ln, mlp=mlp[0], matmul=attention[1] + mlp[1])
    proj = w * h if w != h else 0
    tie = c.flag("tie_word_embeddings", True)
    layerdrop = c.num("layerdrop", 0.0) or 0.0
    if not 0 <= layerdrop <= 1:
        raise ConfigError(f"{c.where}: layerdrop={layerdrop!r} is not a probability")
    return ModelSpec(
        name=name, model_type="opt", architecture="OPTForCausalLM", hidden_size=h, num_layers=num_layers,
        num_attention_heads=heads, num_kv_heads=heads, head_dim=h // heads, v_head_dim=h // heads,
        intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tie, mlp_gated=False,
        hidden_act=str(c.get("activation_function", "relu")), norm="layernorm", position="learned",
        max_position_embeddings=positions,
        attention_dropout=c.num("attention_dropout", 0.0) or 0.0, hidden_dropout=c.num("dropout", 0.1) or 0.0,
        params=ParamCounts(embedding=vocab * w, position_embedding=(positions + 2) * h + proj,
                           layers=(layer,) * num_layers, final_norm=final_ln, lm_head=0 if tie else vocab * w,
                           other=proj),
        source=source, hf_config=dict(c.raw))


def _bert(c: _Config, name: str, source: str, top_level: bool) -> ModelSpec:
    """BertForMaskedLM / RobertaForMaskedLM (no pooler: add_pooling_layer=False).

    Embeddings: word V·h, position P·h + token-type T·h (→ position_embedding), LayerNorm 2h (→
    final_norm). Layer: q/k/v/o with bias, attention-output and output LayerNorms, MLP with bias.
    MLM head (→ lm_head): transform dense h→h + LayerNorm + decoder bias V; the decoder weight is
    tied to the word embedding and its bias to the head's ``bias``, only when tie_word_embeddings.
    """
    roberta = c.model_type == "roberta"
    h = c.get_int("hidden_size", required=True)
    num_layers = c.get_int("num_hidden_layers", required=True)
    heads = c.get_int("num_attention_heads", required=True)
    vocab = c.get_int("vocab_size", required=True)
    inter = c.get_int("intermediate_size", 3072)
    positions = c.get_int("max_position_embeddings", 512)
    token_types = c.get_int("type_vocab_size", 2)
    attention = _add(*(_linear(h, h, True),) * 4)
    norms = 4 * h
    if c.flag("add_cross_attention", False):
        attention = _add(attention, *(_linear(h, h, True),) * 4)
        norms += 2 * h
    mlp = _plain_mlp(h, inter)
    layer = LayerParams(attention=attention[0], norms=norms, mlp=mlp[0], matmul=attention[1] + mlp[1])
    tie = c.flag("tie_word_embeddings", True)
    head = h * h + h + 2 * h + vocab + (0 if tie else vocab * h + vocab)
    if heads == 0 or h % heads:
        raise ConfigError(f"{c.where}: num_attention_heads({heads}) does not divide hidden_size({h})")
    return ModelSpec(
        name=name, model_type=c.model_type,
        architecture="RobertaForMaskedLM" if roberta else "BertForMaskedLM", hidden_size=h,
        num_layers=num_layers, num_attention_heads=heads, num_kv_heads=heads, head_dim=h // heads,
        v_head_dim=h // heads, intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie,
        mlp_gated=False, hidden_act=str(c.get("hidden_act", "gelu")), norm="layernorm",
        position="learned", max_position_embeddings=positions, is_encoder=True,
        attention_dropout=c.num("attention_probs_dropout_prob", 0.1) or 0.0,
        hidden_dropout=c.num("hidden_dropout_prob", 0.1) or 0.0,
        params=ParamCounts(embedding=vocab * h, position_embedding=(positions + token_types) * h,
                           layers=(layer,) * num_layers, final_norm=2 * h, lm_head=head),
        source=source, hf_config=dict(c.raw))


# --------------------------------------------------------------------------- checks
_ACT_KEY = {"gpt2": "activation_function", "falcon": "activation", "opt": "activation_function",
            **{mt: f.act_key for mt, f in _FAMILIES.items()}}
"""The config key of the activation, per model_type (default ``hidden_act``)."""


def _check_model(c: _Config, spec: ModelSpec) -> None:
    """What transformers' config classes and modules refuse (or crash on), as one ConfigError line:
    head arithmetic, activation and RoPE names, expert counts and top-k. The per-field types and
    ranges are checked as the fields are read (:meth:`_Config.get_int`, :meth:`_Config.flag`)."""
    w, h, a, kv = c.where, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads
    if spec.model_type in _HEADS_DIVIDE_HIDDEN and h % a:
        raise ConfigError(f"{w}: num_attention_heads({a}) does not divide hidden_size({h})")
    # repeat_kv: each kv head serves a // kv query heads (MLA builds k and v per query head: no kv heads)
    if spec.kv_lora_rank is None and a % kv:
        raise ConfigError(f"{w}: num_key_value_heads({kv}) does not divide num_attention_heads({a})")
    act_key = _ACT_KEY.get(spec.model_type, "hidden_act")
    if spec.hidden_act not in KNOWN_ACTIVATIONS:
        raise ConfigError(f"{w}: {act_key}={c.get(act_key, spec.hidden_act)!r} is not an activation of "
                          f"transformers (ACT2FN): {', '.join(sorted(KNOWN_ACTIVATIONS))}")
    if spec.position == "rope":
        _check_rope(c, spec)
    if spec.moe_layer_indices:
        e, k = spec.num_experts, spec.num_experts_per_tok
        e_key = {"mixtral": "num_local_experts", "gpt_oss": "num_local_experts", "deepseek_v2": "n_routed_experts",
                 "deepseek_v3": "n_routed_experts"}.get(spec.model_type, "num_experts")
        if e < 1:
            raise ConfigError(f"{w}: a mixture-of-experts model needs at least one expert, got {e_key}({e})")
        if not 1 <= k <= e:
            raise ConfigError(f"{w}: num_experts_per_tok({k}) is not between 1 and {e_key}({e})")
        groups = c.opt_int("n_group", None) if spec.model_type == "deepseek_v3" else None
        if groups:  # DeepseekV3TopkRouter: scores viewed as (n_group, E // n_group), topk_group groups kept
            top_groups = c.opt_int("topk_group", None) or groups
            if e % groups:
                raise ConfigError(f"{w}: n_group({groups}) does not divide n_routed_experts({e})")
            if top_groups > groups or k > top_groups * (e // groups):
                raise ConfigError(f"{w}: topk_group({top_groups}) of n_group({groups}) groups of {e // groups} "
                                  f"experts cannot route num_experts_per_tok({k})")


def _check_rope(c: _Config, spec: ModelSpec) -> None:
    """``rope_scaling`` (or transformers 5's ``rope_parameters``, maybe one dict per layer type): a
    JSON object whose ``rope_type`` (or legacy ``type``) is a known one; a fully rotated head has an
    even dimension (``RotaryEmbeddingConfigMixin.validate_rope``)."""
    key = "rope_scaling" if c.get("rope_scaling") else "rope_parameters"
    params = c.get(key)
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"{c.where}: {key}={params!r} is not a JSON object")
    nested = bool(params) and all(isinstance(v, Mapping) or v is None for v in params.values())
    for sub in (params.values() if nested else (params,)):
        if sub is None:
            continue
        rope_type = sub.get("rope_type", sub.get("type", "default"))
        if not isinstance(rope_type, str) or rope_type not in KNOWN_ROPE_TYPES:
            raise ConfigError(f"{c.where}: {key}.rope_type={rope_type!r} is not a RoPE type of transformers: "
                              + ", ".join(sorted(KNOWN_ROPE_TYPES)))
        factor = sub.get("factor")
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                                   or not factor > 0):
            raise ConfigError(f"{c.where}: {key}.factor={factor!r} is not a positive number")
    d = spec.head_dim
    if spec.model_type in _FAMILIES and d > 4 and d % 2 and c.get("partial_rotary_factor", 1.0) == 1.0:
        raise ConfigError(f"{c.where}: RoPE needs an even rotary dimension, got head_dim({d})")


# --------------------------------------------------------------------------- dispatch
_Builder = Callable[[_Config, str, str, bool], ModelSpec]
_BUILDERS: dict[str, _Builder] = {
    **{mt: _rope_decoder for mt in _FAMILIES},
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "gpt2": _gpt2, "gpt_neox": _gpt_neox, "falcon": _falcon, "bert": _bert, "roberta": _bert,
    "nemotron": _nemotron, "opt": _opt, "qwen": _qwen,
}
_VLM_TYPES = ("llava", "llama4", "qwen2_5_vl", "qwen2_vl")
"""Vision-language model_types (trainmem/model/vlm.py ``VLM_MODEL_TYPES``; kept here: no import of it at load)."""
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted([*_BUILDERS, "gemma3", *_VLM_TYPES]))
"""HF ``model_type`` values understood (``gemma3`` = a multimodal config; its text_config is used)."""


def spec_from_hf_config(cfg: Mapping[str, Any], *, name: str, source: str = "") -> ModelSpec:
    """A ``ModelSpec`` with exact parameter counts for the HF ``config.json`` dict ``cfg``.

    A model_type outside ``SUPPORTED_MODEL_TYPES`` is described from transformers itself
    (:func:`trainmem.model.derive.derive_spec`: needs torch; ``UnsupportedError`` without it, or where
    transformers has no causal-LM class for it). ``ConfigError`` (naming the key) for a malformed config.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"a config must be a JSON object, got {type(cfg).__name__}")
    model_type = cfg.get("model_type")
    if not model_type:
        raise ConfigError("config.json lacks 'model_type'")
    top_level = True
    where = "config.json"
    multimodal = dict(cfg) if model_type == "gemma3" and isinstance(cfg.get("vision_config"), Mapping) else {}
    if model_type in _VLM_TYPES:  # vision-language: tower + projector from transformers (trainmem/model/vlm.py)
        from trainmem.model.vlm import vlm_spec
        return vlm_spec(cfg, name=name, source=source,
                        text_spec=lambda text, n, src: spec_from_hf_config(text, name=n, source=src))
    if model_type == "gemma3":  # Gemma3ForConditionalGeneration: train its text model alone
        text = cfg.get("text_config")
        if not isinstance(text, Mapping):
            raise ConfigError("config.json (model_type 'gemma3') lacks 'text_config'")
        cfg = {**text, "model_type": "gemma3_text"}
        model_type, top_level, where = "gemma3_text", False, "config.json text_config"
    builder = _BUILDERS.get(str(model_type))
    if builder is None:  # only then: derive_seq2seq imports derive (importlib.metadata, hashlib: ~20 ms of a start)
        from trainmem.model.derive_seq2seq import is_seq2seq, seq2seq_spec
    if builder is None and is_seq2seq(cfg):  # encoder–decoder: T5, mT5, BART ... (trainmem/model/derive_seq2seq.py)
        return seq2seq_spec(cfg, name=name, source=source, described=", ".join(SUPPORTED_MODEL_TYPES),
                            max_layers=MAX_LAYERS, activations=KNOWN_ACTIVATIONS)
    if builder is None:  # no description here: derive one from transformers itself (needs torch)
        from trainmem.model.derive import derive_spec
        return derive_spec(cfg, name=name, source=source, described=", ".join(SUPPORTED_MODEL_TYPES),
                           max_layers=MAX_LAYERS, activations=KNOWN_ACTIVATIONS)
    c = _Config(cfg, str(model_type), where)
    spec = builder(c, name, source, top_level)
    _check_model(c, spec)
    from trainmem.model.heads import with_head
    spec = with_head(spec, cfg, where)
    if multimodal:  # Gemma 3: its tower joins when a setup asks for images (trainmem/model/vlm.py with_vision)
        import dataclasses
        spec = dataclasses.replace(spec, multimodal_config=multimodal)
    return spec
