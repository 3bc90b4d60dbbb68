"""Timeline simulation of one training step → per-rank memory breakdown."""

from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.memory.timeline import CATEGORIES

__all__ = ["MemoryEstimate", "estimate", "CATEGORIES"]
