"""A model given to the web API as a pasted ``config.json`` object (the CLI takes its path instead).

The pasted object is read by the same reader as a config.json file
(:func:`trainmem.model.hf.spec_from_hf_config`) and validated by :func:`trainmem.api.build_spec`, as
:func:`trainmem.api.build` validates a resolved name.
"""

from __future__ import annotations

from typing import Any

from trainmem.errors import ConfigError
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["PASTED_NAME", "MAX_CONFIG_KEYS", "NO_LOCAL_FILES", "pasted_spec", "web_model", "check_cluster",
           "build_any", "plan_request"]

PASTED_NAME = "pasted config.json"
"""The model name of a pasted config (what the results show as ``model``)."""
MAX_CONFIG_KEYS = 10_000
"""A pasted config with more top-level keys than this is refused (real ones have < 100)."""


def pasted_spec(cfg: dict[str, Any]) -> ModelSpec:
    """The ModelSpec of a pasted config.json object (one line on a malformed one)."""
    from trainmem.model.hf import spec_from_hf_config

    if len(cfg) > MAX_CONFIG_KEYS:
        raise ConfigError(f"model: the pasted config.json has {len(cfg):,} keys (at most {MAX_CONFIG_KEYS:,})")
    return spec_from_hf_config(cfg, name=PASTED_NAME, source=PASTED_NAME)


NO_LOCAL_FILES = ("{what} {ref}: this server reads no local files (start it with trainmem serve --allow-paths); "
                  "{instead}")
"""The one answer to a path when the server was started without ``--allow-paths``: the same whether the file
exists or not (nothing is looked at), so that the API tells no one which files the machine holds."""


def web_model(ref: str, allow_paths: bool) -> ModelSpec:
    """A model reference of a request: any (as the CLI) with ``allow_paths``; else a catalog name, hub id or size,
    no file looked at, and a path refused with :data:`NO_LOCAL_FILES`."""
    from trainmem.model.resolve import names_a_file, resolve_model

    if ref is None:  # as the command line says it (cli_options.with_setup_options)
        raise ConfigError("missing the MODEL argument (a catalog name, a config.json path or a size like 7B), "
                          "or give --from FILE")
    if allow_paths:
        return resolve_model(ref)
    if names_a_file(ref.strip()):
        raise ConfigError(NO_LOCAL_FILES.format(what="model", ref=repr(ref.strip()),
                                                instead="paste the config.json, or give a catalog name, a hub id "
                                                        "or a size"))
    return resolve_model(ref, local_paths=False)


def check_cluster(cluster: str | None, allow_paths: bool) -> None:
    """A cluster file is a path: refused without ``allow_paths`` (:data:`NO_LOCAL_FILES`)."""
    from trainmem.hardware.cluster_spec import is_file_spec

    if cluster and not allow_paths and is_file_spec(cluster):
        raise ConfigError(NO_LOCAL_FILES.format(what="cluster", ref=repr(cluster.strip()),
                                                instead="write the pool as a spec, e.g. 8xH100-SXM-80G"))


def check_sample_lengths(value: object, allow_paths: bool) -> None:
    """``sample_lengths`` naming a file of lengths is a path: refused without ``allow_paths``
    (:data:`NO_LOCAL_FILES`); ``MEAN:STD[:MIN:MAX]`` is no path (a malformed one is the setup's error)."""
    from trainmem.memory.sample_lengths import parse_sample_lengths

    if not isinstance(value, str) or allow_paths:
        return
    try:
        is_path = parse_sample_lengths(value) is None
    except ValueError:
        return
    if is_path:
        raise ConfigError(NO_LOCAL_FILES.format(what="sample_lengths", ref=repr(value.strip()),
                                                instead="give MEAN:STD or MEAN:STD:MIN:MAX tokens"))


def build_any(model: str | dict, allow_paths: bool = True, **fields: object) -> tuple[ModelSpec, TrainingSetup]:
    """:func:`trainmem.api.build` for a model reference (a local path only with ``allow_paths``), or for a
    pasted config.json object."""
    from trainmem.api import build_spec
    from trainmem.setup import make_setup

    check_sample_lengths(fields.get("sample_lengths"), allow_paths)

    if isinstance(model, dict):
        return build_spec(pasted_spec(model), **fields)
    make_setup(**fields)  # a bad flag is refused before the model is looked up, as build() does
    return build_spec(web_model(model, allow_paths), **fields)


def plan_request(model: str | dict, cluster: str, global_batch: int, seq_len: int, precision: str, margin: float,
                 top: int, fix: str | None, extra: dict, allow_paths: bool = True):  # noqa: ANN201 - PlanRequest
    """The planner's request as ``trainmem plan`` builds it (:func:`trainmem.python_api.plan_request`), for a
    model reference (a local path only with ``allow_paths``) or a pasted config."""
    from trainmem.python_api import plan_request as request

    check_cluster(cluster, allow_paths)
    if isinstance(model, dict):
        ref: str | ModelSpec = pasted_spec(model)
    else:
        ref = model if allow_paths else web_model(model, allow_paths)
    return request(ref, cluster, global_batch, seq_len, precision, margin, top, fix, extra)
