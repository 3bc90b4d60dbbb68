"""The GPU catalog, read from ``gpus.json`` (each row cites its source)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from trainmem.errors import ConfigError
from trainmem.units import MiB

__all__ = ["GPU", "get_gpu", "list_gpus"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GPU:
    name: str
    memory_bytes: int
    """Device memory total as ``torch.cuda.get_device_properties().total_memory``/nvidia-smi report it."""
    bf16_tflops: float
    """Dense 16-bit tensor-core peak, TFLOP/s (10^12)."""
    bf16: bool
    """Native bfloat16 support (Ampere and newer)."""
    hbm_gbps: float
    aliases: tuple[str, ...] = ()
    source: str = ""


@lru_cache(maxsize=1)
def list_gpus() -> tuple[GPU, ...]:
    raw = json.loads(resources.files("trainmem.hardware").joinpath("gpus.json").read_text())
    return tuple(
        GPU(name=g["name"], memory_bytes=g["memory_mib"] * MiB, bf16_tflops=g["bf16_tflops"], bf16=g["bf16"],
            hbm_gbps=g["hbm_gbps"], aliases=tuple(g.get("aliases", ())), source=g["source"])
        for g in raw["gpus"])


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name or alias, case-insensitively; unknown names raise ConfigError."""
    key = name.strip().lower()
    for g in list_gpus():
        if key == g.name.lower() or key in g.aliases:
            return g
    names = ", ".join(g.name for g in list_gpus())
    raise ConfigError(f"gpu: unknown GPU {name!r}; known: {names}")
