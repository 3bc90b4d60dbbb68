"""Timeline simulation of one training step → per-rank memory breakdown."""

from trainmem.memory import compile as _compile, megatron_activations as _megatron  # noqa: F401  (register their
#                                                                      layer formulas: activations.LAYER_MODELS)
from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.memory.timeline import CATEGORIES

__all__ = ["MemoryEstimate", "estimate", "CATEGORIES"]
