"""A hub id outside the catalog: its ``config.json`` (only that file) from the Hugging Face hub.

``huggingface_hub.hf_hub_download(repo_id, "config.json")`` (huggingface_hub 2.x, ``file_download.py``)
keeps the file in the hub cache (``HF_HUB_CACHE``), so a second run reads it without the network; this
module also keeps each parsed config for the life of the process. ``HF_TOKEN`` is passed as the token (a
gated repository such as ``meta-llama/*`` needs one with access). Offline mode (``HF_HUB_OFFLINE=1``) is
respected: only the cache is read (``local_files_only=True``). Every failure is one line that says what to do:
set ``HF_TOKEN`` for a gated repository, or download the file where there is network and pass its path.
Tests replace ``_download`` (they never touch the network).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from trainmem.errors import ConfigError, UnknownModelError

__all__ = ["HUB_ID", "hub_offline", "fetch_hub_config", "clear_cache"]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
"""``owner/name`` as the hub spells repository ids."""
_TIMEOUT_S = 10
_CONNECT_TIMEOUT_S = 3.0
_CACHE: dict[str, dict[str, Any]] = {}


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` set to a true value (huggingface_hub's ``constants.HF_HUB_OFFLINE`` reads 1/true/yes/on)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def clear_cache() -> None:
    """Forget the configs read in this process (tests)."""
    _CACHE.clear()


def _download(repo_id: str, *, token: str | None, offline: bool) -> str:
    """The local path of ``repo_id``'s config.json (from the hub cache, or downloaded into it)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import logging as hub_logging

    from huggingface_hub.errors import LocalEntryNotFoundError

    verbosity = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()  # ("... thrown while requesting HEAD" would be a second line)
    try:
        if not offline and not _hub_reachable():
            try:  # no network: the cache alone answers, at once (huggingface_hub would retry for ~20 s)
                return hf_hub_download(repo_id=repo_id, filename="config.json", token=token, local_files_only=True)
            except LocalEntryNotFoundError:
                raise LocalEntryNotFoundError(f"{_endpoint_host()} cannot be reached") from None
        return hf_hub_download(repo_id=repo_id, filename="config.json", token=token, local_files_only=offline,
                               etag_timeout=_TIMEOUT_S)
    finally:
        hub_logging.set_verbosity(verbosity)


def _endpoint_host() -> str:
    """The hub's host (``HF_ENDPOINT``, default huggingface.co)."""
    from urllib.parse import urlparse
    return urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"


def _hub_reachable(timeout_s: float = _CONNECT_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the hub's port 443 opens within ``timeout_s`` (a proxy set in the
    environment is trusted to reach it)."""
    import socket
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    try:
        with socket.create_connection((_endpoint_host(), 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _how_to_pass(repo_id: str) -> str:
    return (f"download it where there is network (huggingface-cli download {repo_id} config.json) and pass the "
            "file's path (or its folder) as the model")


def fetch_hub_config(repo_id: str) -> tuple[dict[str, Any] | None, str, str]:
    """``(config, "", "")`` for a hub repository's config.json, or ``(None, why, how)`` when the hub does not know
    the repository or cannot be asked: ``why`` a clause for the unknown-model message (after the name), ``how``
    one for its end that says how to pass the file (offline and not cached, or no network). Raises :class:`UnknownModelError` (one line) for a gated
    repository without a token with access, :class:`ConfigError` for a file that is not a JSON object."""
    if repo_id in _CACHE:
        return _CACHE[repo_id], "", ""
    offline = hub_offline()
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return None, "", f"; huggingface_hub is not installed to fetch {repo_id}'s config.json: " + _how_to_pass(repo_id)
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, HFValidationError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)
    try:
        local = _download(repo_id, token=os.environ.get("HF_TOKEN") or None, offline=offline)
    except GatedRepoError:
        raise UnknownModelError(f"{repo_id} is a gated repository: set HF_TOKEN to a token with access to it, or "
                                f"download it where there is network (huggingface-cli download {repo_id} config.json) "
                                "and pass the file's path (or its folder) as the model") from None
    except HFValidationError:  # not a repository id the hub accepts ('a..b', over 96 characters)
        return None, "", ""
    except (RepositoryNotFoundError, RevisionNotFoundError):
        return None, "; the hub has no such repository (a private one needs HF_TOKEN)", ""
    except LocalEntryNotFoundError:
        why = ("offline (HF_HUB_OFFLINE=1) and its config.json is not in the hub cache" if offline else
               "the hub cannot be reached and its config.json is not in the hub cache")
        return None, "", f"; {repo_id} from the hub: {why}: " + _how_to_pass(repo_id)
    except EntryNotFoundError:
        return None, "; the hub repository has no config.json", ""
    except OSError as exc:  # requests' ConnectionError / Timeout are OSErrors
        return None, "", f"; the hub gave no config.json for {repo_id} ({type(exc).__name__}): " + _how_to_pass(repo_id)
    try:
        cfg = json.loads(Path(local).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"the hub's config.json for {repo_id} is not readable JSON: {type(exc).__name__}") from None
    if not isinstance(cfg, dict):
        raise ConfigError(f"the hub's config.json for {repo_id} is not a JSON object")
    _CACHE[repo_id] = cfg
    return cfg, "", ""
