"""Frameworks as they ship: one module per framework, each a :class:`~trainmem.frameworks.stack.Stack` of the
setup fields it sets by default, with the file and release that sets each (``--stack NAME``).

:func:`apply_stack` fills the fields a run left unset from a stack and returns one assumption line per value
(its source beside it); explicit flags and a config file's fields win over it. :func:`trainmem.api.build_spec`
calls it, so every command and the Python API take ``stack``. A config-file reader
(``trainmem/frameworks/readers/``) returns setup fields plus ``stack=NAME``; :func:`merge_fields` lays the
command line over them, and the stack fills what is left.

Modules are imported on first use (``import trainmem`` stays light).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from trainmem.errors import ConfigError
from trainmem.frameworks.stack import CONDITIONS, Default, Run, Stack

__all__ = ["STACK_NAMES", "Stack", "Default", "Run", "Target", "CONDITIONS", "get_stack", "check_stack_name",
           "apply_stack", "merge_fields", "stack_rows", "PLAN_FIELDS", "plan_stack"]

#: ``--stack`` name → module of :mod:`trainmem.frameworks` holding its ``STACK``.
_MODULES: dict[str, str] = {
    "hf-trainer": "hf_trainer", "trl": "trl", "torchtune": "torchtune", "litgpt": "litgpt", "axolotl": "axolotl",
    "llama-factory": "llama_factory", "unsloth": "unsloth", "ms-swift": "ms_swift", "torchtitan": "torchtitan",
    "megatron": "megatron", "megatron-bridge": "megatron_bridge", "deepspeed": "deepspeed", "llm-foundry": "llm_foundry", "accelerate": "accelerate",
}
STACK_NAMES: tuple[str, ...] = tuple(_MODULES)
"""The names ``--stack`` takes."""


def check_stack_name(name: str) -> str:
    """``name`` if it is a stack (case-insensitive, ``_`` for ``-``), else a one-line error listing the names."""
    key = name.strip().lower().replace("_", "-")
    if key not in _MODULES:
        raise ValueError(f"not a known framework; one of: {', '.join(STACK_NAMES)}")
    return key


def get_stack(name: str) -> Stack:
    """The :class:`Stack` of a ``--stack`` name (ConfigError listing the names for an unknown one)."""
    try:
        key = check_stack_name(name)
    except ValueError as err:
        raise ConfigError(f"stack: {err} (got {name!r})") from None
    return import_module(f"trainmem.frameworks.{_MODULES[key]}").STACK


def merge_fields(cli: Mapping[str, Any], file: Mapping[str, Any]) -> dict[str, Any]:
    """A config file's setup fields (a reader's, ``stack`` among them) with the command line's laid over them:
    a flag given (not None) wins; the stack's defaults then fill what both left unset (:func:`apply_stack`)."""
    out = dict(file)
    out.update({k: v for k, v in cli.items() if v is not None})
    return out


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """What a stack is applied to, as the caller (:mod:`trainmem.api`) knows it: the model's facts and the
    setup's own validation (this package imports neither the setup nor the api: no import circle)."""

    fields: frozenset[str]
    """The setup's field names (a default for another field is listed as not modelled)."""
    refusal: Callable[[Mapping[str, Any]], str | None]
    """Why setup fields are refused (the model's own defaults filled in), None when they are valid."""
    seq_len: int = 2048
    """The sequence length the run has when ``seq_len`` is not given (the model's context when shorter)."""
    num_layers: int = 0
    model_type: str = ""


def _run(fields: Mapping[str, Any], target: Target) -> Run:
    seq_len = fields.get("seq_len")
    return Run(fields=fields, seq_len=int(seq_len if seq_len is not None else target.seq_len),
               num_layers=target.num_layers, model_type=target.model_type)


def apply_stack(fields: dict[str, Any], target: Target, stack: str | None = None) -> list[str]:
    """Fill the setup fields left unset (None or absent) in ``fields`` from ``stack`` (default:
    ``fields["stack"]``), in place; return one assumption line per value filled, with its source, and the
    stack's notes. A value the setup refuses (an explicit flag contradicts it) is not applied, and said so; a
    field trainmem does not have is listed as not modelled. Engine defaults are applied first (the others may
    depend on the engine). Fields already invalid without the stack are left to the caller's validation."""
    name = stack if stack is not None else fields.get("stack")
    if name is None:
        return []
    st = get_stack(str(name))
    fields["stack"] = st.name
    explicit = {k for k, v in fields.items() if v is not None}
    notes = [f"stack {st.name}: the defaults of {st.release} fill the flags not given"]
    filled: set[str] = set()
    engine = next((d for d in st.defaults if d.field == "engine" and d.applies(_run(fields, target))), None)
    if engine is not None and "engine" not in explicit:
        fields["engine"] = engine.value_for(_run(fields, target))
        filled.add("engine")
        notes.append(f"engine {_shown(fields['engine'])}: the {st.name} default ({engine.source})")
    if fields.get("engine") is not None and fields["engine"] not in st.engines:
        notes.append(f"warning: {st.name} runs on {', '.join(st.engines)}, not the {fields['engine']} engine: "
                     "its defaults are applied where the engine takes them")
    if target.refusal(fields) is not None:  # the flags given (on the stack's engine) are refused by themselves
        return notes
    for d in st.defaults:
        if d.field in explicit or d.field in filled or not d.applies(run := _run(fields, target)):
            continue
        value = d.value_for(run)
        if value is None:  # no default for this model (PEFT's targets of an unlisted family)
            continue
        shown = _shown(value)
        if d.field not in target.fields:
            filled.add(d.field)
            notes.append(f"{d.field} {shown}: the {st.name} default, not modelled by trainmem ({d.source})")
            continue
        why = target.refusal({**fields, d.field: value})
        if why is not None:
            notes.append(f"{d.field} {shown}: the {st.name} default, not applied: {why}")
            continue
        fields[d.field] = value
        filled.add(d.field)
        notes.append(f"{d.field} {shown}: the {st.name} default ({d.source})")
    notes.extend(f"{st.name}: {n}" for n in st.notes)
    return notes


#: The setup fields ``trainmem plan --stack`` takes from a stack: the planner searches the engine, ZeRO/FSDP stage,
#: recompute, offload, parallelism, micro-batch and accumulation itself, and takes the precision family from
#: ``--precision``.
PLAN_FIELDS = ("optimizer", "attn", "loss", "loss_chunks", "loop", "lora_targets")


def plan_stack(name: str, extra: Mapping[str, Any], seq_len: int, gpus: int,
               engines: tuple[str, ...] | None = None) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``trainmem plan --stack``: the plan's setup extras with the stack's :data:`PLAN_FIELDS` filled where unset
    (for a run of ``gpus`` GPUs: the stack's conditions), and the engines to search — the stack's, within
    ``engines`` when given (an ``--export`` target); one line when none is left."""
    st = get_stack(name)
    out = dict(extra)
    fields = {**{k: v for k, v in extra.items() if v is not None}, "gpus": gpus, "seq_len": seq_len}
    run = Run(fields=fields, seq_len=seq_len, num_layers=0)
    for d in st.defaults:
        if d.field in PLAN_FIELDS and out.get(d.field) is None and not d.engines and d.applies(run):
            value = d.value_for(run)
            if value is not None:
                out[d.field] = ",".join(value) if d.field == "lora_targets" else value
    keep = tuple(e for e in st.engines if engines is None or e in engines)
    if not keep:
        raise ConfigError(f"--stack {st.name} runs on {', '.join(st.engines)}; "
                          f"the plan asks for {', '.join(engines or ())}")
    return out, keep


def stack_rows(name: str) -> list[tuple[str, str, str, str]]:
    """(field, value, conditions, source) for every default of a stack, in order (docs/stacks.md)."""
    st = get_stack(name)
    rows = []
    for d in st.defaults:
        value = getattr(d.value, "__name__", "") and f"({d.value.__name__})" if callable(d.value) else _shown(d.value)
        cond = ", ".join([*d.when, *([f"engine {'/'.join(d.engines)}"] if d.engines else [])]) or "always"
        rows.append((d.field, value, cond, d.source))
    return rows
