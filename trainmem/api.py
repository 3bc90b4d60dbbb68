"""Library entry points shared by the CLI and the web page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmem.errors import ConfigError
from trainmem.hardware import get_gpu
from trainmem.model.resolve import resolve_model
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup, engine_precision, make_setup, validate_for_model

if TYPE_CHECKING:
    from trainmem.frameworks import Target

__all__ = ["build", "build_spec", "default_notes", "model_context", "rope_context", "check_trace_size", "STEP_LIMITS",
           "TRACE_LIMITS", "MAX_PARAMS"]

#: Size guards of a step (field: largest accepted value), so that no request runs for minutes: wide
#: headroom above any real run (the longest published contexts are 10M tokens; the largest clusters
#: ~10^5 GPUs). The estimate stays in milliseconds at these limits (tests/test_bad_input.py).
STEP_LIMITS: dict[str, int] = {
    "seq_len": 2**24,          # 16,777,216 tokens
    "micro_batch": 2**20,      # 1,048,576 sequences
    "grad_accum": 2**14,       # 16,384 micro-batches (the timeline lists each one)
    "gpus": 1_000_000,
}
#: The tracer builds and runs the real model on fake tensors, ~0.1-0.3 s per layer and micro-batch on
#: two CPU cores (Llama-3.1-405B, 126 layers: 4 min): its limits are much lower.
TRACE_LIMITS: dict[str, int] = {
    "num_layers": 256,
    "grad_accum": 16,
    "layers_x_grad_accum": 1024,
    "tokens_per_micro_batch": 2**22,
}
MAX_PARAMS = 10**18
"""Size guard of a model: 10^18 parameters (a million times the largest published)."""
_DEFAULT_SEQ_LEN = 2048
_NO_SDPA = {"gemma2": "gemma2 has no sdpa attention in transformers (logit softcapping)",
            "gpt_oss": "gpt_oss has no sdpa attention in transformers (attention sinks)"}
"""Families whose default attention is eager (the attention flag not given)."""


def build(model: str, **setup_fields: object) -> tuple[ModelSpec, TrainingSetup]:
    """Resolve a model reference and validate a setup against it (raises TrainmemError subclasses).

    Flags left unset (None or absent) take the model's defaults: ``seq_len`` is the model's context
    when shorter than 2048, ``attn`` is eager for families without sdpa; both are recorded in
    ``setup.notes`` (listed in the estimate's assumptions)."""
    early = dict(setup_fields)
    if early.get("stack") is not None:  # (its engine may be what makes the flags valid)
        from trainmem.frameworks import apply_stack
        apply_stack(early, _stack_target(None))
    precision_notes(early)
    make_setup(**early)  # a bad flag is refused before the model is looked up
    return build_spec(resolve_model(model), **setup_fields)


def build_spec(spec: ModelSpec, **setup_fields: object) -> tuple[ModelSpec, TrainingSetup]:
    """:func:`build` for a model already resolved (a pasted config.json, a spec built in code): the
    model's defaults filled in and stated, size guards, and the setup validated against the model."""
    fields = dict(setup_fields)
    notes: list[str] = []
    if fields.get("stack") is not None:  # a framework's shipped defaults for the fields not given
        from trainmem.frameworks import apply_stack
        notes = apply_stack(fields, _stack_target(spec))
    notes += precision_notes(fields)
    setup = make_setup(**fields)
    if spec.multimodal_config:  # Gemma 3 with images: the whole Gemma3ForConditionalGeneration (trainmem/model/vlm.py)
        from trainmem.model.hf import spec_from_hf_config
        from trainmem.model.vlm import with_vision
        spec = with_vision(spec, setup.image_tokens, setup.train_vision or setup.train_projector,
                           lambda text, n, src: spec_from_hf_config(text, name=n, source=src))
    if spec.n_params > MAX_PARAMS:
        raise ConfigError(f"{spec.name}: {spec.n_params:.3g} parameters is above trainmem's limit of {MAX_PARAMS:.0e}")
    notes += default_notes(spec, fields)
    if notes:
        setup = make_setup(**fields)
    notes += _context_notes(spec, setup)
    if notes:  # after the notes the fields brought (a --from file's: trainmem.frameworks.readers)
        setup = setup.model_copy(update={"notes": tuple(setup.notes) + tuple(notes)})
    _check_step_size(setup)
    get_gpu(setup.gpu)  # an unknown GPU name is refused by every command, before any work
    validate_for_model(setup, spec)
    if spec.position == "learned" and setup.seq_len > model_context(spec):
        raise ConfigError(f"seq_len({setup.seq_len}) > the {model_context(spec)} positions of {spec.name} "
                          f"(max_position_embeddings({spec.max_position_embeddings}) less the padding offset)")
    return spec, setup


def precision_notes(fields: dict[str, Any]) -> list[str]:
    """The precision a run takes when the flags leave it to the GPU or name a family the engine has no recipe of,
    filled into ``fields``, with one note:

    - no precision on a GPU without bfloat16 (V100, T4): the engine's fp16 recipe, amp-fp16 for torch/fsdp2
      (HF ``--fp16``: autocast over fp32 weights), mixed-fp16 for deepspeed/megatron (DeepSpeed ``fp16.enabled``,
      Megatron ``--fp16``: 16-bit parameters, fp32 master weights);
    - ``bf16``/``fp16`` on deepspeed or megatron: the engine's mixed recipe (``bf16.enabled`` / ``--bf16``), the
      names every other command takes (:func:`trainmem.setup.engine_precision`, the planner's mapping too).

    An unknown GPU name is left to the setup's own validation."""
    engine = str(fields.get("engine") or "torch")
    p = fields.get("precision")
    if p is None:
        try:
            gpu = get_gpu(str(fields.get("gpu") or TrainingSetup.model_fields["gpu"].default))
        except ConfigError:
            return []
        if gpu.bf16:
            return []
        p = engine_precision(engine, "fp16")
        fields["precision"] = p
        return [f"precision {p}: the {gpu.name} has no bfloat16, so the {engine} engine runs its fp16 recipe "
                "(give --precision to change it)"]
    if p in ("bf16", "fp16") and engine in ("deepspeed", "megatron"):  # (no recipe of that name there)
        fields["precision"] = engine_precision(engine, str(p))
        return [f"--precision {p} on the {engine} engine is its {fields['precision']} recipe (16-bit parameters, fp32 "
                "master weights)"]
    return []


def _stack_target(spec: ModelSpec | None) -> Target:
    """What :func:`trainmem.frameworks.apply_stack` reads of the model (none before it is resolved) and the
    validation it checks each stack value with: the setup's, with the model's and the GPU's defaults filled in."""
    from trainmem.frameworks import Target

    def refusal(fields: Mapping[str, Any]) -> str | None:
        trial = dict(fields)
        try:
            if spec is not None:
                default_notes(spec, trial)
            precision_notes(trial)  # (as build_spec fills them: the precision a GPU without bf16 runs)
            setup = make_setup(**trial)
            if spec is not None:
                validate_for_model(setup, spec)
            if trial.get("precision") in ("bf16", "amp-bf16", "mixed-bf16") and not get_gpu(setup.gpu).bf16:
                # (memory/estimate.py refuses it so; a stack's bf16 on a V100 or T4 gives way to the GPU's default)
                return f"gpu {setup.gpu} has no bfloat16 support; use fp16 recipes (amp-fp16, mixed-fp16) or fp32"
        except ConfigError as err:
            return str(err)
        return None

    names = frozenset(TrainingSetup.model_fields)
    if spec is None:
        return Target(fields=names, refusal=refusal)
    return Target(fields=names, refusal=refusal, seq_len=min(_DEFAULT_SEQ_LEN, model_context(spec)),
                  num_layers=spec.num_layers, model_type=spec.model_type)


def default_notes(spec: ModelSpec, fields: dict[str, Any]) -> list[str]:
    """Fill the model-dependent defaults into ``fields`` (setup fields, unset = None/absent) and
    return one assumption line for each one filled."""
    notes = []
    context = model_context(spec)
    if fields.get("seq_len") is None and context < _DEFAULT_SEQ_LEN:
        fields["seq_len"] = context
        notes.append(f"seq_len {context}: the context of {spec.name} (max_position_embeddings), "
                     f"shorter than the default {_DEFAULT_SEQ_LEN} (give --seq-len to change it)")
    if fields.get("attn") is None and spec.model_type in _NO_SDPA:
        fields["attn"] = "eager"
        notes.append(f"attn eager: {_NO_SDPA[spec.model_type]} (give --attn flash for flash-attention-2)")
    elif fields.get("attn") is None and spec.derived is not None and not getattr(spec.derived, "supports_sdpa", True):
        fields["attn"] = "eager"  # (a class without SDPA: transformers refuses attn_implementation="sdpa" for it)
        notes.append(f"attn eager: {spec.model_type} has no sdpa attention in transformers ({spec.architecture})")
    return notes


def model_context(spec: ModelSpec) -> int:
    """Longest sequence the model's position table takes: ``max_position_embeddings``, less
    RoBERTa's offset (its positions start at ``pad_token_id + 1``: 512 of roberta-base's 514)."""
    if spec.model_type == "roberta":
        pad = spec.hf_config.get("pad_token_id", 1)
        pad = pad if type(pad) is int and pad >= 0 else 1
        return max(1, spec.max_position_embeddings - pad - 1)
    return spec.max_position_embeddings


def rope_context(spec: ModelSpec) -> int:
    """Tokens a RoPE model is made for: ``max_position_embeddings``, or factor · original context
    when its ``rope_scaling`` (linear, dynamic, yarn, ...) stretches further."""
    cfg = spec.hf_config
    scaling = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    context = spec.max_position_embeddings
    if isinstance(scaling, Mapping):
        factor = scaling.get("factor")
        original = scaling.get("original_max_position_embeddings", context)
        if isinstance(factor, (int, float)) and isinstance(original, (int, float)) and factor > 0:
            context = max(context, int(factor * original))
    return context


def _context_notes(spec: ModelSpec, setup: TrainingSetup) -> list[str]:
    if spec.position != "rope":
        return []
    context = rope_context(spec)
    if setup.seq_len <= context:
        return []
    return [f"warning: seq_len({setup.seq_len}) > the context {spec.name} was trained for ({context} tokens, "
            "max_position_embeddings and rope_scaling): RoPE extrapolates past it; the memory is as estimated, "
            "the model's quality there is not known"]


def check_trace_size(spec: ModelSpec, setup: TrainingSetup) -> None:
    """Refuse (one line, the limit stated) a trace that would run for many minutes."""
    values = {"num_layers": spec.num_layers, "grad_accum": setup.grad_accum,
              "layers_x_grad_accum": spec.num_layers * setup.grad_accum,
              "tokens_per_micro_batch": setup.tokens_per_micro_batch}
    for what, limit in TRACE_LIMITS.items():
        if values[what] > limit:
            raise ConfigError(f"cannot trace {what.replace('_x_', ' x ').replace('_', ' ')} = {values[what]:,} "
                              f"(the tracer's limit is {limit:,}, to finish in minutes); use `trainmem estimate`")


def _check_step_size(setup: TrainingSetup) -> None:
    for field, limit in STEP_LIMITS.items():
        value = getattr(setup, field)
        if value > limit:
            raise ConfigError(f"{field.replace('_', '-')}: {value:,} is above trainmem's limit of {limit:,}")
