"""Turn what a user typed (``llama-3.1-8b``, ``./my-model/``, ``7B``) into a ``ModelSpec``.

Order: catalog name/alias/hub id → path to a config.json (or a folder holding one) → bare size
→ a loose catalog match (``llama3-8b``, ``qwen2.5-7b-instruct``: ``catalog.match_catalog``) → the hub
(``trainmem.model.hub``: config.json only, cached, ``HF_TOKEN``, offline mode: the cache only) → ``UnknownModelError`` naming the
nearest catalog entries. An argument too long to be a path (PATH_MAX/NAME_MAX) is never handed to
the file system, and a config.json nested too deeply for ``json`` is one ``ConfigError`` line.

A bare size keeps the requested parameter count exactly (the remainder in ``ParamCounts.other``,
negative when the chosen shape is slightly larger, e.g. 13B → Llama-2-13B's 13.016B) and borrows
a dense Llama-2-style shape for activation memory: the nearest LLaMA/Llama-2 published shape
(Touvron et al. 2023, "Llama 2", Table 1 and the HF configs) when one is within 10 %, else the
nearest point of the family's scaling rule: head_dim 128, hidden = 128·layers (7B and 13B have
exactly this aspect ratio), SwiGLU width 8h/3 rounded up to 256 (Llama's ``multiple_of``), GQA with
8 KV heads from h = 8192 on (as Llama-2-70B; so only head counts divisible by 8 there), vocab 32000,
untied embeddings.
"""

from __future__ import annotations

import dataclasses
import json
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainmem.errors import ConfigError, UnknownModelError
from trainmem.model.catalog import find_entry, list_models, load_catalog_spec, match_catalog, suggest_models
from trainmem.model.hf import spec_from_hf_config
from trainmem.model.spec import ModelSpec

__all__ = ["resolve_model", "parse_size", "bare_size_spec"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([mbt])\s*$", re.IGNORECASE)
_UNIT = {"m": 10**6, "b": 10**9, "t": 10**12}
#: Longest path and path component the usual file systems take (Linux PATH_MAX 4096, NAME_MAX 255 bytes);
#: anything longer is not a path, and asking the file system would raise "File name too long".
_PATH_MAX_BYTES = 4096
_NAME_MAX_BYTES = 255

# (hidden, layers, heads, kv_heads, intermediate) of LLaMA-1 33B/65B and Llama-2 7B/13B/70B.
_LLAMA_SHAPES: tuple[tuple[int, int, int, int, int], ...] = (
    (4096, 32, 32, 32, 11008),
    (5120, 40, 40, 40, 13824),
    (6656, 60, 52, 52, 17920),
    (8192, 80, 64, 64, 22016),
    (8192, 80, 64, 8, 28672),
)
_PUBLISHED_WITHIN = 0.10
_EXAMPLES = ("llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "mixtral-8x7b", "deepseek-v3", "gpt2")


def parse_size(ref: str) -> int | None:
    """``'7B'`` → 7_000_000_000, ``'0.5b'`` → 500_000_000, ``'350M'``, ``'1.2T'``; None if not a size."""
    m = _SIZE.match(ref)
    if not m:
        return None
    try:
        n = Decimal(m[1]) * _UNIT[m[2].lower()]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimals
        return None
    if n != n.to_integral_value() or n <= 0:
        return None
    return int(n)


def _llama_config(h: int, layers: int, heads: int, kv: int, inter: int) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": h,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
            "intermediate_size": inter, "vocab_size": 32000, "max_position_embeddings": 4096,
            "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
            "tie_word_embeddings": False}


def _ladder_shape(layers: int) -> tuple[int, int, int, int, int]:
    h = 128 * layers
    heads = h // 128
    inter = -(-(8 * h // 3) // 256) * 256
    return h, layers, heads, 8 if h >= 8192 else heads, inter


@lru_cache(maxsize=None)
def _n_params(shape: tuple[int, int, int, int, int]) -> int:
    return spec_from_hf_config(_llama_config(*shape), name="shape").n_params


def _shape_for(n_params: int) -> tuple[int, int, int, int, int]:
    published = min(_LLAMA_SHAPES, key=lambda s: abs(_n_params(s) - n_params))
    if abs(_n_params(published) - n_params) <= _PUBLISHED_WITHIN * n_params:
        return published
    # from h = 8192 on the ladder has 8 KV heads, so the head count (= layers) must be a multiple of 8
    return min((_ladder_shape(layers) for layers in range(2, 257) if layers < 64 or layers % 8 == 0),
               key=lambda s: abs(_n_params(s) - n_params))


def bare_size_spec(ref: str, n_params: int) -> ModelSpec:
    """A dense Llama-2-style ``ModelSpec`` of exactly ``n_params`` parameters, named ``ref``."""
    shape = _shape_for(n_params)
    spec = spec_from_hf_config(_llama_config(*shape), name=ref)
    params = dataclasses.replace(spec.params, other=n_params - spec.params.total)
    h, layers = shape[0], shape[1]
    return dataclasses.replace(
        spec, params=params, approximate_shape=True,
        source=(f"bare size: exact parameter count, Llama-2-style shape for activations "
                f"(h={h}, L={layers}, heads={shape[2]}, kv_heads={shape[3]}, ffn={shape[4]})"))


def _shown(ref: str) -> str:
    """``ref`` for a one-line message: at most 80 characters."""
    return repr(ref if len(ref) <= 80 else ref[:80] + "…")


def _could_be_path(ref: str) -> bool:
    raw = ref.encode("utf-8", "surrogateescape")
    return (0 < len(raw) <= _PATH_MAX_BYTES and b"\0" not in raw
            and all(len(part) <= _NAME_MAX_BYTES for part in raw.split(b"/")))


def _load_json(path: Path) -> Any:
    """A config.json's content; one-line ``ConfigError`` for unreadable, invalid or absurdly nested JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise ConfigError(f"cannot read {str(path)!r} as JSON: nested too deeply to be a config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {str(path)!r} as JSON: {exc}") from None


def names_a_file(ref: str) -> bool:
    """True for a reference that can only be a path (``/…``, ``./…``, ``../…``, ``~…``, a backslash, or a
    ``.json`` name), never a catalog name, size or hub id."""
    return ref.startswith(("/", "./", "../", "~")) or "\\" in ref or ref.lower().endswith(".json")


def _from_path(ref: str) -> ModelSpec | None:
    if not _could_be_path(ref):
        return None
    try:
        path = Path(ref).expanduser()
        is_dir, is_file = path.is_dir(), path.is_file()
        if is_dir:
            path = path / "config.json"
            is_file = path.is_file()
    except (OSError, ValueError, RuntimeError):  # unreadable, or ~user that does not exist: not a path
        return None
    if is_dir and not is_file:
        raise UnknownModelError(f"folder {_shown(ref)} holds no config.json")
    if not is_file and names_a_file(ref):
        raise UnknownModelError(f"no such file {_shown(ref)} (a model given as a path is a config.json or a "
                                "folder holding one)")
    if not is_file:
        return None
    cfg = _load_json(path)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{str(path)!r} is not a config.json: its JSON is a {type(cfg).__name__}, not an object")
    return spec_from_hf_config(cfg, name=ref, source=str(path.resolve()))


def _from_hub(ref: str) -> tuple[ModelSpec | None, str, str]:
    """The hub's config.json for an ``owner/name`` id (trainmem/model/hub.py: cached, HF_TOKEN, offline mode);
    (spec, why-not, how to pass the file)."""
    from trainmem.model.hub import HUB_ID, fetch_hub_config

    if not HUB_ID.match(ref):
        return None, "", ""
    cfg, why_not, how = fetch_hub_config(ref)
    if cfg is None:
        return None, why_not, how
    return spec_from_hf_config(cfg, name=ref, source=f"https://huggingface.co/{ref}/blob/main/config.json"), "", ""


def resolve_model(ref: str, *, local_paths: bool = True) -> ModelSpec:
    """The ``ModelSpec`` for a catalog name/alias/hub id, a config.json path or folder, or a
    bare size such as ``7B``; ``UnknownModelError`` otherwise. ``local_paths=False``: no file is looked
    at (the web API without ``--allow-paths``)."""
    ref = ref.strip()
    if find_entry(ref) is not None:
        return load_catalog_spec(ref)
    spec = _from_path(ref) if local_paths else None
    if spec is not None:
        return spec
    n_params = parse_size(ref)
    if n_params is not None:
        return bare_size_spec(ref, n_params)
    if match_catalog(ref) is not None:  # llama3-8b, qwen2.5-7b-instruct, meta-llama/Meta-Llama-3.1-8B-Instruct
        return load_catalog_spec(ref)
    spec, why_not, how = _from_hub(ref)
    if spec is not None:
        return spec
    near = suggest_models(ref)
    if near:
        raise UnknownModelError(
            f"unknown model {_shown(ref)}{why_not}; did you mean {', '.join(near)}? (trainmem models lists the "
            f"catalog; or give a path to a config.json or a folder holding one, or a size like 7B){how}")
    examples = ", ".join(n for n in _EXAMPLES if find_entry(n)) or ", ".join(e.name for e in list_models()[:5])
    raise UnknownModelError(
        f"unknown model {_shown(ref)}{why_not}: give a catalog name ({examples}, ...; trainmem models lists them), "
        f"a path to a config.json or a folder holding one, or a size like 7B or 0.5B{how}")
