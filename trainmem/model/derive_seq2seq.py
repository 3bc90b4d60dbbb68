"""Encoder–decoder models (T5, mT5, UMT5, FLAN-T5, BART, mBART, Pegasus, Marian ...), described from
``transformers`` itself, as :mod:`trainmem.model.derive` describes decoder-only families.

The estimator walks one stack of layers; an encoder–decoder model is walked as its encoder's layers
(indices ``0 .. L_enc-1``, run on the source sequence) followed by its decoder's (``L_enc .. L_enc+L_dec-1``,
each with self-attention, cross-attention over the encoder's output, and the MLP), which is the order
their forwards run and the reverse of their backwards.

1. **Parameters, exactly.** ``AutoModelForSeq2SeqLM``'s class (``T5ForConditionalGeneration``,
   ``BartForConditionalGeneration``, ...) is built on the meta device and counted by component: the shared
   token embedding, learned positions (BART's ``embed_positions`` of both stacks), each encoder layer and
   each decoder layer (self- and cross-attention together, MLP, norms; T5's ``relative_attention_bias``
   lives in the first layer of each stack's self-attention, ``num_heads × relative_attention_num_buckets``),
   the stacks' final norms (and BART's ``layernorm_embedding``), an untied head, the rest. The sum equals
   ``sum(p.numel())`` by construction. (transformers 5.24's ``T5Config`` forces ``tie_word_embeddings = True``
   and reads a config's ``tie_word_embeddings: false`` — T5 v1.1 / mT5 / FLAN-T5 — only as "do not rescale
   the decoder output by ``d_model**-0.5``", configuration_t5.py ``scale_decoder_outputs``: their lm_head,
   separate under transformers 4.x, is tied to the shared embedding there, and counted so.)
2. **What each layer saves.** A copy with 3 encoder and 3 decoder layers runs forward on fake tensors
   under the tracer's CUDA emulations (as the deriver does), at the (source, target) lengths of :data:`PAIRS`
   (random target-long labels; the model shifts them right into ``decoder_input_ids``) with 1 and 2
   sequences; every tensor autograd saves is recorded by storage and by the layer (and the layer's
   sub-module) that saved it. What one layer alone saves is that layer's; what several layers save
   (T5's position bias, which the first layer of a stack computes and every layer's attention keeps;
   the encoder's output, which every cross-attention's k and v projections read) is model-wide, once;
   what the encoder saves after its layers (its final norm, dropout) and the decoder before its layers
   (its embedding) is model-wide too. Layers 0 and 1 of each stack are kept apart (layer 0 computes T5's
   relative position bias). Each part is fitted in the source length s and the target length t
   (:class:`TwoLengthFit`): ``b·(a₁s + a₂s² + a₃t + a₄t² + a₅st) + c₀ + c₁s + … + c₅st``, exactly (rational least
   squares through seven pairs; fake-tensor bytes are integers).

The loss: both families' forwards run ``CrossEntropyLoss`` on the logits as they are (modeling_t5.py
``T5ForConditionalGeneration.forward`` and modeling_bart.py ``BartForConditionalGeneration.forward``,
transformers 5.24), no fp32 upcast: ``logits_upcast=False``.

Sequence lengths: the source is ``--seq-len`` tokens, the target ``--target-len`` (default: ``--seq-len``). The
walk gives the decoder's layers, its final norm, the LM head and the loss the target's tokens
(``TrainingSetup.for_target``), the per-token transients of each layer its stack's tokens (memory/plan.py
``StepPlan.layer_tokens``); the gradient stream at the backward's start is taken at the source's length. Refused (one line each, :meth:`Seq2SeqLayers.unsupported`): tensor / pipeline / context /
expert parallelism, Megatron, QLoRA, selective recompute, fp8, offload, torch.compile, a loss other
than the model's own.

LoRA (PEFT, ``--engine torch``, no recompute; full recompute is refused: the estimate read -4.7 % (T5) and -3.2 %
(BART) against a full trace, b 4, s 256 bf16. Traced: the peak is inside the recomputation of the last decoder layer
to be recomputed (decoder layer 0), which non-reentrant checkpointing stops early at its last save; its frames still
hold what the frozen base does not save (T5: the FF's wi_0 / wi_1 outputs, their product, the dropout's output
before the frozen wo), 2.75 MB beyond the layer's saved set, while the walk sizes that frame with the decoder-only
formula, memory/layers/lora.py ``lora_recompute_frame_bytes``: 1.0 MB. Also held there and seen by no pack hook:
each stack's embedding output, a leaf once ``enable_input_require_grads`` sets ``requires_grad`` on it, which its
AccumulateGrad node keeps until the backward reaches it. Both measured in the probe (tried, not kept: the live
storages the layer made and did not save, at its last save, with trainmem.trace's StorageTracker; a forward hook on
each nn.Embedding for leaf outputs): T5 bf16 -1.2 %, T5 amp +0.5 %, BART bf16 +3.0 %, BART amp -3.7 %. What BART amp
still lacks at the peak: the gradient of the encoder's output, accumulated over the decoder's cross-attentions (fp32
under autocast, 1 MB here), and the fp32 gradient stream, neither of which the walk has for an encoder–decoder model
(T5's full fine-tune under recompute, bf16, agrees within 0.5 % with activations 2.6 MB under the trace and
temporaries 2.6 MB over). Not within 3 %, so it stays refused): the adaptable linears of each stack's layers are
read from the meta build (:attr:`Seq2SeqLayers.linears`; targets as PEFT matches them, suffixes of the module
names); trainmem's default targets mean PEFT's own for the family (:data:`PEFT_DEFAULT_TARGETS`). What the layers
save is measured on the probe copy wrapped by ``get_peft_model`` (trace/lora.py ``inject_lora``, the tracer's own
set-up: frozen 16-bit base, fp32 adapters, the setup's ``lora_dropout``; ``enable_input_require_grads`` under
recompute), keyed by the LoRA setup in the cache: a frozen base saves no weight-gradient inputs, the adapters'
inputs, rank activations and dropout masks come with the probe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.model import derive as _d
from trainmem.model.derive import DerivedLayers, SavedPart
from trainmem.model.spec import LayerParams, ModelSpec, ParamCounts

if TYPE_CHECKING:
    from trainmem.setup import TrainingSetup

__all__ = ["Seq2SeqLayers", "seq2seq_spec", "is_seq2seq", "relative_bias_params"]

SEQ2SEQ_VERSION = 4
"""Bumped when the measurement changes (part of the disk-cache key)."""
_PROBE_LAYERS = 3
#: (source, target) lengths of the probe: the source and the target varied apart (the first three on s = t, as
#: derive.py's SEQ_LENS), seven points for the six terms of a part's fit (:class:`TwoLengthFit`)
PAIRS = ((64, 64), (128, 128), (192, 192), (128, 64), (64, 192), (192, 128), (96, 160))
_SEQ2SEQ_TYPES = ("t5", "mt5", "umt5", "bart", "mbart")
_KINDS = ("enc0", "enc", "dec0", "dec")
#: PEFT 0.21.2 utils/constants.py ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`` (what ``LoraConfig``
#: without ``target_modules`` adapts); tests/model/test_derive_seq2seq.py reads the installed file
PEFT_DEFAULT_TARGETS = {"t5": ("q", "v"), "mt5": ("q", "v"), "bart": ("q_proj", "v_proj")}
#: (encoder layers, decoder layers) config keys: T5 / mT5 / UMT5; BART / mBART / Pegasus / Marian ...
_LAYER_KEYS = (("num_layers", "num_decoder_layers"), ("encoder_layers", "decoder_layers"))
_CROSS_WORDS = ("crossattention", "encdecattention", "encoderattn")
_ATTN_WORDS = ("attention", "attn")
_MLP_WORDS = ("layerff", "densereludense", "fc1", "fc2", "mlp", "ffn", "feedforward", "finallayernorm", "activationfn")


def is_seq2seq(cfg: Mapping[str, Any]) -> bool:
    """Whether a config is an encoder–decoder model's: ``is_encoder_decoder`` true (every T5 / mT5 / BART
    config.json on the hub says so; ``PretrainedConfig`` defaults it to false) or a T5 / BART family type
    (whose config classes default it to true). No torch or transformers import."""
    return cfg.get("is_encoder_decoder") is True or (
        cfg.get("is_encoder_decoder") is None and str(cfg.get("model_type")) in _SEQ2SEQ_TYPES)


def relative_bias_params(num_heads: int, num_buckets: int) -> int:
    """T5's relative position bias of one stack: ``nn.Embedding(relative_attention_num_buckets, n_heads)``
    in the first layer's self-attention only (modeling_t5.py ``T5Attention.__init__``,
    ``has_relative_attention_bias=bool(i == 0)`` in ``T5Stack``; transformers 5.24)."""
    return num_heads * num_buckets


@dataclass
class Seq2SeqLayers(DerivedLayers):
    """``spec.derived`` of an encoder–decoder model: what each stack's layers save, measured on demand.
    Layer ``i`` of the walk is encoder layer ``i`` for ``i < encoder_layers``, else decoder layer
    ``i - encoder_layers``; :meth:`for_layer` gives the description as that layer sees it."""

    encoder_layers: int = 0
    decoder_layers: int = 0
    kind: str | None = None
    """None: the whole model; else the layer kind this view answers for (enc0, enc, dec0, dec)."""
    recompute: bool = False
    """The view is of a run with full recompute (:meth:`parts`)."""
    target_len: int | None = None
    """The view's target length (``--target-len``; None: the target is the source's ``seq_len``)."""
    frozen: tuple[str, ...] = ()
    """Parameters transformers builds with ``requires_grad=False`` (Pegasus's and Marian's sinusoidal position
    tables: modeling_pegasus.py ``PegasusSinusoidalPositionalEmbedding.create_weight``, transformers 5.24)."""
    linears: dict[str, tuple[tuple[str, int, int], ...]] = field(default_factory=dict)
    """Each stack's (``encoder``, ``decoder``) nn.Linear modules of one layer: (path in the layer, in, out)."""
    lora: tuple[Any, ...] | None = None
    """The view's LoRA set-up (:func:`_lora_key`), None without LoRA."""
    lora_setup: Any = field(default=None, repr=False, compare=False)
    _stack_probes: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def peft_default_targets(self) -> tuple[str, ...]:
        return PEFT_DEFAULT_TARGETS.get(self.model_type, ())

    def lora_linears(self, layer_idx: int) -> tuple[tuple[str, int, int], ...]:
        """The nn.Linear modules of walk layer ``layer_idx`` (model/lora_targets.py ``layer_linears``)."""
        return tuple(self.linears.get("encoder" if layer_idx < self.encoder_layers else "decoder", ()))

    @property
    def key(self) -> str:
        return _d._config_key({**self.config, "_seq2seq": SEQ2SEQ_VERSION})

    @property
    def note(self) -> str:
        return (f"{self.model_type}: encoder–decoder, derived from transformers ({self.architecture} on the meta "
                f"device for exact parameters; {self.encoder_layers} encoder then {self.decoder_layers} decoder "
                f"layers walked in that order; layers 0 and 1 of each stack of a {_PROBE_LAYERS}+{_PROBE_LAYERS}-layer "
                f"copy traced on fake tensors at (source, target) = {', '.join(f'({s}, {t})' for s, t in PAIRS)} with "
                "1 and 2 sequences); source --seq-len tokens, target --target-len (default: --seq-len); engine paths: "
                "torch, fsdp2, deepspeed over data "
                "parallelism, recompute none or full (no tp/pp/cp/ep, megatron, QLoRA, selective recompute, fp8, "
                "offload, --compile or another --loss)")

    def unsupported(self, setup: "TrainingSetup") -> str | None:
        if setup.is_lora and (setup.qlora or setup.engine != "torch" or "lm_head" in setup.lora_targets
                              or setup.recompute != "none"):
            return (f"{self.model_type}: LoRA on an encoder–decoder model is modelled with --engine torch, no QLoRA, "
                    "no lm_head target and --recompute none")
        why = super().unsupported(setup.model_copy(update={"lora_rank": 0}) if setup.is_lora else setup)
        if why:
            return why
        if self.frozen:
            return (f"{self.model_type}: transformers builds {', '.join(self.frozen)} frozen (requires_grad=False); "
                    "frozen parameters are not modelled for an encoder–decoder model (they would get gradients and "
                    "optimizer states)")
        if setup.loss != "hf":
            return (f"--loss {setup.loss} is not modelled for {self.model_type} (encoder–decoder: its forward runs "
                    "CrossEntropyLoss itself); use --loss hf")
        if getattr(setup, "compile", False):
            return f"--compile is not modelled for {self.model_type} (encoder–decoder); leave it off"
        return None

    def kind_of(self, layer_idx: int) -> str:
        if layer_idx < self.encoder_layers:
            return "enc0" if layer_idx == 0 else "enc"
        return "dec0" if layer_idx == self.encoder_layers else "dec"

    def for_layer(self, layer_idx: int, setup: "TrainingSetup | None" = None) -> "Seq2SeqLayers":
        """This description as layer ``layer_idx`` of the walk sees it (its stack's parts) under ``setup``."""
        view = dataclasses.replace(self, kind=self.kind_of(layer_idx),
                                   recompute=setup is not None and setup.recompute == "full",
                                   target_len=setup.target_len if setup is not None else None,
                                   lora=_lora_key(setup), lora_setup=setup if _lora_key(setup) else None)
        view._stack_probes = self._stack_probes  # (one measurement for all views)
        return view

    def for_target(self, setup: "TrainingSetup") -> "Seq2SeqLayers":
        """The whole model's description under ``setup``'s target length (model-wide parts: memory/layers/model_wide.py)."""
        return self.for_layer(0, setup)

    def parts(self, mode: str, attn: str, seq_len: int) -> tuple[SavedPart, ...]:
        """The layer's parts. ``recomputed:shared``: what the first layer of a stack makes that the stack's
        other layers keep too (T5's position biases; model-wide, :meth:`wide`): counted again only when that
        layer is recomputed (a checkpointed first layer makes it a second time in its recomputation, the
        forward's copy held by the later layers' checkpoint inputs; traced)."""
        got = self._measured(mode, attn)["parts"][self.kind or "enc"]
        tgt = self.target_len or seq_len
        return tuple(p.at(seq_len, tgt) for p in got if self.recompute or p.name != "recomputed:shared")

    def wide(self, mode: str, attn: str, seq_len: int) -> SavedPart:
        return self._measured(mode, attn)["wide"].at(seq_len, self.target_len or seq_len)

    def input_kept(self, mode: str, attn: str, seq_len: int) -> SavedPart:
        return self._measured(mode, attn)["input_kept"][self.kind or "enc"].at(seq_len, self.target_len or seq_len)

    def post_mlp_norm(self, mode: str, attn: str, seq_len: int) -> bool:
        return False

    def _measured(self, mode: str, attn: str) -> dict[str, Any]:
        got = self._stack_probes.get((mode, attn, self.lora))
        if got is None:
            got = _cached(self, mode, attn)
            self._stack_probes[(mode, attn, self.lora)] = got
        return got


def _lora_key(setup: "TrainingSetup | None") -> tuple[Any, ...] | None:
    """What of a LoRA setup shapes the probe: rank, targets, dropout, adapter and base dtypes, input grads."""
    if setup is None or not setup.is_lora:
        return None
    return (setup.lora_rank, tuple(setup.lora_targets), setup.lora_dropout, setup.adapter_dtype, setup.precision,
            setup.recompute == "full")


def peft_targets(d: Seq2SeqLayers, targets: tuple[str, ...]) -> str | list[str]:
    """``LoraConfig.target_modules``: ``"all-linear"`` or the layers' linear paths the targets name (PEFT's suffix
    match); trainmem's default targets mean PEFT's for the family."""
    from trainmem.model.lora_targets import ALL_LINEAR, _DEFAULT, _matches, normalize_targets

    t = normalize_targets(targets)
    if t == _DEFAULT and d.peft_default_targets:
        t = d.peft_default_targets
    if ALL_LINEAR in t:
        return ALL_LINEAR
    paths = {p for lins in d.linears.values() for p, _, _ in lins}
    return sorted(p for p in paths if any(_matches(p, x) for x in t))


# --------------------------------------------------------------------------- the two-length fit
def _terms(s: int, t: int) -> tuple[Fraction, ...]:
    """The fit's terms at source length ``s`` and target length ``t``, in units of 64 tokens: 1, s, s², t, t², s·t."""
    u, v = Fraction(s, 64), Fraction(t, 64)
    return (Fraction(1), u, u * u, v, v * v, u * v)


def _least_squares(rows: list[tuple[Fraction, ...]], ys: list[int]) -> list[Fraction]:
    """Exact least squares (normal equations, Gauss–Jordan in rationals): fake-tensor bytes are exact integers."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * y for r, y in zip(rows, ys))]
         for i in range(n)]
    for c in range(n):
        pivot = next((r for r in range(c, n) if a[r][c] != 0), None)
        if pivot is None:  # pragma: no cover - PAIRS are chosen in general position
            raise RuntimeError("derive_seq2seq: the probe's (source, target) pairs do not determine the fit")
        a[c], a[pivot] = a[pivot], a[c]
        a[c] = [x / a[c][c] for x in a[c]]
        for r in range(n):
            if r != c and a[r][c] != 0:
                a[r] = [x - a[r][c] * y for x, y in zip(a[r], a[c])]
    return [a[i][n] for i in range(n)]


@dataclass(frozen=True)
class TwoLengthFit:
    """What one part of a layer (or the model-wide set) saves as a function of the source length s and the target
    length t (in 64-token units): ``b·(per_seq · (s, s², t, t², s·t)) + shared · (1, s, s², t, t², s·t)``. An
    encoder layer's terms are in s only (its activations, T5's s×s scores); a decoder layer's in t (its
    self-attention, MLP) and s·t (the cross-attention's scores of eager attention) and s (the cross-attention's k and
    v of the encoder's output); the model-wide set holds the encoder's output (s), T5's position biases (s², t²).
    Fitted through :data:`PAIRS` with 1 and 2 sequences: per sequence from what the second adds (as derive.py
    ``_fit``: no per-sequence constant), the shared terms from what is left of one sequence's bytes."""

    name: str
    component: str
    per_seq: tuple[float, ...]
    """Bytes per sequence: coefficients of s, s², t, t², s·t."""
    shared: tuple[float, ...]
    """Bytes the micro-batch's sequences share: coefficients of 1, s, s², t, t², s·t."""

    @classmethod
    def fit(cls, name: str, component: str, one: list[int], two: list[int]) -> "TwoLengthFit":
        terms = [_terms(s, t) for s, t in PAIRS]
        per = _least_squares([r[1:] for r in terms], [b2 - b1 for b1, b2 in zip(one, two)])
        left = [b1 - sum(c * x for c, x in zip(per, r[1:])) for b1, r in zip(one, terms)]
        shared = _least_squares(terms, left)
        return cls(name, component, tuple(float(c) for c in per), tuple(float(c) for c in shared))

    @classmethod
    def load(cls, raw: Mapping[str, Any]) -> "TwoLengthFit":
        return cls(raw["name"], raw["component"], tuple(raw["per_seq"]), tuple(raw["shared"]))

    def per_seq_bytes(self, s: int, t: int) -> float:
        return sum(c * float(x) for c, x in zip(self.per_seq, _terms(s, t)[1:]))

    def shared_bytes(self, s: int, t: int) -> float:
        return sum(c * float(x) for c, x in zip(self.shared, _terms(s, t)))

    def at(self, s: int, t: int) -> SavedPart:
        """This part at source ``s`` and target ``t`` as a SavedPart the walk reads at ``(b, s)``:
        ``bytes_for(b, s) = shared + b·per_seq``."""
        return SavedPart(self.name, self.component, self.per_seq_bytes(s, t) / s, 0.0,
                         int(round(self.shared_bytes(s, t))))


# --------------------------------------------------------------------------- cache
def _cached(d: Seq2SeqLayers, mode: str, attn: str) -> dict[str, Any]:
    lora = "" if d.lora is None else "-lora-" + _d._config_key({"lora": list(map(str, d.lora))})[:16]
    path = _d.cache_dir() / f"{d.key}-seq2seq-{mode}-{attn}{lora}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return {"parts": {k: tuple(TwoLengthFit.load(p) for p in v) for k, v in raw["parts"].items()},
                "wide": TwoLengthFit.load(raw["wide"]),
                "input_kept": {k: TwoLengthFit.load(v) for k, v in raw["input_kept"].items()}}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    got = _measure(d, mode, attn)
    _d._write_json(path, {"parts": {k: [dataclasses.asdict(p) for p in v] for k, v in got["parts"].items()},
                          "wide": dataclasses.asdict(got["wide"]),
                          "input_kept": {k: dataclasses.asdict(v) for k, v in got["input_kept"].items()}})
    return got


# --------------------------------------------------------------------------- torch side
def _seq2seq_class(transformers: Any, model_type: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    name = MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if not name or not hasattr(transformers, name):
        raise UnsupportedError(f"model_type {model_type!r}: transformers {transformers.__version__} has no "
                               "sequence-to-sequence LM class for it")
    return name


def _layer_keys(config: Any) -> tuple[str, str]:
    for enc, dec in _LAYER_KEYS:
        if isinstance(getattr(config, enc, None), int):
            return enc, dec
    raise ConfigError(f"config.json ({type(config).__name__}): no encoder/decoder layer counts "
                      f"({' / '.join('+'.join(k) for k in _LAYER_KEYS)})")


def _config(transformers: Any, cfg: Mapping[str, Any], model_type: str, layers: int | None = None) -> Any:
    """The transformers config of ``cfg``; ``layers``: a copy with that many encoder and decoder layers."""
    config = _d._hf_config(transformers, cfg, model_type)
    if layers is not None:
        enc, dec = _layer_keys(config)
        setattr(config, enc, layers)
        setattr(config, dec, layers)
        if hasattr(config, "num_hidden_layers") and enc == "encoder_layers":
            with contextlib.suppress(AttributeError, TypeError):
                config.num_hidden_layers = layers
    return config


def _stack_counts(config: Any) -> tuple[int, int]:
    enc, dec = _layer_keys(config)
    n_enc = getattr(config, enc)
    n_dec = getattr(config, dec, None)
    n_dec = n_enc if n_dec is None else n_dec  # (T5Config: num_decoder_layers defaults to num_layers)
    if not (isinstance(n_enc, int) and isinstance(n_dec, int)) or n_enc < 1 or n_dec < 1:
        raise ConfigError(f"config.json: {enc}({n_enc!r}) and {dec}({n_dec!r}) must be positive integers")
    return n_enc, n_dec


def _stack_layers(torch: Any, model: Any, n_enc: int, n_dec: int) -> tuple[Any, Any]:
    return (_d._decoder_layers(torch, model.get_encoder(), n_enc),
            _d._decoder_layers(torch, model.get_decoder(), n_dec))


def _where(layer: Any, name: str) -> str:
    """A layer's sub-module (dotted ``name`` relative to the layer) → cross | mlp | norm | attention, by the
    attribute and class names on its path: T5's ``layer.1`` is a ``T5LayerCrossAttention``, ``layer.2`` a
    ``T5LayerFF``; BART's ``encoder_attn``, ``fc1`` / ``fc2`` / ``final_layer_norm``. A norm outside the
    cross-attention and the MLP is the self-attention's (``input_norm``)."""
    tokens: list[str] = []
    mod = layer
    for part in name.split("."):
        mod = getattr(mod, part) if not part.isdigit() else mod[int(part)]
        tokens += [part.lower().replace("_", ""), type(mod).__name__.lower()]
    if any(w in t for t in tokens for w in _CROSS_WORDS):
        return "cross"
    if any(w in t for t in tokens for w in _MLP_WORDS):
        return "mlp"
    if "norm" in tokens[-2]:
        return "norm"
    if any(w in t for t in tokens for w in _ATTN_WORDS):
        return "attention"
    return "norm"


class _Owner:
    """Which layer (stack, index) and which of its sub-modules is running; where outside the layers."""

    def __init__(self) -> None:
        self.layer: tuple[str, int] | None = None
        self.path: list[str] = []
        self.last = ""
        """The sub-module kind that ran last (attention, cross, mlp, norm)."""
        self.region: str | None = None
        self.down = False
        self.after_core = False
        self.inputs: dict[tuple[str, int], int] = {}
        self.encoder_output: tuple[int, int] | None = None
        """(storage, bytes) of the encoder's output as the decoder layers receive it."""


def _arg_index(layer: Any, name: str) -> int:
    """Position of the forward argument ``name`` after ``hidden_states`` (T5Block passes the encoder's output
    4th, BART's decoder layer 3rd: positional, for gradient checkpointing); -1 if absent."""
    import inspect

    names = [p for p in inspect.signature(type(layer).forward).parameters if p != "self"]
    return names.index(name) if name in names else -1


def _t5_ff_module(layer: Any) -> Any:
    """The MLP sub-module of a layer: T5's ``layer[-1]`` (T5LayerFF), else the layer itself (BART's fc1/fc2)."""
    sub = getattr(layer, "layer", None)
    return sub[-1] if sub is not None else layer


def _hooks(torch: Any, model: Any, stacks: dict[str, Any], owner: _Owner) -> list[Any]:
    handles = []
    for region, mod in (("encoder", model.get_encoder()), ("decoder", model.get_decoder())):
        handles.append(mod.register_forward_pre_hook(lambda *_, r=region: setattr(owner, "region", r)))
        handles.append(mod.register_forward_hook(lambda *_: setattr(owner, "region", None)))
    for stack, layers in stacks.items():
        for i, layer in enumerate(layers):
            at = _arg_index(layer, "encoder_hidden_states")

            def enter(m: Any, a: tuple, k: dict, key: tuple[str, int] = (stack, i), at: int = at) -> None:
                x = a[0] if a else k.get("hidden_states")
                if x is not None and hasattr(x, "untyped_storage"):
                    owner.inputs[key] = id(x.untyped_storage())
                enc = k.get("encoder_hidden_states", a[at] if 0 <= at < len(a) else None)
                if enc is not None and hasattr(enc, "untyped_storage"):
                    owner.encoder_output = (id(enc.untyped_storage()), enc.untyped_storage().nbytes())
                owner.layer, owner.path, owner.down, owner.after_core, owner.last = key, [], False, False, ""

            handles.append(layer.register_forward_pre_hook(enter, with_kwargs=True))
            handles.append(layer.register_forward_hook(lambda *_: setattr(owner, "layer", None)))
            for name, sub in layer.named_modules():
                if not name:
                    continue
                def push(*_: Any, w: str = _where(layer, name)) -> None:
                    if w != owner.last:  # (the cross-attention's core is not the self-attention's)
                        owner.after_core = False
                    owner.path.append(w)
                    owner.last = w

                handles.append(sub.register_forward_pre_hook(push))
                handles.append(sub.register_forward_hook(lambda *_: _pop(owner)))
            linears = [m for m in _t5_ff_module(layer).modules() if _d._is_matmul(torch, m)]
            if linears:  # the MLP's output projection: its last matmul (T5 wo, BART fc2)
                handles.append(linears[-1].register_forward_pre_hook(lambda *_: setattr(owner, "down", True)))
                handles.append(linears[-1].register_forward_hook(lambda *_: setattr(owner, "down", False)))
    return handles


def _pop(owner: _Owner) -> None:
    """(a forward hook returning a value would replace the module's output)"""
    if owner.path:
        owner.path.pop()


def _part_name(owner: _Owner) -> tuple[str, str]:
    """(walk bucket, component) of what the running sub-module saves (derive.py ``_part_name``'s buckets)."""
    where = owner.path[-1] if owner.path else "layer"
    if where == "mlp":
        return ("mlp_down_input" if owner.down else "derived:mlp"), "mlp"
    if where in ("attention", "cross"):
        return ("o_input" if owner.after_core else "derived:attention"), "attention"
    if where == "norm":
        return "input_norm", "norm"
    return "derived:layer", "norm"


def _core_watch(owner: _Owner) -> Any:
    from torch.overrides import TorchFunctionMode

    class _CoreWatch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in ("softmax", "scaled_dot_product_attention") and owner.path:
                owner.after_core = True
            return out

    return _CoreWatch()


def _forward(torch: Any, model: Any, stacks: dict[str, Any], vocab: int, b: int, s: int, t: int, amp: Any,
             copies: set[int]) -> dict[str, Any]:
    """One forward: per layer kind {bucket: bytes}, the model-wide bytes, each kind's saved input itself."""
    owner = _Owner()
    first: dict[int, tuple[Any, str, str, int]] = {}
    savers: dict[int, set[tuple[str, int]]] = {}
    params = {id(p.untyped_storage()) for p in model.parameters()}
    kept: list[Any] = []

    def pack(t: Any) -> Any:
        kept.append(t)
        st = t.untyped_storage()
        sid = id(st)
        if sid in params or sid in copies:
            return t
        if owner.layer is not None:
            savers.setdefault(sid, set()).add(owner.layer)
            if sid not in first:
                first[sid] = (owner.layer, *_part_name(owner), st.nbytes())
        elif sid not in first:
            first[sid] = (owner.region, "", "", st.nbytes())
        return t

    handles = _hooks(torch, model, stacks, owner)
    ids = torch.randint(0, vocab, (b, s))
    labels = torch.randint(0, vocab, (b, t))  # (the model shifts them right into decoder_input_ids)
    try:
        with _core_watch(owner), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=amp) if amp is not None else contextlib.nullcontext():
                out = model(input_ids=ids, labels=labels, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return _tally(first, savers, owner, id(ids.untyped_storage()))


def _tally(first: dict, savers: dict, owner: _Owner, ids_storage: int) -> dict[str, Any]:
    """Storages by who saved them first: one layer alone (its kind's part), several layers (model-wide), the
    encoder outside its layers and the decoder before its layers (model-wide; the input ids are the generic
    embedding's), the encoder's output that the decoder's cross-attentions read (model-wide, once: the model's
    output holds it through the loss, the decoder's checkpoints through the backward)."""
    kind_of = {("encoder", 0): "enc0", ("encoder", 1): "enc", ("decoder", 0): "dec0", ("decoder", 1): "dec"}
    parts: dict[str, dict[tuple[str, str], int]] = {k: {} for k in _KINDS}
    wide = 0
    kept_input = dict.fromkeys(_KINDS, 0)
    shared_made = dict.fromkeys(_KINDS, 0)
    decoder_started = False
    for sid, (where, name, comp, n) in first.items():
        if isinstance(where, tuple):
            decoder_started |= where[0] == "decoder"
            if len(savers.get(sid, ())) > 1:
                wide += n
                if where in kind_of:  # (made by this layer, kept by the others: T5's position bias)
                    shared_made[kind_of[where]] += n
            elif where in kind_of:
                k = kind_of[where]
                parts[k][(name, comp)] = parts[k].get((name, comp), 0) + n
                if owner.inputs.get(where) == sid:
                    kept_input[k] += n
        elif sid != ids_storage and (where == "encoder" or (where == "decoder" and not decoder_started)):
            wide += n
    if owner.encoder_output is not None and owner.encoder_output[0] not in first:
        wide += owner.encoder_output[1]
    for k, n in shared_made.items():
        if n:
            parts[k][("recomputed:shared", "attention")] = n
    return {"parts": parts, "wide": wide, "input_kept": kept_input}


def _measure(d: Seq2SeqLayers, mode: str, attn: str) -> dict[str, Any]:
    torch, transformers = _d._import_torch()
    if torch is None:
        raise UnsupportedError(_d._needs_torch(d.model_type))
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace.autocast import cuda_autocast
    from trainmem.trace.dropout import cuda_dropout
    from trainmem.trace.hf_eager import eager_branches
    from trainmem.trace.sdpa import cuda_sdpa

    param_dtype, amp_name = _d._MODES[mode]
    amp = getattr(torch, amp_name) if amp_name else None
    if d.lora_setup is not None:  # (the frozen base in 16 bits for autocast recipes too: trace/lora.py)
        from trainmem.trace.lora import lora_base_dtype
        param_dtype = str(lora_base_dtype(d.lora_setup)).replace("torch.", "")
    config = _config(transformers, d.config, d.model_type, layers=_PROBE_LAYERS)
    vocab = int(getattr(config, "vocab_size", 0) or 0) or 2
    runs: dict[tuple[int, int, int], dict[str, Any]] = {}
    copies: set[int] = set()
    with contextlib.ExitStack() as stack:
        stack.enter_context(FakeTensorMode())
        stack.enter_context(cuda_dropout())
        stack.enter_context(cuda_sdpa())
        stack.enter_context(cuda_autocast(lambda t: copies.add(id(t.untyped_storage()))))
        stack.enter_context(eager_branches())
        model = _d._build(transformers, torch, config, d.architecture, dtype=getattr(torch, param_dtype), attn=attn)
        model.train()
        if d.lora_setup is not None:
            from trainmem.trace.lora import inject_lora
            model = inject_lora(model, peft_targets(d, d.lora_setup.lora_targets), d.lora_setup)
        stacks = dict(zip(("encoder", "decoder"), _stack_layers(torch, model, _PROBE_LAYERS, _PROBE_LAYERS)))
        quiet = logging.getLogger("torch._subclasses.fake_tensor")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        stack.callback(quiet.setLevel, level)
        try:
            for b in (1, 2):
                for s, t in PAIRS:
                    copies.clear()
                    runs[(b, s, t)] = _forward(torch, model, stacks, vocab, b, s, t, amp, copies)
                    torch.clear_autocast_cache()
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"transformers cannot run {d.architecture} on this config: {msg}") from None
    return _fits(runs)


def _fits(runs: dict[tuple[int, int, int], dict[str, Any]]) -> dict[str, Any]:
    def fit(name: str, comp: str, pick: Any) -> TwoLengthFit:
        return TwoLengthFit.fit(name, comp, [pick(runs[(1, s, t)]) for s, t in PAIRS],
                                [pick(runs[(2, s, t)]) for s, t in PAIRS])

    parts: dict[str, tuple[TwoLengthFit, ...]] = {}
    kept: dict[str, TwoLengthFit] = {}
    for kind in _KINDS:
        keys = sorted({key for r in runs.values() for key in r["parts"][kind]})
        parts[kind] = tuple(fit(name, comp, lambda r, k=(name, comp): r["parts"][kind].get(k, 0)) for name, comp in keys)
        kept[kind] = fit("derived:input_kept", "norm", lambda r: r["input_kept"][kind])
    return {"parts": parts, "wide": fit("derived:model_wide", "norm", lambda r: r["wide"]), "input_kept": kept}


# --------------------------------------------------------------------------- parameters
def _layer_params(torch: Any, layer: Any) -> LayerParams:
    """One encoder or decoder layer's parameters: self- and cross-attention, MLP, the rest (norms)."""
    by = {"attention": 0, "mlp": 0, "norm": 0}
    seen: set[int] = set()
    for name, sub in layer.named_modules():
        if not name:
            continue
        where = _where(layer, name)
        comp = "attention" if where in ("attention", "cross") else where
        if "norm" in name.lower().split(".")[-1] or "norm" in type(sub).__name__.lower():
            comp = "norm"
        for p in sub.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                by[comp] += p.numel()
    for p in layer.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            by["norm"] += p.numel()
    matmul = sum(m.weight.numel() for m in layer.modules() if _d._is_matmul(torch, m))
    return LayerParams(attention=by["attention"], norms=by["norm"], mlp=by["mlp"], matmul=matmul)


def _param_counts(torch: Any, model: Any, enc_layers: Any, dec_layers: Any) -> tuple[ParamCounts, bool]:
    return _d.component_counts(torch, model, (*enc_layers, *dec_layers), _layer_params, "derive_seq2seq")


def _built_fields(torch: Any, transformers: Any, cfg: Mapping[str, Any], model_type: str, max_layers: int,
                  activations: frozenset[str]) -> dict[str, Any]:
    """The ModelSpec fields of a meta-device build of an encoder–decoder ``cfg`` (JSON-able)."""
    architecture = _seq2seq_class(transformers, model_type)
    config = _config(transformers, cfg, model_type)
    n_enc, n_dec = _stack_counts(config)
    if n_enc + n_dec > max_layers:
        raise ConfigError(f"config.json: {n_enc + n_dec:,} layers are above trainmem's limit of {max_layers:,}")
    with torch.device("meta"):
        model = _d._build(transformers, torch, config, architecture)
    enc_layers, dec_layers = _stack_layers(torch, model, n_enc, n_dec)
    counts, tied = _param_counts(torch, model, enc_layers, dec_layers)
    linears = {name: [[n, m.in_features, m.out_features] for n, m in layers[0].named_modules()
                      if isinstance(m, torch.nn.Linear)] for name, layers in (("encoder", enc_layers), ("decoder", dec_layers))}
    h = int(_d._first_attr(config, "d_model", "hidden_size"))
    heads = int(_d._first_attr(config, "num_heads", "encoder_attention_heads", "num_attention_heads"))
    head_dim = int(_d._first_attr(config, "d_kv", "head_dim", default=h // heads))
    width = int(_d._first_attr(config, "d_ff", "encoder_ffn_dim", "intermediate_size", default=4 * h))
    gated = bool(getattr(config, "is_gated_act", False))
    act = str(_d._first_attr(config, "dense_act_fn", "activation_function", "hidden_act", default="relu"))
    names = {type(m).__name__.lower() for m in model.modules()}
    max_pos = _d._first_attr(config, "max_position_embeddings", default=None)
    return dict(
        model_type=model_type, architecture=architecture, hidden_size=h, num_layers=n_enc + n_dec,
        num_attention_heads=heads, num_kv_heads=heads, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=width, vocab_size=int(config.vocab_size), tie_word_embeddings=tied, mlp_gated=gated,
        hidden_act=act if act in activations else "gelu",
        norm="layernorm" if any(n == "layernorm" for n in names) else "rmsnorm",
        position="learned" if counts.position_embedding else "none",
        max_position_embeddings=int(max_pos) if isinstance(max_pos, int) and counts.position_embedding else 2**20,
        logits_upcast=False,
        params={**dataclasses.asdict(counts), "layers": [dataclasses.asdict(lp) for lp in counts.layers]},
        supports_sdpa=bool(getattr(getattr(transformers, architecture), "_supports_sdpa", False)),
        encoder_layers=n_enc, decoder_layers=n_dec, activations=sorted(activations),
        frozen=[n for n, p in model.named_parameters() if not p.requires_grad], linears=linears)


_NOT_SPEC = ("params", "supports_sdpa", "activations", "encoder_layers", "decoder_layers", "frozen", "linears")


def seq2seq_spec(cfg: Mapping[str, Any], *, name: str, source: str = "", described: str = "",
                 max_layers: int = 2048, activations: frozenset[str] = frozenset()) -> ModelSpec:
    """A ``ModelSpec`` for an encoder–decoder config, from transformers itself: exact parameter counts from a
    meta-device build (cached on disk per config); ``spec.derived`` (:class:`Seq2SeqLayers`) measures the
    layers on demand. ``UnsupportedError`` without torch/transformers; ``ConfigError`` where transformers
    refuses the config."""
    model_type = str(cfg.get("model_type"))
    if not _d._torch_installed():
        raise UnsupportedError(_d._needs_torch(model_type, described))
    clean = _d._clean(cfg)
    key = _d._config_key({**clean, "_seq2seq": SEQ2SEQ_VERSION})
    path = _d.cache_dir() / f"{key}-seq2seq-spec.json"
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        fields = None
    if not isinstance(fields, dict) or fields.get("activations") != sorted(activations):
        torch, transformers = _d._import_torch()
        if torch is None:
            raise UnsupportedError(_d._needs_torch(model_type, described))
        fields = _built_fields(torch, transformers, cfg, model_type, max_layers, activations)
        _d._write_json(path, fields)
    params = dict(fields["params"])
    params["layers"] = tuple(LayerParams(**lp) for lp in params["layers"])
    spec_fields = {k: v for k, v in fields.items() if k not in _NOT_SPEC}
    derived = Seq2SeqLayers(config=clean, model_type=model_type, architecture=fields["architecture"],
                            supports_sdpa=fields["supports_sdpa"], encoder_layers=fields["encoder_layers"],
                            decoder_layers=fields["decoder_layers"], frozen=tuple(fields.get("frozen", ())),
                            linears={k: tuple((str(p), int(i), int(o)) for p, i, o in v)
                                     for k, v in fields.get("linears", {}).items()})
    return ModelSpec(name=name, **spec_fields, params=ParamCounts(**params), source=source, hf_config=dict(cfg),
                     derived=derived)
