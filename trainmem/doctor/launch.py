"""``doctor --config FILE``: the run's training config read by the ``--from`` reader (trainmem.frameworks.readers),
so that the doctor compares the evidence with the estimate of the very setup ``trainmem estimate --from FILE``
validates: every format ``--from`` reads (axolotl, LLaMA-Factory, torchtune, litgpt, HF TrainingArguments / TRL,
DeepSpeed, Accelerate, torchtitan, Megatron-LM arguments, NeMo), the framework's defaults for what the file leaves
out, its stack's shipped defaults, and the same assumption lines. Flags given on the command line win over the file;
MODEL over the model the file names. Errors are the reader's, said of ``--config``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainmem.errors import ConfigError

__all__ = ["LaunchConfig", "read_launch_config"]


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """What ``--config`` gives the doctor."""

    fields: dict[str, Any]
    """Setup fields for :func:`trainmem.api.build`: the flags' values over the file's, the file's assumption lines
    as ``notes``."""
    model: str | None
    """MODEL, else the model the file names (None: neither)."""
    kind: str
    """The format read (``deepspeed``, ``hf``, ``trl``, ``axolotl``, ...: trainmem.frameworks.readers.FORMATS)."""


def _said_of_config(e: ConfigError) -> ConfigError:
    text = str(e)
    return ConfigError("--config" + text[len("--from"):] if text.startswith("--from") else text)


def read_launch_config(path: str, flags: dict[str, Any], model: str | None,
                       any_model: bool = True) -> LaunchConfig:
    """``--config FILE`` as ``--from FILE`` reads it (:func:`trainmem.frameworks.readers.file_setup`); ``flags``: the
    setup fields the command line sets. ``any_model`` False takes the file's model only when it is a catalog entry
    (a pasted config in the web page must not make the doctor open a path or the hub)."""
    from trainmem.frameworks.readers import file_setup
    from trainmem.model.catalog import find_entry

    try:
        fields, named, file = file_setup(path, flags, model, model_required=False)
    except ConfigError as e:
        raise _said_of_config(e) from None
    if model is None and named is not None and not any_model and find_entry(named) is None:
        named = None
    return LaunchConfig(fields=fields, model=named, kind=file.format)
