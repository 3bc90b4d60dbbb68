"""Describe an architecture trainmem has no hand-written layer description for, from ``transformers`` itself.

Two measurements, both on tensors without data (so any size costs the same):

1. **Parameters, exactly.** The ``*ForCausalLM`` class is built on the meta device
   (``AutoModelForCausalLM.from_config`` under ``torch.device("meta")``) and its parameters are counted by
   component: the input embedding, learned positions, each decoder layer (attention / MLP / norms by the
   layer's children), the final norm, an untied head, the rest. Their sum is
   ``sum(p.numel() for p in model.parameters())`` (tied weights once) by construction.
2. **What a layer saves for backward.** A 3-layer copy of the config is run forward on fake tensors
   (``torch._subclasses.FakeTensorMode``) with the tracer's CUDA emulations (fused SDPA kernels, CUDA
   autocast lists and weight-cast cache, fused dropout: ``trainmem/trace``), and every tensor autograd
   saves (``torch.autograd.graph.saved_tensors_hooks``) is recorded by storage while the middle layer runs,
   by the layer's child that saved it. Storages that the neighbouring layers save too (rotary cos/sin,
   masks) are the model-wide part; parameters and autocast's 16-bit weight copies are left out (the
   estimator counts those from the parameter counts). Six runs — s = s₁, s₂, s₃ with b = 1 and 2 —
   give, per child, ``bytes = b·(α·s + β·s²) + γ + c·s + e·s²``: per sequence a per-token term α and a
   quadratic term β (an eager s×s softmax); shared by the sequences (GLM-4 rebuilds its rotary cos/sin in
   every layer) a constant γ and terms c, e.

Results are cached per (config, precision class, attention) in this process and on disk
(``$TRAINMEM_CACHE_DIR``, default ``~/.cache/trainmem/derived``; keyed by the config, transformers' and
torch's versions). Needs the ``trace`` extra (torch, transformers); without it, one clear line.

Mixture-of-experts layers run transformers' grouped_mm experts (``integrations/moe.py``, the default in 5.24;
``trainmem/trace/moe.py``): their saved shapes depend on tokens·top_k only, so the measurement holds for any routing
(:data:`MOE_NOTE`). Mamba-2 mixers are probed through a stand-in of mamba_ssm's fused CUDA function
(``trainmem/trace/mamba.py``): what it saves, not what the CPU torch path keeps (:data:`MAMBA_NOTE`).

Layers of several kinds (their children's names and classes differ: Bamba, Granite-4 hybrid, Nemotron-H with
Mamba-2 and attention layers interleaved) are probed once per kind (:meth:`DerivedLayers.probe_layer`), and the walk
asks each layer's kind (:meth:`DerivedLayers.for_layer`). Mamba-1 mixers (mamba, falcon_mamba, jamba) are refused.

Known limitations: layers of one kind are taken to save what the probed one saves (per-layer ``layer_types``
alternating sliding / full attention are not told apart); backward temporaries (an activation's backward, a
kernel's recomputation) are not measured, only saved tensors; encoder–decoder models are derived apart
(derive_seq2seq.py); tensor, pipeline, context and expert parallelism,
Megatron, LoRA/QLoRA, selective recompute, fp8 and offload are refused until the family is described
(the layer's sharding and op-level recompute need the structure, not only the sizes).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib.metadata
import importlib.util
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.model.spec import LayerParams, ModelSpec, ParamCounts

if TYPE_CHECKING:
    from trainmem.setup import TrainingSetup

__all__ = ["DerivedLayers", "SavedPart", "derive_spec", "probe_lengths", "DERIVE_VERSION", "SEQ_LENS", "cache_dir"]

DERIVE_VERSION = 8
"""Bumped when the measurement changes (part of the disk-cache key)."""
SEQ_LENS = (64, 128, 192)
"""The sequence lengths of the fit (s₁, s₂, s₃), each with micro-batches of 1 and 2 sequences."""
_PROBE_LAYERS = 3
_DROP_KEYS = ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "auto_map",
              "quantization_config")
_ATTENTION_WORDS = ("attn", "attention", "mixer", "mamba")
"""(a Mamba mixer is the layer's token mixer: it goes with attention)"""
_MLP_WORDS = ("mlp", "ffn", "feed_forward", "feedforward", "moe", "expert")
_REFUSED_AXES = ("tp", "pp", "cp", "ep")
MOE_NOTE = ("mixture-of-experts layers run transformers' grouped_mm experts (integrations/moe.py "
            "grouped_mm_experts_forward, transformers 5.24: the tokens·top_k (token, expert) rows sorted by expert, one "
            "grouped GEMM per projection): what they save depends on tokens·top_k only, so any routing, balanced or "
            "skewed, saves the same bytes; the step time counts every expert's FLOPs (not the top_k routed ones)")
LLAMA4_MOE_NOTE = ("Llama 4's mixture-of-experts layers (Llama4TextMoe, transformers 5.24 modeling_llama4.py) run every "
                   "expert on every token: the router's sigmoid top-k scores (0 for the others) scale num_local_experts "
                   "copies of the tokens, batched through torch.bmm; what they save grows with tokens·num_local_experts, "
                   "not tokens·top_k, and is measured so")
"""(not grouped_mm: :data:`MOE_NOTE` does not hold for llama4_text)"""
MAMBA_NOTE = ("Mamba-2 mixers saved as mamba_ssm 2.3.2's fused CUDA kernel saves them (MambaSplitConv1dScanCombinedFn: "
              "the in_proj output, the scan output and the norm's rstd per token; the scan states are recomputed in "
              "backward), not as the CPU torch path does (trainmem/trace/mamba.py)")
_MODES = {"fp32": ("float32", None), "16": ("bfloat16", None), "amp": ("float32", "bfloat16")}
"""Precision class → (parameter dtype, autocast dtype) of the probe (fp16 saves what bf16 saves)."""


@dataclass(frozen=True, slots=True)
class SavedPart:
    """What one child of a decoder layer (or the model-wide set) saves for backward, for a micro-batch of b
    sequences of s tokens: ``b·(per_token_bytes·s + per_token_seq_bytes·s²)`` for what each sequence has (its
    activations, an eager s×s softmax) plus ``shared_per_seq_bytes·s + shared_per_seq2_bytes·s² + constant_bytes``
    for what the sequences share (GLM-4's per-layer rotary cos/sin, a (1, 1, s, s) mask, tensors of the weights)."""

    name: str
    """``derived:<child>`` (``self_attn``, ``mlp``, ``input_layernorm``, ...), ``mlp_down_input`` for the
    input the MLP's output projection saves (released first in backward), ``derived:layer`` for what the
    layer's own forward saves outside its children."""
    component: str
    """attention | mlp | norm"""
    per_token_bytes: float
    per_token_seq_bytes: float
    constant_bytes: int
    shared_per_seq_bytes: float = 0.0
    shared_per_seq2_bytes: float = 0.0

    def bytes_for(self, b: int, s: int) -> int:
        shared = self.constant_bytes + self.shared_per_seq_bytes * s + self.shared_per_seq2_bytes * s * s
        return int(round(shared + b * (self.per_token_bytes * s + self.per_token_seq_bytes * s * s)))


@dataclass(frozen=True, slots=True)
class _Probe:
    parts: tuple[SavedPart, ...]
    wide: SavedPart
    input_kept: SavedPart
    """Of the parts, the layer's input itself (a checkpoint holds it already: not twice under recompute)."""
    post_mlp_norm: bool = False
    """A norm runs after the MLP (OLMo-2's post_feedforward_layernorm, GLM-4's post_mlp_layernorm): its backward
    is the first of the layer's, with the layer's saved tensors (recomputed ones too) alive."""


def cache_dir() -> Path:
    """Where derived layer descriptions are kept between runs."""
    return Path(os.environ.get("TRAINMEM_CACHE_DIR") or Path.home() / ".cache" / "trainmem") / "derived"


@dataclass
class DerivedLayers:
    """The derived part of a ``ModelSpec`` (``spec.derived``): what a layer saves, measured on demand."""

    config: dict[str, Any]
    model_type: str
    architecture: str
    supports_sdpa: bool = True
    """The transformers class has an SDPA attention (``_supports_sdpa``); else only eager (and flash)."""
    sliding_window: int | None = None
    """The config's sliding window (after its class's defaults); from ``kv_length >= window`` on transformers
    builds an explicit mask (masking_utils ``_ignore_causal_mask_sdpa``), so the layers are probed in that regime."""
    moe: bool = False
    """Mixture-of-experts layers (routed through transformers' grouped_mm experts: see :data:`MOE_NOTE`)."""
    mamba: bool = False
    """Mamba-2 mixers (measured as mamba_ssm's fused CUDA kernel saves: see :data:`MAMBA_NOTE`)."""
    layer_kinds: tuple[int, ...] = ()
    """Each decoder layer's kind (its children's names and classes; 0, 1, ... by first occurrence) when the layers
    are of several kinds (Bamba / Granite-4 / Nemotron-H: Mamba and attention layers interleaved); () when alike."""
    kind: int = 0
    """The kind this view describes (:meth:`for_layer`)."""
    _probes: dict[tuple[str, str, tuple[int, ...], int], _Probe] = field(default_factory=dict, repr=False)

    @property
    def key(self) -> str:
        """sha256 of the config and the versions that shape the measurement (:func:`_config_key`)."""
        return _config_key(self.config)

    @property
    def note(self) -> str:
        return (f"{self.model_type}: derived from transformers ({self.architecture} on the meta device for exact "
                f"parameters; layer 1 of a {_PROBE_LAYERS}-layer copy traced on fake tensors at s = "
                f"{', '.join(map(str, SEQ_LENS))} with 1 and 2 sequences for what each layer saves, linear + quadratic "
                "in s, per sequence and shared); engine paths: "
                "torch, fsdp2, deepspeed over data parallelism, recompute none or full (no tp/pp/cp/ep, megatron, "
                "LoRA, selective recompute, fp8 or offload until the family is described)"
                + (f"; {LLAMA4_MOE_NOTE if self.model_type == 'llama4_text' else MOE_NOTE}" if self.moe else "")
                + (f"; {MAMBA_NOTE}" if self.mamba else ""))

    def unsupported(self, setup: "TrainingSetup") -> str | None:
        """Why ``setup`` cannot be estimated for this derived model (one line), or None."""
        for axis in _REFUSED_AXES:
            if getattr(setup, axis) > 1:
                return (f"{axis}({getattr(setup, axis)}) > 1 is not modelled for {self.model_type}: its layer "
                        "description is derived from transformers (sizes, not sharding); use dp only")
        checks = ((setup.engine == "megatron", "--engine megatron"), (setup.is_lora, "LoRA/QLoRA"),
                  (setup.recompute == "selective", "--recompute selective"),
                  (setup.precision == "fp8", "fp8"), (setup.offload != "none", f"offload {setup.offload}"),
                  (bool(getattr(setup, "offload_activations", False)), "--offload-activations"))
        if setup.attn == "sdpa" and not self.supports_sdpa:
            return (f"attn: {self.model_type} has no sdpa implementation in transformers ({self.architecture}); "
                    "use --attn eager")
        for bad, what in checks:
            if bad:
                return (f"{what} is not modelled for {self.model_type} (a layer description derived from "
                        "transformers): use torch, fsdp2 or deepspeed without it")
        return None

    def kind_of(self, layer_idx: int) -> str:
        """The walk's kind of layer ``layer_idx`` (memory/plan.py ``_layer_kinds``: one measurement per kind)."""
        return str(self.layer_kinds[layer_idx]) if self.layer_kinds else ""

    def for_layer(self, layer_idx: int, setup: "TrainingSetup | None" = None) -> "DerivedLayers":
        """This description as layer ``layer_idx`` sees it: its kind's measurement (shared by every view)."""
        if not self.layer_kinds:
            return self
        view = dataclasses.replace(self, kind=self.layer_kinds[layer_idx])
        view._probes = self._probes
        return view

    def probe_layer(self) -> tuple[int, int]:
        """(the layer measured, the probe copy's layers): layer 1 of a 3-layer copy when the layers are alike; else
        the first layer of this kind after layer 0 (layer 0 when only it is of this kind), in a copy cut after the
        layer that follows it (per-layer config lists cut alike), so the copy's layers are the model's."""
        if not self.layer_kinds:
            return 1, _PROBE_LAYERS
        at = [i for i, k in enumerate(self.layer_kinds) if k == self.kind]
        m = next((i for i in at if i >= 1), at[0])
        return m, max(_PROBE_LAYERS, min(m + 2, len(self.layer_kinds)))

    def parts(self, mode: str, attn: str, seq_len: int) -> tuple[SavedPart, ...]:
        """Per-layer saved parts for a precision class (``fp32`` | ``16`` | ``amp``) and an attention."""
        return self._probe(mode, attn, seq_len).parts

    def wide(self, mode: str, attn: str, seq_len: int) -> SavedPart:
        """Tensors created once per forward and saved by every layer (rotary cos/sin, masks)."""
        return self._probe(mode, attn, seq_len).wide

    def input_kept(self, mode: str, attn: str, seq_len: int) -> SavedPart:
        """What the layer saves that is its input tensor itself."""
        return self._probe(mode, attn, seq_len).input_kept

    def post_mlp_norm(self, mode: str, attn: str, seq_len: int) -> bool:
        """Whether a norm runs after the MLP (its backward opens the layer's backward)."""
        return self._probe(mode, attn, seq_len).post_mlp_norm

    def _probe(self, mode: str, attn: str, seq_len: int) -> _Probe:
        lengths = probe_lengths(self.sliding_window, seq_len)
        got = self._probes.get((mode, attn, lengths, self.kind))
        if got is None:
            got = _cached_probe(self, mode, attn, lengths)
            self._probes[(mode, attn, lengths, self.kind)] = got
        return got


def _config_key(config: Mapping[str, Any]) -> str:
    """sha256 of the config (sorted JSON), transformers' and torch's versions (read from the installed
    distributions: no import) and ``DERIVE_VERSION``."""
    versions = []
    for dist in ("transformers", "torch"):
        try:
            versions.append(importlib.metadata.version(dist))
        except importlib.metadata.PackageNotFoundError:
            versions.append(None)
    blob = json.dumps([dict(config), versions, DERIVE_VERSION], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _torch_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def _write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` to ``path`` atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(obj), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass


# --------------------------------------------------------------------------- torch side
def _import_torch() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError:
        return None, None
    return torch, transformers


def _hf_config(transformers: Any, cfg: Mapping[str, Any], model_type: str, layers: int | None = None) -> Any:
    """The transformers config object for ``cfg`` (``layers``: a truncated copy; per-layer lists cut)."""
    raw = copy.deepcopy(dict(cfg))
    raw.pop("model_type", None)
    for k in _DROP_KEYS:
        raw.pop(k, None)
    if layers is not None:
        n = next((raw[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(raw.get(k), int)),
                 None)
        for k, v in list(raw.items()):  # per-layer lists, and Nemotron-H's hybrid_override_pattern string (not any
            # string as long as the model is deep: hidden_act "silu" of a 4-layer model stays "silu")
            if (isinstance(v, list) or isinstance(v, str) and k.endswith("pattern")) and n is not None \
                    and len(v) == n and n > 1:
                raw[k] = v[:layers]
        key = next((k for k in ("num_hidden_layers", "n_layer", "num_layers") if k in raw), "num_hidden_layers")
        raw[key] = layers
    return config_for_model(transformers, model_type, raw)


def config_for_model(transformers: Any, model_type: str, raw: dict[str, Any]) -> Any:
    """``transformers.AutoConfig.for_model(model_type, **raw)`` without the KV cache; transformers' refusal as
    one ConfigError line. Shared by the deriver and the vision-language builds (vlm.py)."""
    try:
        config = transformers.AutoConfig.for_model(model_type, **raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigError(f"config.json (model_type {model_type!r}): transformers refuses it: "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    config.use_cache = False
    return config


def _causal_lm_class(transformers: Any, model_type: str, described: str) -> str:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if not name or not hasattr(transformers, name):
        raise UnsupportedError(
            f"model_type {model_type!r} is not supported: transformers {transformers.__version__} has no causal-LM "
            f"class for it to derive a description from (encoder-decoder, vision or unknown); described: {described}")
    return name


def _build(transformers: Any, torch: Any, config: Any, architecture: str, *, dtype: Any = None,
           attn: str | None = None) -> Any:
    cls = getattr(transformers, architecture)
    kwargs: dict[str, Any] = {}
    if attn is not None:
        kwargs["attn_implementation"] = attn
    if dtype is not None:
        kwargs["dtype"] = dtype
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return cls._from_config(config, **kwargs)
    except (ValueError, TypeError, KeyError, RuntimeError, AttributeError, AssertionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConfigError(f"transformers cannot build {architecture} from this config: {msg}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def _decoder_layers(torch: Any, model: Any, n: int) -> Any:
    """The ModuleList of the ``n`` decoder layers (the one of that length holding the most parameters)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == n]
    if not lists:
        raise UnsupportedError(f"{type(model).__name__}: no list of {n} decoder layers found to derive from")
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def _component(name: str, module: Any) -> str:
    """A layer child's component by its name: norms first (``post_attention_layernorm`` is a norm), then
    attention, then the MLP; anything else counts with the norms. A child named ``mixer`` whose class is an MLP
    or MoE (``module`` given: Nemotron-H's ``NemotronHBlock.mixer`` is ``MIXER_TYPES[block_type]``, the Mamba-2
    mixer, attention, ``NemotronHMLP`` or ``NemotronHMoE``, modeling_nemotron_h.py @ transformers 5.24) is
    the MLP."""
    low = name.lower()
    if "norm" in low or low.startswith("ln") or low.endswith("_ln"):
        return "norm"
    if module is not None and "mixer" in low and not any(w in low for w in ("attn", "attention", "mamba")) \
            and any(w in type(module).__name__.lower() for w in _MLP_WORDS):
        return "mlp"  # (a slot named for any kind: Nemotron-H's block.mixer is NemotronHMLP / NemotronHMoE there)
    if any(w in low for w in _ATTENTION_WORDS):
        return "attention"
    if any(w in low for w in _MLP_WORDS):
        return "mlp"
    return "norm"


def _is_matmul(torch: Any, module: Any) -> bool:
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def _layer_params(torch: Any, layer: Any) -> LayerParams:
    """A decoder layer's parameters by child: attention / MLP / the rest (norms); matmul weights apart."""
    by: dict[str, int] = {"attention": 0, "mlp": 0, "norm": 0}
    seen: set[int] = set()
    for child_name, child in layer.named_children():
        comp = _component(child_name, child)
        for p in child.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                by[comp] += p.numel()
    for p in layer.parameters():  # the layer's own parameters (scales, gates)
        if id(p) not in seen:
            seen.add(id(p))
            by["norm"] += p.numel()
    matmul = sum(m.weight.numel() for m in layer.modules() if _is_matmul(torch, m))
    return LayerParams(attention=by["attention"], norms=by["norm"], mlp=by["mlp"], matmul=matmul)


def _param_counts(torch: Any, model: Any, n_layers: int) -> tuple[ParamCounts, bool, Any]:
    """(counts by component, tied head, the layer list) of a meta-device model."""
    layers = _decoder_layers(torch, model, n_layers)
    counts, tied = component_counts(torch, model, tuple(layers), _layer_params, "derive")
    return counts, tied, layers


def _refuse_shared_layers(model: Any, layers: tuple[Any, ...]) -> None:
    """Refuse a model whose layers hold the same parameter (one line): Zamba / Zamba2 call one shared
    transformer block from several hybrid layers (``Zamba2HybridLayer.shared_transformer`` is one of
    ``num_mem_blocks`` ``Zamba2AttentionDecoderLayer`` s, modeling_zamba2.py @ transformers 5.24), so per-layer
    weights, gradients, optimizer states and FSDP units would each count it once per layer."""
    owner: dict[int, int] = {}
    for i, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            j = owner.setdefault(id(p), i)
            if j != i:
                raise UnsupportedError(
                    f"{type(model).__name__}: layers {j} and {i} share the parameter {name!r}; layers that share "
                    f"weights (Zamba's shared transformer blocks) are not supported")


def component_counts(torch: Any, model: Any, layers: tuple[Any, ...], layer_params: Any,
                     who: str) -> tuple[ParamCounts, bool]:
    """(counts by component, tied head) of a meta-device ``model`` whose transformer layers are ``layers``
    (each counted by ``layer_params(torch, layer)``): the input embedding, other embeddings (learned
    positions), norms outside the layers, an untied head and the rest, each parameter once; their sum is
    checked against ``sum(p.numel() for p in model.parameters())``. Shared by the decoder-only and the
    encoder–decoder (derive_seq2seq) builds."""
    _refuse_shared_layers(model, layers)
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight is emb.weight
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    in_emb = {id(p) for p in emb.parameters()}
    in_head = {id(p) for p in head.parameters()} if head is not None else set()
    position = final_norm = other = 0
    seen: set[int] = set()
    for name, module in model.named_modules():
        for p in module.parameters(recurse=False):
            if id(p) in in_layers or id(p) in in_emb or id(p) in in_head or id(p) in seen:
                continue
            seen.add(id(p))
            if isinstance(module, torch.nn.Embedding):
                position += p.numel()
            elif "norm" in type(module).__name__.lower() or "norm" in name.lower():
                final_norm += p.numel()
            else:
                other += p.numel()
    lm_head = 0 if tied or head is None else sum(p.numel() for p in head.parameters() if id(p) not in in_emb)
    counts = ParamCounts(
        embedding=sum(p.numel() for p in emb.parameters()), position_embedding=position,
        layers=tuple(layer_params(torch, layer) for layer in layers), final_norm=final_norm, lm_head=lm_head,
        other=other)
    total = sum(p.numel() for p in model.parameters())
    if counts.total != total:  # pragma: no cover - a parameter counted twice or missed
        raise RuntimeError(f"{who}: components sum to {counts.total:,}, the model has {total:,}")
    return counts, tied


class _Owner:
    """Who is running in the probe's forward: the decoder layer, its child (and the order children ran in),
    whether the MLP's output projection runs, whether the attention core (softmax / SDPA) has returned."""

    def __init__(self) -> None:
        self.layer: int | None = None
        self.child: str | None = None
        self.comp = "norm"
        """The running child's component (:func:`_component` with its module: a slot's class decides)."""
        self.down = False
        self.after_core = False
        self.order: dict[str, int] = {}
        self.inputs: dict[int, int] = {}
        """Storage of each layer's input hidden states (what a checkpoint of the layer holds)."""

    def enter_layer(self, i: int) -> None:
        self.layer, self.child, self.down, self.after_core = i, None, False, False

    def enter_child(self, name: str, comp: str) -> None:
        self.child, self.comp, self.down, self.after_core = name, comp, False, False
        self.order.setdefault(name, len(self.order))

    def leave(self) -> None:
        self.child, self.down = None, False

    def leave_layer(self) -> None:
        self.layer, self.child = None, None


def _core_watch(torch: Any, owner: _Owner) -> Any:
    """A TorchFunctionMode that marks the end of the attention core (a softmax or an SDPA call returning)."""
    from torch.overrides import TorchFunctionMode

    class _CoreWatch(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in ("softmax", "scaled_dot_product_attention") and owner.child \
                    and owner.comp == "attention":
                owner.after_core = True
            return out

    return _CoreWatch()


def _enter_layer(owner: _Owner, i: int, args: tuple, kwargs: dict) -> None:
    x = args[0] if args else kwargs.get("hidden_states")
    if x is not None and hasattr(x, "untyped_storage"):
        owner.inputs[i] = id(x.untyped_storage())
    owner.enter_layer(i)


def _hook_layers(torch: Any, layers: Any, owner: _Owner) -> list[Any]:
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda m, a, k, i=i: _enter_layer(owner, i, a, k),
                                                       with_kwargs=True))
        handles.append(layer.register_forward_hook(lambda *_: owner.leave_layer()))
        for name, child in layer.named_children():
            handles.append(child.register_forward_pre_hook(
                lambda *_, n=name, c=_component(name, child): owner.enter_child(n, c)))
            handles.append(child.register_forward_hook(lambda *_: owner.leave()))
            if _component(name, child) == "mlp" and not _has_experts(child):
                linears = [m for m in child.modules() if _is_matmul(torch, m)]
                if linears:  # the MLP's output projection: the last matmul it registers
                    handles.append(linears[-1].register_forward_pre_hook(lambda *_: setattr(owner, "down", True)))
                    handles.append(linears[-1].register_forward_hook(lambda *_: setattr(owner, "down", False)))
    return handles


def _has_experts(module: Any) -> bool:
    """A mixture-of-experts block (routed experts: transformers 5.24's fused ``*Experts`` modules, 3-D weights run by
    ``integrations/moe.py``): what it saves goes with the MLP as a whole (no output-projection ``Linear`` to mark)."""
    return any("expert" in n.lower() or "expert" in type(m).__name__.lower() for n, m in module.named_modules())


def _part_name(owner: _Owner, child: str | None, down: bool, after_core: bool, comp: str) -> str:
    """The walk's bucket for a saved tensor (memory/plan.py ``_layer_parts``), by when backward releases it:
    ``mlp_down_input`` first (the MLP's output projection's input, and norms that run after the MLP),
    ``derived:mlp`` with the MLP (and norms between attention and MLP), ``o_input`` before the attention core's
    backward (what attention saves after its core: o_proj's input, P·V's probabilities and v), the rest of
    attention, ``input_norm`` (norms before attention) last."""
    if child is None:
        return "derived:layer"
    if comp == "mlp":
        return "mlp_down_input" if down else "derived:mlp"
    if comp == "attention":
        return "o_input" if after_core else "derived:attention"
    where = owner.order.get(child, 0)
    attn = min((k for n, k in owner.order.items() if _component(n, None) == "attention"), default=None)
    mlp = min((k for n, k in owner.order.items() if _component(n, None) == "mlp"), default=None)
    if mlp is not None and where > mlp and (attn is None or where > attn):
        return "mlp_down_input"
    if attn is not None and where > attn:
        return "derived:mlp"
    return "input_norm"


_COMPONENT_OF = {"mlp_down_input": "mlp", "derived:mlp": "mlp", "o_input": "attention",
                 "derived:attention": "attention", "input_norm": "norm", "derived:layer": "norm"}


def _probe_forward(torch: Any, model: Any, layers: Any, vocab: int, b: int, s: int, amp: Any,
                   copies: set[int], m: int = 1) -> tuple[dict[str, int], int, int, bool]:
    """One forward of the probe model: {part name: bytes the middle layer saves}, model-wide bytes, the
    bytes of its saved tensors that are its input itself, and whether a norm ran after the MLP."""
    owner = _Owner()
    per_layer: list[dict[int, tuple[str | None, bool, bool, str, int]]] = [{} for _ in layers]
    handles = _hook_layers(torch, layers, owner)
    params = {id(p.untyped_storage()) for p in model.parameters()}
    kept: list[Any] = []

    def pack(t: Any) -> Any:
        kept.append(t)
        i = owner.layer
        if i is not None:
            st = t.untyped_storage()
            sid = id(st)
            if sid not in params and sid not in copies and sid not in per_layer[i]:
                per_layer[i][sid] = (owner.child, owner.down, owner.after_core, owner.comp, st.nbytes())
        return t

    ids = torch.randint(0, vocab, (b, s))
    try:
        with _core_watch(torch, owner), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=amp) if amp is not None else contextlib.nullcontext():
                out = model(input_ids=ids, labels=ids, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    shared = set().union(*(set(p) for k, p in enumerate(per_layer) if k != m))  # (what other layers save too)
    parts: dict[str, int] = {}
    wide = 0
    own_input = sum(n for sid, (*_, n) in per_layer[m].items() if sid == owner.inputs.get(m))
    post_norm = False
    for sid, (child, down, after, comp, n) in per_layer[m].items():
        if sid in shared:
            wide += n
        else:
            name = _part_name(owner, child, down, after, comp)
            parts[name] = parts.get(name, 0) + n
            post_norm |= name == "mlp_down_input" and child is not None and comp == "norm"
    del out, kept
    return parts, wide, own_input, post_norm


def _quadratic_through(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """(c₀, c₁, c₂) of ``c₀ + c₁·s + c₂·s²`` through three (s, value) points (Lagrange form; exact for
    integer byte counts up to float rounding, cleaned below)."""
    (x0, y0), (x1, y1), (x2, y2) = points
    d0, d1, d2 = (x0 - x1) * (x0 - x2), (x1 - x0) * (x1 - x2), (x2 - x0) * (x2 - x1)
    c2 = y0 / d0 + y1 / d1 + y2 / d2
    c1 = -(y0 * (x1 + x2) / d0 + y1 * (x0 + x2) / d1 + y2 * (x0 + x1) / d2)
    c0 = y0 * x1 * x2 / d0 + y1 * x0 * x2 / d1 + y2 * x0 * x1 / d2
    return tuple(0.0 if abs(c) < 1e-6 else c for c in (c0, c1, c2))  # type: ignore[return-value]


def _fit(name: str, component: str, one: list[int], two: list[int], lengths: tuple[int, ...]) -> SavedPart:
    """Per-sequence part ``b·(α·s + β·s²)`` from what a second sequence adds at each s (``two - one``; a
    per-sequence constant would be a tensor of the weights, so its c₀ is ~0), and the shared part
    ``γ + c·s + e·s²`` from what is left of one sequence's bytes, both through s₁, s₂, s₃."""
    per_seq = [(s, float(b2 - b1)) for s, b1, b2 in zip(lengths, one, two)]
    _, alpha, beta = _quadratic_through(per_seq)
    shared = [(s, b1 - (alpha * s + beta * s * s)) for s, b1 in zip(lengths, one)]
    gamma, c, e = _quadratic_through(shared)
    return SavedPart(name, component, alpha, beta, int(round(gamma)), c, e)


def _measure(d: DerivedLayers, mode: str, attn: str, lengths: tuple[int, ...] = SEQ_LENS) -> _Probe:
    """Run the probe model at each of ``SEQ_LENS`` with 1 and 2 sequences on fake tensors with the tracer's CUDA
    emulations, and fit the parts."""
    torch, transformers = _import_torch()
    if torch is None:
        raise UnsupportedError(_needs_torch(d.model_type))
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace.autocast import cuda_autocast
    from trainmem.trace.dropout import cuda_dropout
    from trainmem.trace.hf_eager import eager_branches
    from trainmem.trace.mamba import cuda_mamba2
    from trainmem.trace.moe import cuda_grouped_mm
    from trainmem.trace.sdpa import cuda_sdpa

    param_dtype, amp_name = _MODES[mode]
    amp = getattr(torch, amp_name) if amp_name else None
    m, n_probe = d.probe_layer()
    config = _hf_config(transformers, d.config, d.model_type, layers=n_probe)
    vocab = int(getattr(config, "vocab_size", 0) or 0) or 2
    runs: dict[tuple[int, int], tuple[dict[str, int], int, int, bool]] = {}
    copies: set[int] = set()
    with contextlib.ExitStack() as stack:
        stack.enter_context(FakeTensorMode())
        stack.enter_context(cuda_dropout())
        stack.enter_context(cuda_sdpa())
        stack.enter_context(cuda_grouped_mm())
        stack.enter_context(cuda_mamba2())
        stack.enter_context(cuda_autocast(lambda t: copies.add(id(t.untyped_storage()))))
        stack.enter_context(eager_branches())
        model = _build(transformers, torch, config, d.architecture, dtype=getattr(torch, param_dtype), attn=attn)
        model.train()
        layers = _decoder_layers(torch, model, n_probe)
        quiet = logging.getLogger("torch._subclasses.fake_tensor")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # (a shape error would print its traceback there first)
        stack.callback(quiet.setLevel, level)
        try:
            for b in (1, 2):
                for s in lengths:
                    copies.clear()
                    runs[(b, s)] = _probe_forward(torch, model, layers, vocab, b, s, amp, copies, m)
                    torch.clear_autocast_cache()
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"transformers cannot run {d.architecture} on this config: {msg}") from None

    def series(pick: Any) -> tuple[list[int], list[int]]:
        return [pick(runs[(1, s)]) for s in lengths], [pick(runs[(2, s)]) for s in lengths]

    names = sorted({n for parts, *_ in runs.values() for n in parts})
    fitted = tuple(_fit(n, _COMPONENT_OF[n], *series(lambda r, n=n: r[0].get(n, 0)), lengths) for n in names)
    wide = _fit("derived:model_wide", "norm", *series(lambda r: r[1]), lengths)
    return _Probe(fitted, wide, _fit("derived:input_kept", "norm", *series(lambda r: r[2]), lengths),
                  any(r[3] for r in runs.values()))


def _cached_probe(d: DerivedLayers, mode: str, attn: str, lengths: tuple[int, ...] = SEQ_LENS) -> _Probe:
    """The probe from the disk cache, or measured and stored there (a cache that cannot be written is skipped)."""
    tag = ("" if lengths == SEQ_LENS else "-s" + "_".join(map(str, lengths))) + (f"-k{d.kind}" if d.kind else "")
    path = cache_dir() / f"{d.key}-{mode}-{attn}{tag}.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return _Probe(tuple(SavedPart(**p) for p in raw["parts"]), SavedPart(**raw["wide"]),
                      SavedPart(**raw["input_kept"]), bool(raw["post_mlp_norm"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    probe = _measure(d, mode, attn, lengths)
    _write_json(path, {"parts": [_as_dict(p) for p in probe.parts], "wide": _as_dict(probe.wide),
                       "input_kept": _as_dict(probe.input_kept), "post_mlp_norm": probe.post_mlp_norm})
    return probe


def _as_dict(p: SavedPart) -> dict[str, Any]:
    return {"name": p.name, "component": p.component, "per_token_bytes": p.per_token_bytes,
            "per_token_seq_bytes": p.per_token_seq_bytes, "constant_bytes": p.constant_bytes,
            "shared_per_seq_bytes": p.shared_per_seq_bytes, "shared_per_seq2_bytes": p.shared_per_seq2_bytes}


def _needs_torch(model_type: str, described: str = "") -> str:
    if described:
        return (f"model_type {model_type!r} has no layer description in trainmem; deriving one from transformers "
                f"needs torch and transformers: pip install 'trainmem[trace]' (described: {described})")
    return (f"model_type {model_type!r} has no layer description in trainmem; deriving one from transformers "
            "needs torch and transformers: pip install 'trainmem[trace]'")


def _window(config: Any) -> int | None:
    """The sliding window the config's class left set (Qwen-style classes clear it without use_sliding_window)."""
    w = getattr(config, "sliding_window", None)
    return w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def probe_lengths(window: int | None, seq_len: int) -> tuple[int, ...]:
    """The probe's sequence lengths for a run of ``seq_len``: ``SEQ_LENS`` below a sliding window (or shorter ones
    when the window is shorter than them), three lengths from the window on when the run reaches it (transformers
    then passes an explicit sliding mask and CUDA may pick another SDPA kernel)."""
    if window is None:
        return SEQ_LENS
    if seq_len >= window:
        return (window, window + 64, window + 128)
    if SEQ_LENS[-1] < window:
        return SEQ_LENS
    step = max(1, (window - 1) // 3)
    return (step, 2 * step, 3 * step) if 3 * step < window and step > 0 else SEQ_LENS


def _first_attr(config: Any, *names: str, default: Any = None) -> Any:
    for n in names:
        v = getattr(config, n, None)
        if v is not None:
            return v
    return default


def _mlp_shape(torch: Any, layer: Any) -> tuple[int, bool]:
    """(MLP width, gated): the output projection's input features, and whether the other projections
    make twice that (gate and up, fused or not); (0, False) for a layer without an MLP (a hybrid's Mamba or
    attention-only layer: the first layer that has one decides, :func:`_built_fields`)."""
    for name, child in layer.named_children():
        if _component(name, child) != "mlp":
            continue
        linears = [m for m in child.modules() if _is_matmul(torch, m)]
        if not linears:
            break
        down = linears[-1]
        width = int(down.in_features if hasattr(down, "in_features") else down.weight.shape[0])
        made = sum(int(m.out_features if hasattr(m, "out_features") else m.weight.shape[1]) for m in linears[:-1])
        return width, made >= 2 * width
    return 0, False


def _rotary_dim(config: Any, head_dim: int) -> int | None:
    factor = getattr(config, "partial_rotary_factor", None)
    params = getattr(config, "rope_parameters", None)
    if factor is None and isinstance(params, Mapping):
        factor = params.get("partial_rotary_factor")
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and 0 < factor < 1:
        return 2 * ((int(head_dim * factor) + 1) // 2)
    return None


def derive_spec(cfg: Mapping[str, Any], *, name: str, source: str = "", described: str = "",
                max_layers: int = 2048, activations: frozenset[str] = frozenset()) -> ModelSpec:
    """A ``ModelSpec`` for a config whose family trainmem does not describe, from transformers itself:
    exact parameter counts from a meta-device build; ``spec.derived`` measures the layers on demand.
    Both are cached on disk per config (a cached description needs no torch import: seconds saved).

    Raises ``UnsupportedError`` (one line) without torch/transformers, for a model_type transformers has
    no causal-LM class for, and for Mamba-1 mixers; ``ConfigError`` where transformers refuses
    the config. ``max_layers``, ``activations``: trainmem's layer guard and transformers' ACT2FN names
    (``trainmem.model.hf`` passes its own; this module does not import it)."""
    model_type = str(cfg.get("model_type"))
    if not _torch_installed():
        raise UnsupportedError(_needs_torch(model_type, described))
    key = _config_key(_clean(cfg))
    path = cache_dir() / f"{key}-spec.json"
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        fields = None
    if not isinstance(fields, dict) or fields.get("activations") != sorted(activations):
        torch, transformers = _import_torch()
        if torch is None:
            raise UnsupportedError(_needs_torch(model_type, described))
        fields = _built_fields(torch, transformers, cfg, model_type, described, max_layers, activations)
        _write_json(path, fields)
    if fields["num_layers"] > max_layers:
        raise ConfigError(f"config.json: num_hidden_layers({fields['num_layers']:,}) is above trainmem's limit of "
                          f"{max_layers:,}")
    params = dict(fields["params"])
    params["layers"] = tuple(LayerParams(**lp) for lp in params["layers"])
    spec_fields = {k: v for k, v in fields.items()
                   if k not in ("params", "supports_sdpa", "activations", "probe_window", "moe", "mamba", "layer_kinds")}
    return ModelSpec(name=name, **spec_fields, params=ParamCounts(**params), source=source, hf_config=dict(cfg),
                     derived=DerivedLayers(config=_clean(cfg), model_type=model_type,
                                           architecture=fields["architecture"], supports_sdpa=fields["supports_sdpa"],
                                           sliding_window=fields.get("probe_window"), moe=bool(fields.get("moe")),
                                           mamba=bool(fields.get("mamba")),
                                           layer_kinds=tuple(fields.get("layer_kinds") or ())))


def _built_fields(torch: Any, transformers: Any, cfg: Mapping[str, Any], model_type: str, described: str,
                  max_layers: int, activations: frozenset[str]) -> dict[str, Any]:
    """The ModelSpec fields of a meta-device build of ``cfg`` (JSON-able: the disk cache keeps them)."""
    architecture = _causal_lm_class(transformers, model_type, described)
    config = _hf_config(transformers, cfg, model_type)
    n_layers = _first_attr(config, "num_hidden_layers", "n_layer", "num_layers")
    if not isinstance(n_layers, int) or n_layers < 1:
        raise ConfigError(f"config.json (model_type {model_type!r}) lacks 'num_hidden_layers'")
    if n_layers > max_layers:
        raise ConfigError(f"config.json: num_hidden_layers({n_layers:,}) is above trainmem's limit of {max_layers:,}")
    with torch.device("meta"):
        model = _build(transformers, torch, config, architecture)
    counts, tied, layers = _param_counts(torch, model, n_layers)
    if any(hasattr(m, "A_log") and hasattr(m, "x_proj") for m in model.modules()):
        raise UnsupportedError(f"model_type {model_type!r}: Mamba-1 mixers (selective scan: mamba, falcon_mamba, "
                               "jamba) are not derived: what mamba_ssm's CUDA kernel saves for them is not modelled "
                               "(Mamba-2 mixers are)")
    signatures = [_layer_signature(layer) for layer in layers]
    order = list(dict.fromkeys(signatures))
    layer_kinds = [order.index(sig) for sig in signatures] if len(order) > 1 else []
    h = int(_first_attr(config, "hidden_size", "n_embd", "d_model"))
    heads = int(_first_attr(config, "num_attention_heads", "n_head", default=1))
    kv = int(_first_attr(config, "num_key_value_heads", "num_kv_heads", default=heads))
    head_dim = int(_first_attr(config, "head_dim", default=h // heads))
    width, gated = next((w for w in (_mlp_shape(torch, layer) for layer in layers) if w[0]), (0, False))
    moe = any(_has_experts(m) for m in layers)
    mamba = any(hasattr(m, "ssm_state_size") or type(m).__name__.endswith("Mixer") and hasattr(m, "A_log")
                for m in model.modules())
    names = {type(m).__name__.lower() for m in model.modules()}
    if counts.position_embedding:
        position = "learned"
    elif any("rotary" in n for n in names):
        position = "rope"
    else:
        position = "alibi" if (getattr(config, "alibi", False) or model_type == "bloom") else "none"
    final_norms = [type(m).__name__.lower() for n, m in model.named_modules() if "norm" in type(m).__name__.lower()]
    act = str(_first_attr(config, "mlp_hidden_act", "hidden_act", "hidden_activation", "activation_function",
                          default="silu"))  # (Nemotron-H: mlp_hidden_act relu2; its mamba_hidden_act is the mixer's)
    return dict(
        model_type=model_type, architecture=architecture, hidden_size=h, num_layers=n_layers,
        num_attention_heads=heads, num_kv_heads=kv, head_dim=head_dim, v_head_dim=head_dim,
        intermediate_size=width or 4 * h, vocab_size=int(_first_attr(config, "vocab_size")),
        tie_word_embeddings=tied, mlp_gated=gated, hidden_act=act if act in activations else "silu",
        norm="rmsnorm" if final_norms and "rms" in final_norms[-1] else "layernorm", position=position,
        max_position_embeddings=int(_first_attr(config, "max_position_embeddings", "n_positions", "seq_length",
                                                default=2**20)),
        rotary_dim=_rotary_dim(config, head_dim) if position == "rope" else None,
        params={**dataclasses.asdict(counts), "layers": [dataclasses.asdict(lp) for lp in counts.layers]},
        supports_sdpa=bool(getattr(getattr(transformers, architecture), "_supports_sdpa", False)),
        probe_window=_window(config), moe=moe, mamba=mamba, layer_kinds=layer_kinds,
        activations=sorted(activations))


def _clean(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in _DROP_KEYS}


def _layer_signature(layer: Any) -> tuple[Any, ...]:
    """A decoder layer's kind: its children's names and classes, and whether its attention applies RoPE where the
    attention says (``use_rope``: Llama 4's and SmolLM3's NoPE layers, from ``no_rope_layers``, transformers 5.24
    modeling_llama4.py / modeling_smollm3.py). A NoPE layer saves no rotated fp32 q/k (Llama 4's
    ``apply_rotary_emb`` keeps complex fp32 copies, its qk_norm runs on RoPE layers only), so it is probed apart."""
    sig: list[Any] = [(n, type(c).__name__) for n, c in layer.named_children()]
    for n, c in layer.named_children():
        rope = getattr(c, "use_rope", None)
        if isinstance(rope, (bool, int)):
            sig.append((n, "use_rope", bool(rope)))
    return tuple(sig)
