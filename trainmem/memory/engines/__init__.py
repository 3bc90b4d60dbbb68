"""One unit per engine: the model states a rank holds and what the engine allocates, gathers, reduces
and frees at each point of the step (hooks of :class:`~trainmem.memory.engines.base.Engine`, called by
the shared walk in :mod:`trainmem.memory.walk`)."""

from __future__ import annotations

from trainmem.errors import UnsupportedError
from trainmem.memory.engines.base import Engine, ModelStates
from trainmem.memory.engines.deepspeed import DeepSpeedEngine
from trainmem.memory.engines.fsdp2 import FSDP2Engine, fsdp_shard_elems
from trainmem.memory.engines.megatron import MegatronEngine
from trainmem.memory.engines.torch_ddp import TorchEngine
from trainmem.memory.states import RankParams
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["Engine", "ModelStates", "engine_for", "fsdp_shard_elems"]


def engine_for(spec: ModelSpec, s: TrainingSetup, rp: RankParams, notes: list[str]) -> Engine:
    """The engine unit of a setup (fsdp2 without ``fully_shard`` — TP alone — runs as plain PyTorch)."""
    if s.engine == "torch" or (s.engine == "fsdp2" and not s.fsdp_applied):
        return TorchEngine(spec, s, rp, notes)
    if s.engine == "fsdp2" and s.fsdp_version == 1:
        from trainmem.memory.engines.fsdp1 import FSDP1Engine
        return FSDP1Engine(spec, s, rp, notes)
    if s.engine == "fsdp2":
        return FSDP2Engine(spec, s, rp, notes)
    if s.engine == "deepspeed":
        return DeepSpeedEngine(spec, s, rp, notes)
    if s.engine == "megatron":
        return MegatronEngine(spec, s, rp, notes)
    raise UnsupportedError(f"engine {s.engine} is not modelled")
