"""The linear modules PEFT's LoRA adapts, per family, with their (in_features, out_features).

Module names and shapes are those of the transformers 5.24 modeling files (``models/<family>/modeling_*.py``);
``tests/model/test_lora_targets.py`` checks them, and the trainable counts, against PEFT 0.21.2's
``get_peft_model(...).get_nb_trainable_parameters()`` on meta-device models.

How a target list is read (PEFT ``tuners/tuners_utils.py``, ``check_target_module_exists`` for a list):
a module is adapted when its name equals a target or ends with ``"." + target``. trainmem takes the same
names case-insensitively, separated by commas and/or spaces, with no regular expressions.
``all-linear`` is PEFT's ``_maybe_include_all_linear_layers``: every ``nn.Linear`` / ``Conv1D`` of the
model except the output layer (``get_output_embeddings()``, the LM head / MLM decoder), so it also adapts
BERT's ``cls.predictions.transform.dense`` and Qwen2-MoE's 1-wide ``shared_expert_gate``.

Fused projections are one module (GPT-2 and Qwen1 ``c_attn``, GPT-NeoX/Falcon ``query_key_value``, Phi-3
``qkv_proj`` and ``gate_up_proj``). Qwen1 (remote code, no transformers class) is read from its hub
``modeling_qwen.py``; a target ``c_proj`` there adapts both ``attn.c_proj`` and ``mlp.c_proj`` (PEFT's suffix match). Routed MoE experts are stacked 3-D parameters in transformers 5.x
(``mlp.experts.gate_up_proj`` (E, 2·i, h) / ``down_proj`` (E, h, i)), not ``nn.Linear``, and the routers are
``*TopKRouter`` modules. PEFT 0.21.2 (``utils/transformers_weight_conversion.py``) maps the v4 names onto
them for the families transformers converts: Mixtral ``w1`` + ``w3`` → ``experts.gate_up_proj`` (rank 2r),
``w2`` → ``experts.down_proj``, ``gate`` → the router weight; Qwen3-MoE and DeepSeek-V2/V3 the same with
``gate_proj`` + ``up_proj`` / ``down_proj`` / ``gate`` (then *every* module ending in those names goes to the
experts, so their dense and shared-expert MLPs are not adapted); ``all-linear`` adds the experts and router
there. Those become ``ParamWrapper`` LoRA on parameters (``target_parameters``), whose memory trainmem does
not model: such targets are refused with a one-line error. Qwen2-MoE is not converted: its ``gate_proj`` /
``up_proj`` / ``down_proj`` are the dense and shared-expert MLPs' ``nn.Linear`` (adapted as usual).

Core module: no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

from trainmem.errors import ConfigError
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:
    from trainmem.setup import TrainingSetup

__all__ = ["LoraLinear", "ALL_LINEAR", "normalize_targets", "effective_targets", "peft_target_modules",
           "layer_linears", "model_linears", "head_linear", "targeted_layer_linears", "targeted_model_linears",
           "targeted_head_linear", "check_lora_targets", "check_head_target", "check_targets_for_setup",
           "QKV_SLICES", "qkv_slice_linears", "lora_param_count_model"]

ALL_LINEAR = "all-linear"
#: litgpt's LoRA on slices of its fused attention projection (litgpt/lora.py ``LoRAQKVLinear``, 0.5.13: config
#: ``lora_query`` / ``lora_key`` / ``lora_value``), as targets: ``qkv.q``, ``qkv.k``, ``qkv.v``.
QKV_SLICES = ("qkv.q", "qkv.k", "qkv.v")

_EXPERT_NAMES = ("w1", "w2", "w3", "experts", "experts.gate_up_proj", "experts.down_proj", "gate")
#: Names PEFT 0.21.2 maps onto stacked experts / the router per model type (_MOE_TARGET_MODULE_MAPPING of
#: the family's conversion pattern); a target equal to one or ending in "." + one is mapped.
_PEFT_MOE_CONVERTED = {
    "mixtral": ("w1", "w2", "w3", "gate"),
    **{mt: ("gate_proj", "up_proj", "down_proj", "gate") for mt in ("qwen3_moe", "deepseek_v2", "deepseek_v3")},
}


@dataclass(frozen=True, slots=True)
class LoraLinear:
    """One adaptable linear module."""

    path: str
    """Module path inside a decoder layer (``self_attn.q_proj``) or, outside the layers, from the model root."""
    fin: int
    fout: int
    reads: str
    """The tensor it reads, shared by linears with the same value: ``attn_in`` (the input norm's output),
    ``attn_out`` (attention output), ``mlp_in``, ``mlp_act`` (the MLP's activation/product),
    ``shared_act``, ``q_a`` / ``kv_a`` (MLA's normalised latents), ``head_in``, ``emb_out`` (OPT's
    project_in, reading the token embeddings)."""

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


#: trainmem's default targets (setup.DEFAULT_LORA_TARGETS); on a family without all of these modules
#: (GPT-2, GPT-NeoX, Falcon, BERT, Phi-3, DeepSeek MLA) the default means its attention projections.
_DEFAULT = ("q_proj", "k_proj", "v_proj", "o_proj")


def normalize_targets(targets: tuple[str, ...] | list[str] | str) -> tuple[str, ...]:
    """Targets as typed: comma- and/or space-separated, case-insensitive (lower-cased here)."""
    items = [targets] if isinstance(targets, str) else list(targets)
    out: list[str] = []
    for item in items:
        for t in str(item).replace(",", " ").split():
            t = t.lower()
            if t not in out:
                out.append(t)
    return tuple(out)


def _glu(prefix: str, h: int, i: int, act: str) -> list[LoraLinear]:
    return [LoraLinear(f"{prefix}.gate_proj", h, i, "mlp_in"), LoraLinear(f"{prefix}.up_proj", h, i, "mlp_in"),
            LoraLinear(f"{prefix}.down_proj", i, h, act)]


def layer_linears(spec: ModelSpec, layer_idx: int) -> tuple[LoraLinear, ...]:
    """Every nn.Linear / Conv1D of decoder layer ``layer_idx``, in forward order."""
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    i = spec.intermediate_size
    mt = spec.model_type
    moe = layer_idx in spec.moe_layer_indices
    L = LoraLinear
    if hasattr(spec.derived, "lora_linears"):  # encoder–decoder: the meta build's (model/derive_seq2seq.py)
        return tuple(L(p, fin, fout, "derived") for p, fin, fout in spec.derived.lora_linears(layer_idx))
    if mt == "gpt2":  # GPT2Attention / GPT2MLP: Conv1D(nf=out, nx=in)
        out = [L("attn.c_attn", h, 3 * h, "attn_in"), L("attn.c_proj", h, h, "attn_out")]
        if spec.hf_config.get("add_cross_attention"):
            out += [L("crossattention.c_attn", h, 2 * h, "cross_in"), L("crossattention.q_attn", h, h, "cross_q"),
                    L("crossattention.c_proj", h, h, "cross_out")]
        return tuple(out + [L("mlp.c_fc", h, i, "mlp_in"), L("mlp.c_proj", i, h, "mlp_act")])
    if mt == "gpt_neox":
        return (L("attention.query_key_value", h, 3 * h, "attn_in"), L("attention.dense", h, h, "attn_out"),
                L("mlp.dense_h_to_4h", h, i, "mlp_in"), L("mlp.dense_4h_to_h", i, h, "mlp_act"))
    if mt == "falcon":  # query_key_value: (a + 2·kv)·d (multi_query: kv = 1; classic: kv = a)
        return (L("self_attention.query_key_value", h, (a + 2 * kv) * d, "attn_in"),
                L("self_attention.dense", a * d, h, "attn_out"),
                L("mlp.dense_h_to_4h", h, i, "mlp_in"), L("mlp.dense_4h_to_h", i, h, "mlp_act"))
    if spec.is_encoder:  # BertLayer / RobertaLayer
        return (L("attention.self.query", h, h, "attn_in"), L("attention.self.key", h, h, "attn_in"),
                L("attention.self.value", h, h, "attn_in"), L("attention.output.dense", h, h, "attn_out"),
                L("intermediate.dense", h, i, "mlp_in"), L("output.dense", i, h, "mlp_act"))
    if mt == "opt":  # OPTAttention q/k/v/out_proj (h → h), OPTDecoderLayer fc1 / fc2
        return (L("self_attn.q_proj", h, h, "attn_in"), L("self_attn.k_proj", h, h, "attn_in"),
                L("self_attn.v_proj", h, h, "attn_in"), L("self_attn.out_proj", h, h, "attn_out"),
                L("fc1", h, i, "mlp_in"), L("fc2", i, h, "mlp_act"))
    if mt == "nemotron":  # NemotronAttention q/k/v/o_proj; NemotronMLP up_proj / down_proj (no gate)
        return (L("self_attn.q_proj", h, a * d, "attn_in"), L("self_attn.k_proj", h, kv * d, "attn_in"),
                L("self_attn.v_proj", h, kv * dv, "attn_in"), L("self_attn.o_proj", a * dv, h, "attn_out"),
                L("mlp.up_proj", h, i, "mlp_in"), L("mlp.down_proj", i, h, "mlp_act"))
    if mt == "qwen":  # Qwen1 QWenBlock (modeling_qwen.py): attn.c_attn (fused qkv, bias) / c_proj; mlp.w1, w2, c_proj
        return (L("attn.c_attn", h, 3 * a * d, "attn_in"), L("attn.c_proj", a * d, h, "attn_out"),
                L("mlp.w1", h, i, "mlp_in"), L("mlp.w2", h, i, "mlp_in"), L("mlp.c_proj", i, h, "mlp_act"))
    if mt == "phi3":
        return (L("self_attn.qkv_proj", h, a * d + 2 * kv * d, "attn_in"), L("self_attn.o_proj", a * d, h, "attn_out"),
                L("mlp.gate_up_proj", h, 2 * i, "mlp_in"), L("mlp.down_proj", i, h, "mlp_act"))
    if spec.q_lora_rank is not None or spec.kv_lora_rank is not None:  # DeepSeek-V2/V3 MLA
        qr, kvr, rope = spec.q_lora_rank, spec.kv_lora_rank or 0, spec.qk_rope_head_dim or 0
        nope = spec.qk_nope_head_dim or 0
        attn = ([L("self_attn.q_a_proj", h, qr, "attn_in"), L("self_attn.q_b_proj", qr, a * d, "q_a")] if qr
                else [L("self_attn.q_proj", h, a * d, "attn_in")])
        attn += [L("self_attn.kv_a_proj_with_mqa", h, kvr + rope, "attn_in"),
                 L("self_attn.kv_b_proj", kvr, a * (nope + dv), "kv_a"), L("self_attn.o_proj", a * dv, h, "attn_out")]
        if not moe:
            return tuple(attn + _glu("mlp", h, i, "mlp_act"))
        si = spec.shared_expert_intermediate_size
        return tuple(attn + (_glu("mlp.shared_experts", h, si, "shared_act") if si else []))
    # llama-style: llama, mistral, qwen2/3, gemma/2/3, mixtral, qwen2_moe, qwen3_moe
    attn = [L("self_attn.q_proj", h, a * d, "attn_in"), L("self_attn.k_proj", h, kv * d, "attn_in"),
            L("self_attn.v_proj", h, kv * dv, "attn_in"), L("self_attn.o_proj", a * dv, h, "attn_out")]
    if not moe:
        return tuple(attn + _glu("mlp", h, i, "mlp_act"))
    si = spec.shared_expert_intermediate_size
    if mt == "qwen2_moe" and si:
        return tuple(attn + _glu("mlp.shared_expert", h, si, "shared_act")
                     + [L("mlp.shared_expert_gate", h, 1, "mlp_in")])
    return tuple(attn)  # mixtral, qwen3_moe: routed experts only


def model_linears(spec: ModelSpec) -> tuple[LoraLinear, ...]:
    """Linears outside the decoder layers other than the output layer: the MLM heads' transform; OPT's
    project_in / project_out (only where word_embed_proj_dim ≠ hidden_size)."""
    h = spec.hidden_size
    if spec.model_type == "bert":
        return (LoraLinear("cls.predictions.transform.dense", h, h, "head_in"),)
    if spec.model_type == "roberta":
        return (LoraLinear("lm_head.dense", h, h, "head_in"),)
    w = spec.hf_config.get("word_embed_proj_dim") or h
    if spec.model_type == "opt" and w != h:  # OPTDecoder project_in (w → h) / project_out (h → w), opt-350m
        return (LoraLinear("model.decoder.project_in", w, h, "emb_out"),
                LoraLinear("model.decoder.project_out", h, w, "head_in"))
    return ()


def head_linear(spec: ModelSpec) -> LoraLinear | None:
    """The output projection of a causal LM as a LoRA target (``lm_head`` in every transformers 5.24 family;
    GPT-NeoX's hub checkpoints call it ``embed_out``, renamed on load): h → V,
    reading the final norm's output (``logits_in``). PEFT adapts it only when named (``all-linear`` leaves the
    output layer out); torchtune ``apply_lora_to_output``, litgpt ``lora_head`` are the same adapter. Tied
    embeddings (PEFT 0.21.2 tuners_utils.py ``_check_tied_modules`` warns): the adapter wraps the head alone, the
    frozen base weight stays the embedding's, so the count is r·(h + V) either way. None for encoders (their MLM
    decoder is not modelled as a target)."""
    if spec.is_encoder:
        return None
    w = (spec.hf_config.get("word_embed_proj_dim") or spec.hidden_size) if spec.model_type == "opt" else spec.hidden_size
    return LoraLinear("lm_head", int(w), spec.vocab_size, "logits_in")


def effective_targets(spec: ModelSpec, targets: tuple[str, ...]) -> tuple[str, ...]:
    """Normalised targets; trainmem's default (q/k/v/o_proj) becomes the attention projections' paths on
    families that lack one of those modules."""
    t = normalize_targets(targets)
    if t == _DEFAULT and getattr(spec.derived, "peft_default_targets", ()):  # PEFT's default (derive_seq2seq.py)
        return tuple(spec.derived.peft_default_targets)
    if t == _DEFAULT and hasattr(spec.derived, "lora_linears"):
        return tuple(p for p, _, _ in spec.derived.lora_linears(0) if "attention" in p.lower() or "attn" in p.lower())
    if t == _DEFAULT and not all(any(_matches(lin.path, n) for lin in layer_linears(spec, 0)) for n in t):
        return tuple(lin.path for lin in layer_linears(spec, 0) if lin.reads in ("attn_in", "attn_out", "q_a", "kv_a"))
    return t


def _kind(spec: ModelSpec, idx: int) -> tuple[bool, str]:
    """Layers alike in their linears: MoE or dense, and an encoder–decoder model's stack."""
    stack = ""
    if hasattr(spec.derived, "lora_linears"):
        stack = "decoder" if idx >= spec.derived.encoder_layers else "encoder"
    return idx in spec.moe_layer_indices, stack


def _matches(path: str, target: str) -> bool:
    p = path.lower()
    return p == target or p.endswith("." + target)


def _all(spec: ModelSpec) -> list[LoraLinear]:
    kinds: dict[tuple[bool, str], int] = {}
    for idx in range(spec.num_layers):
        kinds.setdefault(_kind(spec, idx), idx)
    seen: dict[str, LoraLinear] = {}
    for idx in kinds.values():
        for lin in layer_linears(spec, idx):
            seen.setdefault(lin.path, lin)
    for lin in model_linears(spec):
        seen.setdefault(lin.path, lin)
    head = head_linear(spec)
    if head is not None:
        seen.setdefault(head.path, head)
    return list(seen.values())


def _valid_names(spec: ModelSpec) -> list[str]:
    names: list[str] = []
    for lin in _all(spec):
        if lin.name not in names and lin.reads != "logits_in":
            names.append(lin.name)
    head = head_linear(spec)
    return names + [ALL_LINEAR] + ([head.name] if head else [])


def check_lora_targets(spec: ModelSpec, targets: tuple[str, ...], rank: int) -> None:
    """Raise :class:`ConfigError` (one line) for a target that names no linear of this model, or a rank
    larger than ``min(in_features, out_features)`` of an adapted linear (for ``all-linear``, Qwen2-MoE's
    1-wide ``shared_expert_gate`` is exempt: PEFT adapts it at any rank, and it is counted)."""
    targets = effective_targets(spec, targets)
    if not targets:
        raise ConfigError("lora-targets: empty; give module names (comma or space separated) or all-linear")
    lins = _all(spec)
    converted = _PEFT_MOE_CONVERTED.get(spec.model_type, ())
    valid = ", ".join(n for n in _valid_names(spec) if n not in converted and not (converted and n == ALL_LINEAR))
    for t in targets:
        if t in QKV_SLICES:
            continue  # (litgpt's slices: check_targets_for_setup)
        if converted and (t == ALL_LINEAR or any(t == c or t.endswith("." + c) for c in converted)):
            raise ConfigError(f"lora-targets: on {spec.model_type}, PEFT maps {t!r} onto the stacked routed experts / "
                              f"router (target_parameters, transformers 5.x); LoRA on those is not modelled; "
                              f"valid: {valid}")
        if t == ALL_LINEAR:
            continue
        if not any(_matches(lin.path, t) for lin in lins):
            hint = ""
            if spec.is_moe and t in _EXPERT_NAMES:
                hint = (" (routed experts and routers are not nn.Linear in transformers 5.x: PEFT's target_modules "
                        "cannot adapt them, and its target_parameters is not modelled)")
            raise ConfigError(f"lora-targets: {t!r} is not a linear module of {spec.model_type}{hint}; valid: {valid}")
    if rank <= 0:
        return
    all_linear = ALL_LINEAR in targets
    for lin in list(lins) + list(qkv_slice_linears(spec, targets)):
        named = any(_matches(lin.path, t) for t in targets if t != ALL_LINEAR)
        if not named and not (all_linear and lin.fout > 1 and lin.reads != "logits_in"):
            continue
        bound = min(lin.fin, lin.fout)
        if rank > bound:
            raise ConfigError(f"lora-rank({rank}) > min(in_features({lin.fin}), out_features({lin.fout})) = {bound} "
                              f"of {lin.path}")


def check_head_target(spec: ModelSpec, setup: "TrainingSetup") -> None:
    """Raise :class:`ConfigError` (one line) where LoRA on the output head is not modelled: a loss that does not
    call the head as a module (Liger's fused linear, Cut Cross-Entropy), vocab-parallel logits (tp > 1)."""
    if targeted_head_linear(spec, setup.lora_targets) is None:
        return
    if setup.loss not in ("hf", "fused-ce", "chunked"):
        raise ConfigError(f"lora-targets lm_head with --loss {setup.loss} is not modelled (the loss does not run the "
                          f"head as one module); use --loss hf, chunked or fused-ce")
    if setup.tp > 1:
        raise ConfigError(f"lora-targets lm_head with tp({setup.tp}) > 1 is not modelled (a vocab-parallel head's "
                          f"adapter); use tp 1")


def qkv_slice_linears(spec: ModelSpec, targets: tuple[str, ...]) -> tuple[LoraLinear, ...]:
    """The enabled slices of litgpt's ``LoRAQKVLinear`` as adapters reading the attention input: q (a·d wide),
    k (kv·d), v (kv·dv). litgpt keeps one ``lora_A`` of (r·n) × h and one ``lora_B`` of (Σ widths) × r for the n
    enabled slices: r·(n·h + Σ widths) parameters, the count of n separate adapters r·(h + width) (checked against
    litgpt itself, tests/model/test_lora_targets.py); on a family with separate q/k/v projections the same count as
    ``q_proj`` / ``k_proj`` / ``v_proj``. Its forward (litgpt/lora.py ``LoRAQKVLinear.forward``) saves x once,
    ``after_A`` (r·n) and, when not all three are enabled, ``zero_pad``'s ``index_copy_`` source (Σ widths):
    memory/activations.py ``_lora_adapter_terms``."""
    t = normalize_targets(targets)
    on = [x for x in QKV_SLICES if x in t]
    if not on:
        return ()
    a, kv, d, dv, h = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim, spec.hidden_size
    width = {"qkv.q": a * d, "qkv.k": kv * d, "qkv.v": kv * dv}
    return tuple(LoraLinear(x, h, width[x], "attn_in") for x in on)


def check_targets_for_setup(spec: ModelSpec, setup: "TrainingSetup") -> None:
    """The target checks that need the setup: the output head (:func:`check_head_target`) and litgpt's qkv slices
    (a decoder with q/k/v heads; adapters in the model's bf16, as litgpt runs them — ``F.linear(x, lora_A)`` needs
    x and lora_A in one dtype; not with ``all-linear`` or the projections they slice)."""
    check_head_target(spec, setup)
    t = normalize_targets(setup.lora_targets)
    on = [x for x in QKV_SLICES if x in t]
    if not on:
        return
    if spec.is_encoder or spec.q_lora_rank is not None or spec.kv_lora_rank is not None:
        raise ConfigError(f"lora-targets {','.join(on)}: litgpt's fused-qkv slices need a decoder with q/k/v heads, "
                          f"not {spec.model_type}")
    if setup.adapter_dtype != "bf16":
        raise ConfigError(f"lora-targets {','.join(on)}: litgpt runs its adapters in the model's dtype; use "
                          f"--adapter-dtype bf16")
    whole = [lin.path for lin in layer_linears(spec, 0) if lin.reads == "attn_in"
             and any(_matches(lin.path, x) for x in t if x not in QKV_SLICES)]
    if ALL_LINEAR in t or whole:
        raise ConfigError(f"lora-targets {','.join(on)} with {ALL_LINEAR if ALL_LINEAR in t else whole[0]}: the "
                          f"slices' projection would be adapted twice")


def targeted_layer_linears(spec: ModelSpec, targets: tuple[str, ...], layer_idx: int) -> tuple[LoraLinear, ...]:
    """The linears of layer ``layer_idx`` that ``targets`` adapt (unknown names match nothing), litgpt's qkv slices
    (:func:`qkv_slice_linears`) first."""
    slices = qkv_slice_linears(spec, targets)
    targets = effective_targets(spec, targets)
    if ALL_LINEAR in targets:
        return slices + layer_linears(spec, layer_idx)
    return slices + tuple(lin for lin in layer_linears(spec, layer_idx) if any(_matches(lin.path, t) for t in targets))


def targeted_model_linears(spec: ModelSpec, targets: tuple[str, ...]) -> tuple[LoraLinear, ...]:
    """The adapted linears outside the decoder layers (BERT/RoBERTa MLM transform)."""
    targets = effective_targets(spec, targets)
    if ALL_LINEAR in targets:
        return model_linears(spec)
    return tuple(lin for lin in model_linears(spec) if any(_matches(lin.path, t) for t in targets))


def targeted_head_linear(spec: ModelSpec, targets: tuple[str, ...]) -> LoraLinear | None:
    """The output projection when a target names it (``lm_head``; never by ``all-linear``)."""
    head = head_linear(spec)
    if head is None or not any(_matches(head.path, t) for t in effective_targets(spec, targets)):
        return None
    return head


def lora_param_count_model(spec: ModelSpec, targets: tuple[str, ...], rank: int,
                           layers: range | None = None, outside_layers: bool = True) -> int:
    """LoRA parameters (lora_A: r × in, lora_B: out × r; bias="none") over ``layers`` (all by default)
    and, with ``outside_layers``, the adapted linears outside them (the output head's r·(h + V) included)."""
    layer_range = range(spec.num_layers) if layers is None else layers
    per_kind: dict[tuple[bool, str], int] = {}
    n = 0
    for idx in layer_range:
        kind = _kind(spec, idx)
        if kind not in per_kind:
            per_kind[kind] = sum(rank * (lin.fin + lin.fout) for lin in targeted_layer_linears(spec, targets, idx))
        n += per_kind[kind]
    if outside_layers:
        n += sum(rank * (lin.fin + lin.fout) for lin in targeted_model_linears(spec, targets))
        head = targeted_head_linear(spec, targets)
        n += rank * (head.fin + head.fout) if head else 0
    return n


def peft_target_modules(spec: ModelSpec, targets: tuple[str, ...]) -> str | list[str]:
    """``LoraConfig.target_modules`` for these targets: ``"all-linear"``, or the matched module paths
    (PEFT matches them as suffixes of the full module names)."""
    t = effective_targets(spec, targets)
    head = targeted_head_linear(spec, targets)
    if ALL_LINEAR in t:  # (with the head: PEFT reads "all-linear" only as the whole string, so every path)
        return ALL_LINEAR if head is None else sorted({lin.path for lin in _all(spec)})
    return sorted({lin.path for lin in _all(spec) if any(_matches(lin.path, x) for x in t)})
