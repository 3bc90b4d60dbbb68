"""What a framework does by default, as data: :class:`Stack` holds one :class:`Default` per setup field the
framework sets (its value and the file + release that sets it) and the behaviour trainmem does not model.

A :class:`Default` applies under conditions of the run (:data:`CONDITIONS`: LoRA or full fine-tuning, one GPU
or several) and engines; the first that applies for a field wins. Its value is a constant or a function of
the :class:`Run` (litgpt's chunk count follows the sequence length). :func:`trainmem.frameworks.apply_stack`
fills the fields a user left unset from it.

Core module: no torch, no pydantic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Default", "Stack", "Run", "CONDITIONS"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """What a stack's conditions and computed values read: the fields set so far (explicit + filled)."""

    fields: Mapping[str, Any]
    """Setup fields, unset = None/absent."""
    seq_len: int
    """The sequence length the run will have (given, or the model's default)."""
    num_layers: int
    """Decoder layers of the model."""
    model_type: str = ""
    """The model's ``model_type`` (``llama``, ``qwen2``, ...)."""

    @property
    def gpus(self) -> int:
        return int(self.fields.get("gpus") or 1)

    @property
    def lora(self) -> bool:
        return bool(self.fields.get("lora_rank")) or bool(self.fields.get("qlora"))

    @property
    def engine(self) -> str:
        return str(self.fields.get("engine") or "torch")


#: Condition name → predicate over the run. Every condition of a Default must hold.
CONDITIONS: dict[str, Callable[[Run], bool]] = {
    "lora": lambda r: r.lora,
    "full": lambda r: not r.lora,
    "qlora": lambda r: bool(r.fields.get("qlora")),
    "one-gpu": lambda r: r.gpus == 1,
    "multi-gpu": lambda r: r.gpus > 1,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Default:
    """One setup field as the framework sets it."""

    field: str
    """A :class:`trainmem.setup.TrainingSetup` field (one trainmem lacks is listed as not modelled)."""
    value: Any
    """The value, or a function of the :class:`Run` returning it."""
    source: str
    """Where the framework sets it: release, file, key = value (code-like text, kept in English)."""
    when: tuple[str, ...] = ()
    """Conditions (:data:`CONDITIONS`), all of which must hold."""
    engines: tuple[str, ...] = ()
    """Engines it applies on (empty: any)."""

    def __post_init__(self) -> None:
        bad = [c for c in self.when if c not in CONDITIONS]
        if bad:
            raise ValueError(f"Default({self.field}).when: unknown condition(s) {bad}; known: {sorted(CONDITIONS)}")

    def applies(self, run: Run) -> bool:
        return all(CONDITIONS[c](run) for c in self.when) and (not self.engines or run.engine in self.engines)

    def value_for(self, run: Run) -> Any:
        return self.value(run) if callable(self.value) else self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class Stack:
    """A framework as it ships at one release."""

    name: str
    """The ``--stack`` name."""
    release: str
    """The release the defaults are read from, e.g. ``torchtune 0.6.1``."""
    engines: tuple[str, ...]
    """The trainmem engines the framework runs a step on (``plan --stack`` searches these)."""
    defaults: tuple[Default, ...]
    """In order of precedence: for each field the first that applies is used."""
    notes: tuple[str, ...] = ()
    """What the framework does by default that trainmem cannot express, and how to read its defaults (listed in the
    assumptions)."""

    def __post_init__(self) -> None:
        engine_rows = [d for d in self.defaults if d.field == "engine" and d.engines]
        if engine_rows:
            raise ValueError(f"stack {self.name}: an engine default cannot depend on the engine")
