"""Vision-language models: the language model as its described family, the vision tower and projector from
``transformers`` itself.

Families (transformers 5.24 classes, ``models/<family>/modeling_<family>.py``):

* ``qwen2_5_vl`` — ``Qwen2_5_VLForConditionalGeneration``: ``model.visual`` (patch embed, ``depth`` vision
  blocks, window attention with full attention at ``fullatt_block_indexes``) whose ``merger`` (an MLP over
  ``spatial_merge_size``² = 4 neighbouring patches) is the projector; the text model is a Qwen2 decoder
  (q/k/v biases, mRoPE: the same parameters as ``qwen2``).
* ``qwen2_vl`` — ``Qwen2VLForConditionalGeneration``: the same layout with full attention in every block.
* ``llava`` — ``LlavaForConditionalGeneration``: ``model.vision_tower`` (``CLIPVisionModel``, every layer run,
  the features taken at ``vision_feature_layer``) and ``model.multi_modal_projector`` (linear, GELU, linear);
  the text model is its ``text_config``'s family (llama for LLaVA-1.5).
* ``gemma3`` — ``Gemma3ForConditionalGeneration``: ``model.vision_tower`` (SigLIP, 896 px, 4096 patches) and
  ``model.multi_modal_projector`` (RMSNorm, 4×4 average pool to ``mm_tokens_per_image`` = 256 tokens, a
  projection); the text model is ``gemma3_text``. trainmem builds a Gemma 3 config as its text model alone
  unless the setup gives images or trains the tower (:func:`with_vision`), so the catalog's text-only counts stay.

Parameters are exact: the ``*ForConditionalGeneration`` class is built on the meta device, the tower and the
projector are counted by module, and the language model by trainmem's described family of the text config
(so LoRA, tensor-parallel checks and the layer descriptions keep working for it); their sum is checked against
``sum(p.numel() for p in model.parameters())`` (tied weights once) or the model is refused. The fields are cached
on disk as ``trainmem.model.derive`` caches its own (``$TRAINMEM_CACHE_DIR``), so a cached VLM estimates without
importing torch.

What the tower saves for backward is measured on fake tensors (``trainmem/trace``'s CUDA emulations:
fused SDPA, autocast with its weight-cast cache, dropout): the tower and the projector run forward on one and
on two images and at three image sizes, and what stays alive once only the image features are held is what the
autograd graph keeps (autocast's 16-bit weight copies included). Fit per image ``α·P + β·P² + δ`` in the
patches P the tower sees, plus a constant γ shared by the images (:class:`VisionFit`). A frozen tower (its
parameters ``requires_grad=False``, LLaMA-Factory's and ms-swift's default) keeps nothing: the forward's peak
is measured as a transient.

Image tokens: ``--image-tokens N`` is the number of visual tokens one sample feeds the language model; they are
part of ``--seq-len`` (the processor expands each image placeholder to its tokens in ``input_ids``). Qwen2.5-VL
and Qwen2-VL: N = (H/14)·(W/14)/4 per image (14-pixel patches, the merger joins 2×2), the tower sees P = 4·N
patches (one image per sample is assumed). LLaVA-1.5: 576 tokens per image ((336/14)²; the tower sees 577
positions with its CLS token), N a multiple of 576. Gemma 3: 256 tokens per image (the tower sees 4096 patches).

A tower that does not run (``--image-tokens 0``: text-only batches) makes no gradients, so AdamW makes no state
for it (``torch.optim`` skips parameters whose ``.grad`` is None) even when it is trainable: it is stored only.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.model.spec import ModelSpec

__all__ = ["VLM_MODEL_TYPES", "VisionTower", "VisionFit", "vlm_spec", "with_vision", "VISION_DERIVE_VERSION"]

VISION_DERIVE_VERSION = 4
"""Bumped when the measurement changes (part of the disk-cache key)."""


@dataclass(frozen=True, slots=True)
class _Family:
    architecture: str
    tower: str
    """Attribute path of the vision tower under ``model.model``."""
    projector: str
    """Attribute path of the projector under ``model.model`` (inside the tower for Qwen's merger)."""
    text_type: str | None
    """The described family of the text model (None: the text config's own model_type)."""
    root: str = "model"
    """Where ``tower`` and ``projector`` and ``get_image_features`` live: ``model.model`` (Qwen, LLaVA, Gemma 3), or
    the top-level model itself ("": Llama 4, whose ``vision_model`` and ``multi_modal_projector`` sit beside
    ``language_model``)."""
    projects_outside: bool = False
    """``get_image_features`` returns the tower's output before the projector (Llama 4: ``forward`` applies
    ``multi_modal_projector`` to ``last_hidden_state``), so the measurement applies the projector itself."""


VLM_MODEL_TYPES: dict[str, _Family] = {
    "qwen2_5_vl": _Family("Qwen2_5_VLForConditionalGeneration", "visual", "visual.merger", "qwen2"),
    "qwen2_vl": _Family("Qwen2VLForConditionalGeneration", "visual", "visual.merger", "qwen2"),
    "llava": _Family("LlavaForConditionalGeneration", "vision_tower", "multi_modal_projector", None),
    "gemma3": _Family("Gemma3ForConditionalGeneration", "vision_tower", "multi_modal_projector", "gemma3_text"),
    "llama4": _Family("Llama4ForConditionalGeneration", "vision_model", "multi_modal_projector", None, root="",
                      projects_outside=True),
}
"""model_type → its transformers class and where its tower and projector live (transformers 5.24)."""

#: Probe image sizes (patch grids, rows × columns) of the variable-size towers (Qwen): multiples of the
#: 8-patch window (window_size 112 px / 14 px), three sizes for the quadratic fit.
_GRIDS = ((16, 16), (32, 32), (48, 48))
_STATES = ("trained", "projector", "frozen")
_MODES = {"fp32": ("float32", None), "16": ("bfloat16", None), "amp": ("float32", "bfloat16")}


@dataclass(frozen=True, slots=True)
class VisionFit:
    """What the tower + projector keep alive for backward (``saved``) and the forward's transient peak above it
    (``transient``) for ``n`` images of P patches: ``n·(α·P + β·P² + δ) + γ`` bytes each."""

    saved: tuple[float, float, float, float]
    """(α, β, δ, γ) of the saved bytes."""
    transient: tuple[float, float, float, float]
    """(α, β, δ, γ) of the forward's peak above what it leaves alive (the running block's tensors): n times one
    image's peak (γ = 0), an upper bound where the images are attended one after another (Qwen)."""

    @staticmethod
    def _at(c: tuple[float, float, float, float], images: int, patches: int) -> int:
        a, b, d, g = c
        return max(0, int(round(images * (a * patches + b * patches * patches + d) + g))) if images else 0

    def saved_bytes(self, images: int, patches: int) -> int:
        return self._at(self.saved, images, patches)

    def transient_bytes(self, images: int, patches: int) -> int:
        return self._at(self.transient, images, patches)


@dataclass
class VisionTower:
    """The vision part of a VLM ``ModelSpec`` (``spec.vision``): sizes, and what it saves, measured on demand."""

    model_type: str
    architecture: str
    config: dict[str, Any]
    tower_params: int
    projector_params: int
    tokens_per_image: int | None
    """Tokens one image gives the language model when fixed (LLaVA-1.5: 576); None when it follows the image size."""
    patches_per_token: int
    """Patches the tower sees per language-model token (Qwen: spatial_merge_size² = 4; LLaVA: 1, plus its CLS)."""
    extra_positions: int = 0
    """Positions per image the tower runs beyond the patches (CLIP's CLS token)."""
    _fits: dict[tuple[str, str, str, bool], VisionFit] = field(default_factory=dict, repr=False)

    @property
    def params(self) -> int:
        return self.tower_params + self.projector_params

    @property
    def note(self) -> str:
        return (f"{self.model_type}: {self.architecture} built on the meta device: vision tower "
                f"{self.tower_params:,} + projector {self.projector_params:,} parameters; the language model is "
                "its described family; what the tower saves measured on fake tensors (1 and 2 images"
                f"{', three sizes' if self.tokens_per_image is None else ''}: trainmem/model/vlm.py)")

    def fit(self, mode: str, attn: str, state: str, recompute: bool) -> VisionFit:
        """The fit for a precision class (``fp32`` | ``16`` | ``amp``), an attention, a training state of the
        tower (``trained`` | ``projector`` | ``frozen``) and whether its blocks are checkpointed."""
        key = (mode, attn, state, recompute)
        got = self._fits.get(key)
        if got is None:
            got = _cached_fit(self, *key)
            self._fits[key] = got
        return got


# --------------------------------------------------------------------------- parameters
def _text_config(transformers: Any, cfg: Mapping[str, Any], fam: _Family) -> dict[str, Any]:
    """The text model's config as the described family reads it: transformers' own config class fills the
    defaults (a LLaVA text_config lists only what differs from LlamaConfig's)."""
    obj = _hf_config(transformers, cfg)
    text = obj.get_text_config(decoder=True).to_dict()
    for k in ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "id2label",
              "label2id", "auto_map", "quantization_config"):
        text.pop(k, None)
    text = {k: v for k, v in text.items() if v is not None or k in ("sliding_window", "head_dim")}
    text["model_type"] = fam.text_type or str(text.get("model_type"))
    tie = getattr(obj, "tie_word_embeddings", None)
    if isinstance(tie, bool):
        text["tie_word_embeddings"] = tie
    return text


def _hf_config(transformers: Any, cfg: Mapping[str, Any], text_layers: int | None = None) -> Any:
    raw = copy.deepcopy(dict(cfg))
    model_type = raw.pop("model_type")
    for k in ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "auto_map",
              "quantization_config"):
        raw.pop(k, None)
    if text_layers is not None:  # a probe copy: the language model cut to a layer (the tower whole)
        if isinstance(raw.get("text_config"), dict):
            raw["text_config"] = {**raw["text_config"], "num_hidden_layers": text_layers}
            raw["text_config"].pop("layer_types", None)
        else:
            raw["num_hidden_layers"] = text_layers
            raw.pop("layer_types", None)
    from trainmem.model.derive import config_for_model

    return config_for_model(transformers, model_type, raw)


def _module(model: Any, path: str, root: str = "model") -> Any:
    out = getattr(model, root) if root else model
    for part in path.split("."):
        out = getattr(out, part)
    return out


def _vision_fields(torch: Any, transformers: Any, cfg: Mapping[str, Any], fam: _Family) -> dict[str, Any]:
    """Meta-device build: parameters of the tower and the projector, the model's total, the text config."""
    from trainmem.model.derive import _build

    config = _hf_config(transformers, cfg)
    with torch.device("meta"):
        model = _build(transformers, torch, config, fam.architecture)
    tower, proj = _module(model, fam.tower, fam.root), _module(model, fam.projector, fam.root)
    in_proj = {id(p) for p in proj.parameters()}
    vc = config.vision_config
    if fam.tower == "visual":
        tokens, per_token, extra = None, int(vc.spatial_merge_size) ** 2, 0
    elif hasattr(config, "mm_tokens_per_image"):  # Gemma 3: the projector average-pools the patches to 256 tokens
        side = int(vc.image_size) // int(vc.patch_size)
        tokens, extra = int(config.mm_tokens_per_image), 0
        per_token = side * side // tokens
    elif getattr(vc, "pixel_shuffle_ratio", None):  # Llama 4: a tile's side² patches (+ CLS), pixel-shuffled
        side = int(vc.image_size) // int(vc.patch_size)  # by ratio² (0.5² = 1/4) to the tokens of the tile
        tokens, extra = int(side * side * float(vc.pixel_shuffle_ratio) ** 2), 1
        per_token = side * side // tokens
    else:
        side = int(vc.image_size) // int(vc.patch_size)
        strategy = getattr(config, "vision_feature_select_strategy", "default")
        tokens, per_token, extra = side * side, 1, 1
        if strategy != "default":
            tokens += 1
    return {
        "architecture": fam.architecture,
        "tower_params": sum(p.numel() for p in tower.parameters() if id(p) not in in_proj),
        "projector_params": sum(p.numel() for p in proj.parameters()),
        "total": sum(p.numel() for p in model.parameters()),
        "text_config": _text_config(transformers, cfg, fam),
        "tokens_per_image": tokens, "patches_per_token": per_token, "extra_positions": extra,
    }


def vlm_spec(cfg: Mapping[str, Any], *, name: str, source: str,
             text_spec: Callable[[dict[str, Any], str, str], ModelSpec]) -> ModelSpec:
    """The ``ModelSpec`` of a VLM config: the text model by ``text_spec`` (trainmem's described family; hf.py
    passes ``spec_from_hf_config``), the tower and projector in ``params.vision`` and ``spec.vision``.

    ``UnsupportedError`` without torch/transformers or where the described family's count of the text model
    differs from transformers'; ``ConfigError`` where transformers refuses the config."""
    from trainmem.model.derive import _config_key, _import_torch, _needs_torch, _torch_installed, _write_json, cache_dir

    model_type = str(cfg.get("model_type"))
    fam = VLM_MODEL_TYPES[model_type]
    if not _torch_installed():
        raise UnsupportedError(_needs_torch(model_type))
    clean = _clean(cfg)
    path = cache_dir() / f"{_config_key({'vlm': clean, 'version': VISION_DERIVE_VERSION})}-vlm.json"
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
        fields["text_config"]  # noqa: B018 - a cache without it is remade
    except (OSError, ValueError, KeyError, TypeError):
        torch, transformers = _import_torch()
        fields = _vision_fields(torch, transformers, clean, fam)
        _write_json(path, fields)
    text = text_spec(dict(fields["text_config"]), name, source)
    vision = fields["tower_params"] + fields["projector_params"]
    if text.params.total + vision != fields["total"]:
        raise UnsupportedError(
            f"model_type {model_type!r}: its text model counts {text.params.total:,} parameters as "
            f"{text.model_type}, transformers' {fam.architecture} has {fields['total'] - vision:,}; not modelled")
    tower = VisionTower(model_type=model_type, architecture=fam.architecture, config=clean,
                        tower_params=fields["tower_params"], projector_params=fields["projector_params"],
                        tokens_per_image=fields["tokens_per_image"], patches_per_token=fields["patches_per_token"],
                        extra_positions=fields["extra_positions"])
    return dataclasses.replace(text, params=dataclasses.replace(text.params, vision=vision), vision=tower,
                               source=source)


def with_vision(spec: ModelSpec, image_tokens: int, trains_vision: bool,
                text_spec: Callable[[dict[str, Any], str, str], ModelSpec]) -> ModelSpec:
    """A Gemma 3 spec (its text model, trainmem's default for ``model_type`` gemma3) built whole as
    ``Gemma3ForConditionalGeneration`` when the setup gives images or trains the vision part; ``spec`` otherwise."""
    if spec.vision is not None or not spec.multimodal_config or not (image_tokens or trains_vision):
        return spec
    return vlm_spec(spec.multimodal_config, name=spec.name, source=spec.source, text_spec=text_spec)


def _clean(cfg: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "_name_or_path",
                                                        "torch_dtype", "dtype", "auto_map")}


# --------------------------------------------------------------------------- activations (fake tensors)
def _real_stays_real(torch: Any) -> Any:
    """A TorchFunctionMode under which an op whose tensor arguments are all real (not fake) runs outside the
    fake mode: Qwen's image-grid bookkeeping (``grid_thw``, ``cu_seqlens``, their ``.tolist()``) stays data
    while the activations are fake."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_flatten

    class _RealStaysReal(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            flat = [a for a in tree_flatten((args, kwargs or {}))[0] if isinstance(a, torch.Tensor)]
            if flat and not any(isinstance(a, FakeTensor) for a in flat):
                with unset_fake_temporarily():
                    return func(*args, **(kwargs or {}))
            return func(*args, **(kwargs or {}))

    return _RealStaysReal()


def _inputs(torch: Any, vt: VisionTower, config: Any, images: int, grid: tuple[int, int], dtype: Any) -> dict:
    """Fake pixel values (and Qwen's real ``image_grid_thw``) for ``images`` images."""
    vc = config.vision_config
    if vt.tokens_per_image is None:  # Qwen: (patches, C·T·p·p) flattened patches, grid_thw per image
        per = int(vc.in_channels) * int(vc.temporal_patch_size) * int(vc.patch_size) ** 2
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        from transformers import vision_utils as vu

        merge = int(vc.spatial_merge_size)
        with unset_fake_temporarily():  # the image-grid bookkeeping, real (transformers pops these precomputed)
            thw = torch.tensor([[1, grid[0], grid[1]]] * images, dtype=torch.long)
            extra: dict[str, Any] = {"position_ids": vu.get_vision_position_ids(thw, merge),
                                     "cu_seqlens": vu.get_vision_cu_seqlens(thw)}
            if getattr(vc, "window_size", None) and vt.model_type == "qwen2_5_vl":
                extra["window_index"], extra["cu_window_seqlens"] = vu.get_vision_window_index(
                    thw, spatial_merge_size=merge, window_size=int(vc.window_size), patch_size=int(vc.patch_size))
        return {"pixel_values": torch.empty(images * grid[0] * grid[1], per, dtype=dtype), "image_grid_thw": thw,
                **extra}
    side = int(vc.image_size)
    return {"pixel_values": torch.empty(images, int(getattr(vc, "num_channels", 3)), side, side, dtype=dtype)}


def _measure_once(torch: Any, model: Any, vt: VisionTower, config: Any, images: int, grid: tuple[int, int],
                  dtype: Any, amp: Any) -> tuple[int, int]:
    """(bytes alive after the forward besides the image features, the forward's peak above that)."""
    from trainmem.trace.tracker import StorageTracker

    kwargs = _inputs(torch, vt, config, images, grid, dtype)
    tracker = StorageTracker()
    with tracker:
        tracker.recording = True
        for t in [*model.parameters(), *model.buffers(), *(v for v in kwargs.values() if isinstance(v, torch.Tensor))]:
            tracker.observe_storage(t.untyped_storage())  # (seen through views: counted as there before)
        base = tracker.allocated
        fam = VLM_MODEL_TYPES[vt.model_type]
        with torch.autocast("cpu", dtype=amp) if amp is not None else contextlib.nullcontext():
            out = _module(model, "get_image_features", fam.root)(**kwargs)
            if fam.projects_outside:  # Llama 4: forward projects the flattened tower output itself
                hidden = out.last_hidden_state
                feats = _module(model, fam.projector, fam.root)(hidden.view(-1, hidden.size(-1)))
                del hidden
            else:
                feats = out.pooler_output
        del out
        feats = tuple(feats) if isinstance(feats, (tuple, list)) else (feats,)
        held = {id(t.untyped_storage()): t.untyped_storage().nbytes() for t in feats}
        from trainmem.units import round_up_bytes
        out_bytes = sum(round_up_bytes(n) for n in held.values())
        alive = tracker.allocated - base - out_bytes
        peak = tracker.peak - base - out_bytes - alive
    tracker.close()
    torch.clear_autocast_cache()
    return alive, peak


def _runs(vt: VisionTower, mode: str, attn: str, state: str, recompute: bool,
          points: list[tuple[int, tuple[int, int]]]) -> dict[tuple[int, tuple[int, int]], tuple[int, int]]:
    """Measure (kept, transient) bytes at each (images, grid) point: the tower and projector of a copy of the
    model (the language model cut to one layer) on fake tensors with the tracer's CUDA emulations."""
    from trainmem.model.derive import _build, _import_torch, _needs_torch

    torch, transformers = _import_torch()
    if torch is None:
        raise UnsupportedError(_needs_torch(vt.model_type))
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace.autocast import cuda_autocast
    from trainmem.trace.dropout import cuda_dropout
    from trainmem.trace.sdpa import cuda_sdpa

    param_dtype, amp_name = _MODES[mode]
    amp = getattr(torch, amp_name) if amp_name else None
    dtype = getattr(torch, param_dtype)
    config = _hf_config(transformers, vt.config, text_layers=1)
    fam = VLM_MODEL_TYPES[vt.model_type]
    runs: dict[tuple[int, tuple[int, int]], tuple[int, int]] = {}
    with torch.device("meta"):  # (built on meta, then given fake storage: no weight init runs on fake tensors)
        model = _build(transformers, torch, config, fam.architecture, dtype=dtype, attn=attn)
    with contextlib.ExitStack() as stack:
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        model.to_empty(device="cpu")
        stack.enter_context(cuda_dropout())
        stack.enter_context(cuda_sdpa())
        stack.enter_context(cuda_autocast(None))
        model.train()
        tower, proj = _module(model, fam.tower, fam.root), _module(model, fam.projector, fam.root)
        for p in model.parameters():
            p.requires_grad_(False)
        trained = [*tower.parameters(), *proj.parameters()] if state == "trained" else [*proj.parameters()]
        for p in trained if state != "frozen" else []:  # (LLaVA's and Gemma's projector sits beside the tower)
            p.requires_grad_(True)
        if recompute:  # HF gradient checkpointing reaches the tower's blocks (GradientCheckpointingLayer)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        stack.enter_context(_real_stays_real(torch))
        quiet = logging.getLogger("torch._subclasses.fake_tensor")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        stack.callback(quiet.setLevel, level)
        try:
            for images, grid in points:
                with torch.no_grad() if state == "frozen" else contextlib.nullcontext():
                    runs[(images, grid)] = _measure_once(torch, model, vt, config, images, grid, dtype, amp)
        except (RuntimeError, ValueError, TypeError, IndexError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"transformers cannot run {fam.architecture}'s vision tower on this config: {msg}") from None
    return runs


def _measure_at(vt: VisionTower, mode: str, attn: str, state: str, recompute: bool, images: int,
                grid: tuple[int, int]) -> tuple[int, int]:
    """(kept, transient) bytes of one forward of ``images`` images (Qwen: of ``grid`` patches): a full measurement,
    what the tests hold the fit against."""
    return _runs(vt, mode, attn, state, recompute, [(images, grid)])[(images, grid)]


def _measure(vt: VisionTower, mode: str, attn: str, state: str, recompute: bool) -> VisionFit:
    """The fit through one image at each of ``_GRIDS`` (LLaVA: its one size) and two images at the first."""
    from trainmem.model.derive import _quadratic_through

    grids = _GRIDS if vt.tokens_per_image is None else ((0, 0),)
    runs = _runs(vt, mode, attn, state, recompute, [(1, g) for g in grids] + [(2, grids[0])])

    def coeffs(i: int) -> tuple[float, float, float, float]:
        one, two = runs[(1, grids[0])][i], runs[(2, grids[0])][i]
        if vt.tokens_per_image is not None:  # one image size: per image δ, shared γ
            return 0.0, 0.0, float(two - one), float(2 * one - two)
        c0, a, b = _quadratic_through([(g[0] * g[1], float(runs[(1, g)][i])) for g in grids])
        p1 = grids[0][0] * grids[0][1]
        delta = (two - one) - (a * p1 + b * p1 * p1)  # what a second image adds beyond its patches' terms
        return a, b, delta, c0 - delta

    # the forward's transient is a maximum (one block's tensors; Qwen attends image by image), not a sum: counted
    # as a second image's own (n times one image's peak: an upper bound where the images run one after another)
    if vt.tokens_per_image is not None:
        transient = (0.0, 0.0, float(runs[(1, grids[0])][1]), 0.0)
    else:
        t0, ta, tb = _quadratic_through([(g[0] * g[1], float(runs[(1, g)][1])) for g in grids])
        transient = (ta, tb, t0, 0.0)
    return VisionFit(saved=coeffs(0), transient=transient)


def _cached_fit(vt: VisionTower, mode: str, attn: str, state: str, recompute: bool) -> VisionFit:
    from trainmem.model.derive import _config_key, _write_json, cache_dir

    path = cache_dir() / (f"{_config_key({'vlm': vt.config, 'version': VISION_DERIVE_VERSION})}-vision-{mode}-{attn}-{state}"
                          f"{'-rc' if recompute else ''}.json")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return VisionFit(saved=tuple(raw["saved"]), transient=tuple(raw["transient"]))  # type: ignore[arg-type]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    fit = _measure(vt, mode, attn, state, recompute)
    _write_json(path, {"saved": list(fit.saved), "transient": list(fit.transient)})
    return fit
