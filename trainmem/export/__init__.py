"""Exporters: the configuration files and launch lines with which a stock engine runs exactly the setup that
trainmem estimated (issue 8, item 7). One module per engine, each pinned to a stated release:

=============  ==================================================  ===============================
exporter       files                                               runs estimate engine(s)
=============  ==================================================  ===============================
deepspeed      ds_config.json, launch.sh                           deepspeed
megatron       megatron_args.sh                                    megatron
torchtitan     torchtitan.toml, launch.sh (+ trainmem_flavor.py)   fsdp2
accelerate     accelerate_config.yaml, launch.sh (+ ds_config)     fsdp2, deepspeed, torch
=============  ==================================================  ===============================

:func:`export_files` returns the files (name → text) and writes nothing; :func:`write_export` writes them
all or none; :func:`can_export` tells the planner whether an exporter can run a setup (and why not).
"""

from __future__ import annotations

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.export import accelerate, deepspeed, megatron, torchtitan
from trainmem.export.common import ENGINES, ExportTarget, check_target
from trainmem.export.writer import write_export
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["ExportTarget", "ENGINES", "export_files", "write_export", "can_export", "PINNED"]

_MODULES = {"deepspeed": deepspeed, "megatron": megatron, "torchtitan": torchtitan, "accelerate": accelerate}
#: The release each exporter writes for.
PINNED: dict[str, str] = {name: mod.PINNED for name, mod in _MODULES.items()}


def _module(engine: str):  # noqa: ANN202 - one of the exporter modules
    if engine not in _MODULES:
        raise ConfigError(f"export: unknown engine {engine!r}; choose one of {', '.join(_MODULES)}")
    return _MODULES[engine]


def can_export(setup: TrainingSetup, engine: str, spec: ModelSpec | None = None,
               split: tuple[int, ...] = ()) -> str | None:
    """None if ``engine``'s exporter can run ``setup`` exactly as estimated, else a one-line reason. With
    ``spec``, the model's shape is checked too (Megatron-LM and torchtitan build their own models), and with
    ``split`` the planner's layers per pipeline stage (``ExportTarget.layers_per_stage``)."""
    mod = _module(engine)
    why = mod.reason(setup)
    if why is None and split and not hasattr(mod, "model_reason"):
        why = f"the {engine} exporter has no uneven pipeline stages"
    if why is None and spec is not None and hasattr(mod, "model_reason"):
        why = mod.model_reason(spec, setup, split) if split else mod.model_reason(spec, setup)
    return why


def export_files(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget, engine: str) -> dict[str, str]:
    """The files (name → content) with which ``engine`` runs ``setup`` on ``target``; nothing is written."""
    mod = _module(engine)
    check_target(setup, target)
    why = can_export(setup, engine, spec, target.layers_per_stage)
    if why is not None:
        raise UnsupportedError(f"cannot export to {engine}: {why}")
    return mod.files(spec, setup, target)
