"""trainmem: per-GPU memory of one training step — estimate, trace, plan, diagnose.

The Python API (``docs/api.md``)::

    import trainmem
    r = trainmem.estimate("llama-3.1-8b", engine="fsdp2", gpus=8, seq_len=4096)   # or a config, a live model
    r.peak_allocated_bytes, r.fits, r.to_dict()       # == `trainmem estimate ... --json`
    trainmem.plan(...), trainmem.compare(...), trainmem.doctor(...)
    trainmem.preflight(model, optimizer=opt, batch=batch)   # in a plain loop, before the first step

Importing ``trainmem`` imports nothing else: every name is loaded on first use (PEP 562 ``__getattr__``), so
``import trainmem`` stays ~1 ms and never imports torch, transformers or pydantic.

``trainmem.plan`` and ``trainmem.doctor`` are also the planner's and the doctor's subpackages; the package
module makes those two subpackages callable (``_CallablePackage``), so ``trainmem.plan(...)`` is the API
function while ``trainmem.plan.search`` and ``import trainmem.plan`` keep working as before.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # typing itself costs ~2 ms to import; type checkers read this name as typing's

from trainmem._version import __version__

__all__ = ["__version__", "estimate", "plan", "compare", "doctor", "preflight", "PreflightCallback", "Result", "Estimate",
           "MaxMicroBatch", "Plan", "Comparison", "Diagnosis", "TrainingSetup", "TrainmemError", "ConfigError",
           "UnknownModelError", "UnsupportedError"]

#: name -> the module that defines it (imported on first use).
_LAZY = {
    **{n: "trainmem.python_api" for n in ("estimate", "compare", "Result", "Estimate", "MaxMicroBatch", "Plan",
                                          "Comparison", "Diagnosis")},
    **{n: "trainmem.errors" for n in ("TrainmemError", "ConfigError", "UnknownModelError", "UnsupportedError")},
    "TrainingSetup": "trainmem.setup",
    "PreflightCallback": "trainmem.integrations.hf",
    "preflight": "trainmem.integrations.loop",
}
#: API functions that share their name with a subpackage: the subpackage module is made callable.
_CALLABLE_PACKAGES = {"plan": "trainmem.plan", "doctor": "trainmem.doctor"}

if TYPE_CHECKING:
    from trainmem.errors import ConfigError, TrainmemError, UnknownModelError, UnsupportedError
    from trainmem.integrations.hf import PreflightCallback
    from trainmem.integrations.loop import preflight
    from trainmem.python_api import (Comparison, Diagnosis, Estimate, MaxMicroBatch, Plan, Result, compare, doctor,
                                     estimate, plan)
    from trainmem.setup import TrainingSetup


class _CallablePackage(types.ModuleType):
    """``trainmem.plan`` / ``trainmem.doctor``: the subpackage, callable as the API function of its name."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._api_function()(*args, **kwargs)

    def _api_function(self) -> Any:
        from trainmem import python_api
        return getattr(python_api, self.__name__.rsplit(".", 1)[1])

    @property
    def __signature__(self) -> Any:  # inspect.signature(trainmem.plan) is the function's
        import inspect
        return inspect.signature(self._api_function())


class _Package(types.ModuleType):
    """The ``trainmem`` module: when the import system binds ``plan`` / ``doctor`` (the subpackage, once
    imported), that module becomes a :class:`_CallablePackage`."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CALLABLE_PACKAGES and type(value) is types.ModuleType:
            value.__class__ = _CallablePackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    import importlib

    if name in _CALLABLE_PACKAGES:  # importing it binds it here, callable (_Package.__setattr__)
        return importlib.import_module(_CALLABLE_PACKAGES[name])
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainmem' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
