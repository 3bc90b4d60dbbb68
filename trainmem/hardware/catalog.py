"""The GPU catalog, read from ``gpus.json`` (each row cites its source).

Names match the way people write them: case, spaces, ``-``/``_`` and vendor words (NVIDIA, GeForce,
Tesla, AMD, Instinct, Huawei) do not matter, ``80GB``/``80G``/``80GiB`` are the same size, SXM2/4/5 are
``SXM`` and memory-type words (HBM3, GDDR6X) are ignored, so ``a100-80gb``, ``A100 80GB``,
``a100_sxm_80g`` and nvidia-smi's ``NVIDIA A100-SXM4-80GB`` all name ``A100-SXM-80G``. A bare family
name picks the stated default of ``gpus.json`` (``A100`` = ``A100-SXM-80G``). Anything else is a
:class:`~trainmem.errors.ConfigError` that names the nearest rows.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from trainmem.errors import ConfigError
from trainmem.units import MiB

__all__ = ["GPU", "get_gpu", "gpu_suggestions", "list_gpus", "normalize_gpu_name"]

#: Words that vendors and drivers put in front of the model name; they never tell two rows apart.
_VENDOR_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct", "huawei"})
_MEMORY_TYPE = re.compile(r"hbm\d?e?|gddr\d+x?")
_SIZE = re.compile(r"(\d+)(?:gb|gib|g)")
_MAX_NAME_CHARS = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class GPU:
    name: str
    memory_bytes: int
    """Device memory total as ``torch.cuda.get_device_properties().total_memory`` reports it
    (``memory_from`` says when the row had to use nvidia-smi's total or a sibling card's)."""
    bf16_tflops: float | None
    """Dense 16-bit tensor-core peak without sparsity, TFLOP/s (10^12); None where none is published."""
    bf16: bool
    """Native bfloat16 support (Ampere and newer)."""
    hbm_gbps: float | None
    """Device memory bandwidth, GB/s (10^9); None where none is published."""
    fp8_tflops: float | None = None
    """Dense fp8 tensor-core peak, TFLOP/s; None without fp8 or where none is published."""
    memory_from: str = "torch"
    """``torch`` | ``nvidia-smi`` | ``sibling: <row>``: where ``memory_bytes`` comes from."""
    aliases: tuple[str, ...] = ()
    source: str = ""
    """Vendor page or datasheet."""
    note: str = ""
    """How each figure was obtained."""
    gpus_per_node: int = 8
    """Default node size (8 for SXM/OAM boards and PCIe servers, 4 for GeForce boxes; ``links_note``)."""
    intra_link: str = ""
    """Default ``links.json`` row between the GPUs of one node (``""``: none given)."""
    inter_link: str = ""
    """Default ``links.json`` row between nodes, as this GPU's share of the node's NICs (``-sharedN``)."""
    host_link: str = ""
    """Default ``links.json`` row between the GPU and its host (offload traffic)."""
    links_note: str = ""
    """The typical system the link defaults describe, and their sources."""
    host_memory_bytes: int | None = None
    """Default host RAM of one node (the typical system of ``links_note``): offload plans whose ranks on a node put
    more there are refused (``trainmem.plan``); a cluster spec's ``host_memory`` or ``--host-memory`` overrides it."""
    host_memory_assumed: bool = False
    """True where no reference system was found and ``host_memory_bytes`` is a stated assumption."""
    host_memory_note: str = ""
    """The systems ``host_memory_bytes`` comes from (datasheets, cloud instance pages), or the assumption's basis."""


@lru_cache(maxsize=1)
def list_gpus() -> tuple[GPU, ...]:
    with open(os.path.join(os.path.dirname(__file__), "gpus.json"), encoding="utf-8") as f:  # (not importlib.resources: start-up)
        raw = json.load(f)
    return tuple(
        GPU(name=g["name"], memory_bytes=g["memory_bytes"] if "memory_bytes" in g else g["memory_mib"] * MiB,
            bf16_tflops=g["bf16_tflops"], bf16=g["bf16"], hbm_gbps=g["hbm_gbps"], fp8_tflops=g.get("fp8_tflops"),
            memory_from=g["memory_from"], aliases=tuple(g.get("aliases", ())), source=g["source"],
            note=g.get("note", ""), gpus_per_node=g.get("gpus_per_node", 8), intra_link=g.get("intra_link", ""),
            inter_link=g.get("inter_link", ""), host_link=g.get("host_link", ""), links_note=g.get("links_note", ""),
            host_memory_bytes=int(g["host_memory_gib"] * 1024**3) if "host_memory_gib" in g else None,
            host_memory_assumed=g.get("host_memory_assumed", False), host_memory_note=g.get("host_memory_note", ""))
        for g in raw["gpus"])


def normalize_gpu_name(name: str) -> str:
    """The lookup key of a GPU name: ``'NVIDIA A100-SXM4-80GB'`` → ``'a100sxm80g'``.

    Lower case; split on anything that is not a letter or digit; vendor words and memory types
    dropped; ``sxm2``/``sxm4``/``sxm5`` → ``sxm``; a size (``80gb``, ``80 GB``, ``80gib``) → ``80g``."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]
    out: list[str] = []
    for tok in tokens:
        if tok in _VENDOR_WORDS or _MEMORY_TYPE.fullmatch(tok):
            continue
        if re.fullmatch(r"sxm\d", tok):
            tok = "sxm"
        elif tok in ("gb", "gib", "g") and out and out[-1].isdigit():
            out[-1] += "g"
            continue
        else:
            tok = _SIZE.sub(r"\1g", tok) if _SIZE.fullmatch(tok) else tok
        out.append(tok)
    return "".join(out)


@lru_cache(maxsize=1)
def _index() -> dict[str, GPU]:
    index: dict[str, GPU] = {}
    for g in list_gpus():
        for alias in (g.name, *g.aliases):
            key = normalize_gpu_name(alias)
            if index.get(key, g) is not g:
                raise RuntimeError(f"gpus.json: {alias!r} names both {index[key].name} and {g.name}")
            index[key] = g
    return index


def _family(name: str) -> str:
    """``'H100-SXM-80G'`` → ``'H100'``; ``'RTX-4090-24G'`` → ``'RTX-4090'``."""
    parts = name.split("-")
    return "-".join(parts[:2]) if parts[0] in ("RTX", "Ascend") else parts[0]


def _suggestions(key: str) -> list[str]:
    """Rows whose names or aliases are closest to ``key`` (difflib), then the rest of their family."""
    index = _index()
    near = difflib.get_close_matches(key, list(index), n=6, cutoff=0.5) if key else []
    names: list[str] = []
    for k in near:
        if index[k].name not in names:
            names.append(index[k].name)
    if names:  # the nearest row first, then its family (H100 → SXM, PCIe, NVL), then the other near ones
        family = [g.name for g in list_gpus() if _family(g.name) == _family(names[0])]
        names = [names[0]] + [n for n in family if n != names[0]] + [n for n in names[1:] if n not in family]
    return names[:4]


def gpu_suggestions(name: str) -> list[str]:
    """The catalog rows nearest to ``name`` (at most 4, nearest first; [] when none is near)."""
    return _suggestions(normalize_gpu_name(name[:_MAX_NAME_CHARS]) if len(name) <= _MAX_NAME_CHARS else "")


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name or alias, case- and punctuation-insensitively (see the module docstring);
    unknown names raise a one-line ``ConfigError`` with the nearest rows."""
    shown = name if len(name) <= 60 else name[:60] + "…"
    key = normalize_gpu_name(name[:_MAX_NAME_CHARS]) if len(name) <= _MAX_NAME_CHARS else ""
    gpu = _index().get(key) if key else None
    if gpu is not None:
        return gpu
    near = _suggestions(key)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise ConfigError(f"gpu: unknown GPU {shown!r}{hint} (trainmem gpus lists them; --gpu-memory SIZE for others)")
