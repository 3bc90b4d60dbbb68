"""LoRA targets given as one regular expression (axolotl ``lora_target_modules: '<regex>'``, ms-swift
``target_regex``) → trainmem's target names.

PEFT 0.21.2 (peft/tuners/tuners_utils.py ``check_target_module_exists``): when ``target_modules`` is a ``str`` and
not ``all-linear``, a module is adapted when ``re.fullmatch(target_modules, key)`` holds for its full name
(``model.language_model.layers.3.self_attn.q_proj``). trainmem's targets are module paths inside the decoder
layers (the same in every layer) plus the LM head and the few linears outside the layers
(trainmem/model/lora_targets.py), so the regex is matched the way PEFT matches it, on the full names of the model
the run uses: built on the meta device by transformers (its own class: ``*ForCausalLM``, or the
``*ForConditionalGeneration`` of a vision-language model), then each matched ``nn.Linear`` / ``Conv1D`` is named by
its path inside its layer. Refused in one line: a regex that matches nothing, that adapts some layers and not others
(trainmem's targets cannot express a partial-layer match), that reaches a module outside the language model's layers
(a vision tower, a projector), or a module that is not a linear (PEFT's Embedding / Conv LoRA).

The model is known only once the command line's MODEL is (:func:`trainmem.frameworks.readers.merge_fields`): the
reader records the regex (``FileSetup.lora_regex``), :func:`resolve_regex` maps it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from trainmem.errors import ConfigError, UnknownModelError, UnsupportedError
from trainmem.frameworks.readers._base import FileSetup, shown

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec

__all__ = ["check_regex", "resolve_regex", "targets_from_names", "RegexTargetError"]


class RegexTargetError(ValueError):
    """What the regex adapts, that trainmem's targets cannot express (one line, without the file)."""


def check_regex(regex: str) -> str | None:
    """Why ``regex`` is not a Python regular expression (None: it is one)."""
    try:
        re.compile(regex)
    except re.error as e:
        return str(e)
    return None


def targets_from_names(regex: str, names: dict[str, str], layers: str, num_layers: int,
                       outside: dict[str, str]) -> str:
    """The trainmem targets ``regex`` adapts among ``names`` (full module name → its kind: ``linear`` or another
    class name). ``layers``: the full name of the decoder layers' ModuleList (its items are ``layers.i``);
    ``outside``: full names outside the layers that trainmem targets (the head ``lm_head`` …) → their target name.
    Raises :class:`RegexTargetError` for what trainmem cannot express."""
    pat = re.compile(regex)
    hit = [n for n in names if pat.fullmatch(n)]
    if not hit:
        raise RegexTargetError(f"matches no module of the model (PEFT full-matches it on names like "
                         f"{layers}.0.{_some_linear(names, layers)})")
    per_layer: dict[int, set[str]] = {i: set() for i in range(num_layers)}
    out: set[str] = set()
    for name in hit:
        kind = names[name]
        if name in outside and kind == "linear":
            out.add(outside[name])
            continue
        m = re.fullmatch(re.escape(layers) + r"\.(\d+)\.(.+)", name)
        if m is None:
            raise RegexTargetError(f"adapts {name}, outside the language model's decoder layers (not modelled)")
        if kind != "linear":
            raise RegexTargetError(f"adapts {name}, a {kind} (LoRA on a module that is not nn.Linear is not modelled)")
        per_layer[int(m.group(1))].add(m.group(2))
    paths = set().union(*per_layer.values())
    for i, got in per_layer.items():  # every layer: the paths of the union it has (MoE/dense layers differ)
        want = {p for p in paths if f"{layers}.{i}.{p}" in names}
        if got != want:
            some = sorted(j for j, g in per_layer.items() if g == per_layer[0])
            raise RegexTargetError(f"adapts {', '.join(sorted(want - got or got - want)[:3])} in some decoder layers and "
                             f"not in layer {i} ({len(some)} of {num_layers} alike): trainmem's targets are the same "
                             f"modules in every layer")
    return ",".join(sorted(paths) + sorted(out))


def _some_linear(names: dict[str, str], layers: str) -> str:
    for n, kind in names.items():
        if kind == "linear" and n.startswith(layers + ".0."):
            return n[len(layers) + 3:]
    return "…"


def _module_names(spec: Any) -> tuple[dict[str, str], str, dict[str, str]]:
    """(full module name → ``linear`` or its class name, the decoder layers' full name, the targeted names outside
    the layers → target) of ``spec``'s model built by transformers on the meta device."""
    from trainmem.model.derive import _build, _import_torch, config_for_model
    from trainmem.model.lora_targets import head_linear, layer_linears, model_linears

    torch, transformers = _import_torch()
    if torch is None:
        raise UnsupportedError("a regex of LoRA targets is matched on the model's module names: needs torch and "
                               "transformers (pip install 'trainmem[trace]')")
    vision = getattr(spec, "vision", None)
    raw = dict(vision.config) if vision is not None else dict(spec.hf_config)
    arch = vision.architecture if vision is not None else spec.architecture
    if not raw or not hasattr(transformers, arch):
        raise UnsupportedError(f"{spec.model_type}: transformers has no class {arch} to read the module names from")
    raw.pop("architectures", None)
    model_type = str(raw.pop("model_type", spec.model_type))
    with torch.device("meta"):
        model = _build(transformers, torch, config_for_model(transformers, model_type, raw), arch)
    names = {n: ("linear" if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D" else type(m).__name__)
             for n, m in model.named_modules() if n and not list(m.children())}
    first = [lin.path for lin in layer_linears(spec, 0)]
    lists = [n for n, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m) == spec.num_layers
             and all(f"{n}.0.{p}" in names for p in first)]
    if len(lists) != 1:
        raise UnsupportedError(f"{spec.model_type}: the decoder layers of {arch} are not one ModuleList of "
                               f"{spec.num_layers} (found {len(lists)})")
    outside = {}
    for lin in list(model_linears(spec)) + [h for h in (head_linear(spec),) if h is not None]:
        full = [n for n in names if n == lin.path or n.endswith("." + lin.path)]
        outside.update({n: lin.path for n in full if not n.startswith(lists[0] + ".")})
    return names, lists[0], outside


def resolve_regex(file: FileSetup, model: "str | ModelSpec | None") -> str:
    """``file.lora_regex`` on ``model`` (the command line's MODEL, else the file's; a resolved ``ModelSpec`` for
    the Python API's config dicts and live modules): trainmem's targets, with one statement in ``file`` saying how
    they were read; one ConfigError line where they cannot be."""
    from trainmem.model.resolve import resolve_model

    key, regex = file.lora_regex  # type: ignore[misc]
    head = f"--from {shown(file.path)}: {key} is a regex (PEFT full-matches it on the module names)"
    if model is None:
        raise ConfigError(f"{head}: the file names no model to match it on; give MODEL or --lora-targets")
    try:
        spec = resolve_model(model) if isinstance(model, str) else model
        model = spec.name if not isinstance(model, str) else model
        names, layers, outside = _module_names(spec)
        targets = targets_from_names(regex, names, layers, spec.num_layers, outside)
    except RegexTargetError as e:
        raise ConfigError(f"{head}: on {model} it {e}; give --lora-targets") from None
    except (ConfigError, UnknownModelError, UnsupportedError) as e:
        raise ConfigError(f"{head}, not matched: {str(e).splitlines()[0]}; give --lora-targets") from None
    file.statements.append(f"lora_targets {targets}: {key} full-matched on the module names of {spec.name} "
                           f"(meta-device build)")
    return targets
