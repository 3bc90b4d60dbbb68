"""The engines' own parsers, loaded for the export tests (each test module skips what is not installed).

- DeepSpeed 0.19.5: ``deepspeed.runtime.config.DeepSpeedConfig(dict, mpu)`` does the batch arithmetic with the
  data-parallel world size; it reads that from ``mpu.get_data_parallel_world_size()`` only after
  ``deepspeed.comm.get_rank()`` succeeds (runtime/config.py:697-715; without an initialised process group it
  falls back to world size 1), so ``get_rank`` is patched to rank 0 and a stub mpu gives the setup's dp.
- torchtitan 0.2.2: ``torchtitan.config.manager.ConfigManager().parse_args(["--job.config_file", path])``.
  torchtitan's package ``__init__`` imports its quantization converters and through them the MoE triton kernels
  (torchtitan/models/moe/kernels.py ``import triton``); triton has no wheel beside the CPU build of torch
  2.13.0, so the config subpackage (job_config.py, manager.py, unchanged) is imported under a bare
  ``torchtitan`` package object whose ``__path__`` is the installed one, without running that ``__init__``.
- Accelerate 1.15.0: ``load_config_from_file`` (ClusterConfig, which refuses unknown keys), then
  ``accelerate launch``'s own parser and ``_validate_launch_command`` (which copy the config onto the launch
  arguments), the env the launcher builds (``prepare_multi_gpu_env`` / ``prepare_deepspeed_cmd_env``), and the
  plugin built from that env (``FullyShardedDataParallelPlugin`` / ``DeepSpeedPlugin``), as in a launched job.
- Megatron-LM core_v0.19.0: not installable (no CPU build of its dependencies); the flags are checked against its
  parser's option list vendored in megatron_args_core_v0.19.0.txt.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import types
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints
from unittest import mock

import pytest

HERE = Path(__file__).resolve().parent
MEGATRON_ARGS_FILE = HERE / "megatron_args_core_v0.19.0.txt"
PINS = {"deepspeed": "0.19.5", "torchtitan": "0.2.2", "accelerate": "1.15.0"}


def require(dist: str) -> None:
    """Skip when ``dist`` is not installed; fail when it is another version than the exporter's pin."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        got = version(dist)
    except PackageNotFoundError:
        pytest.skip(f"{dist}=={PINS[dist]} is not installed")
    assert got == PINS[dist], f"{dist} {got} is installed; the exporter is pinned to {PINS[dist]}"


# --------------------------------------------------------------------------- DeepSpeed

class _MPU:
    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def deepspeed_config(cfg: dict[str, Any] | str, dp: int):  # noqa: ANN201 - DeepSpeedConfig
    """DeepSpeed's own parse of a config for a data-parallel world of ``dp`` ranks."""
    require("deepspeed")
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime import config as dsc

    with mock.patch.object(dsc.dist, "get_rank", return_value=0):
        return dsc.DeepSpeedConfig(cfg, mpu=_MPU(dp))


# --------------------------------------------------------------------------- torchtitan

@contextmanager
def _torchtitan_config_only():
    if "torchtitan" in sys.modules and not getattr(sys.modules["torchtitan"], "_trainmem_bare", False):
        yield  # the real package is imported already (a machine with triton)
        return
    found = importlib.util.find_spec("torchtitan")
    assert found is not None and found.submodule_search_locations
    bare = types.ModuleType("torchtitan")
    bare.__path__ = list(found.submodule_search_locations)
    bare._trainmem_bare = True  # type: ignore[attr-defined]
    saved = {k: v for k, v in sys.modules.items() if k == "torchtitan" or k.startswith("torchtitan.")}
    sys.modules["torchtitan"] = bare
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == "torchtitan" or k.startswith("torchtitan.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def torchtitan_job_config(path: Path):  # noqa: ANN201 - JobConfig
    """torchtitan's ConfigManager parse of a TOML job config; every string value of a ``Literal`` field is
    checked against its choices too (the TOML values reach the dataclasses unchecked)."""
    require("torchtitan")
    pytest.importorskip("tyro")
    import logging

    with _torchtitan_config_only():
        from torchtitan.config.manager import ConfigManager

        level = logging.getLogger().level
        try:
            logging.getLogger().setLevel(logging.ERROR)  # "HF assets path ... does not exist!"
            config = ConfigManager().parse_args(["--job.config_file", str(path)])
        finally:
            logging.getLogger().setLevel(level)
        _check_literals(config)
    return config


def _check_literals(obj: Any, where: str = "") -> None:
    hints = get_type_hints(type(obj))
    for f in fields(obj):
        value, hint = getattr(obj, f.name), hints[f.name]
        if is_dataclass(value):
            _check_literals(value, f"{where}{f.name}.")
            continue
        options = [a for a in (get_args(hint) if get_origin(hint) is not Literal else [hint])
                   if get_origin(a) is Literal]
        if options and value is not None:
            allowed = {x for lit in options for x in get_args(lit)}
            assert value in allowed, f"{where}{f.name} = {value!r} is not one of {sorted(map(str, allowed))}"


# --------------------------------------------------------------------------- Accelerate

def accelerate_launch(folder: Path):  # noqa: ANN201
    """(ClusterConfig, launch args, launcher env, plugin or None) as ``accelerate launch --config_file`` makes
    them in ``folder`` (relative paths such as ``ds_config.json`` resolve there)."""
    require("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = folder / "accelerate_config.yaml"
    config = load_config_from_file(str(path))
    parser = launch_command_parser()
    known = set(vars(parser.parse_args(["train.py"])))
    for section in (config.fsdp_config, config.deepspeed_config):
        unknown = set(section) - known
        assert not unknown, f"not accelerate launch arguments: {sorted(unknown)}"
    old = Path.cwd()
    os.chdir(folder)
    try:
        args, defaults, mp_from_config = _validate_launch_command(parser.parse_args(["--config_file", str(path),
                                                                                     "train.py"]))
        env, plugin = _accelerate_env_and_plugin(args, defaults, mp_from_config)
    finally:
        os.chdir(old)
    return config, args, env, plugin


def _accelerate_env_and_plugin(args: Any, defaults: Any, mp_from_config: bool) -> tuple[dict[str, str], Any]:
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    if args.use_deepspeed:
        # as launch_command does before deepspeed_launcher (commands/launch.py)
        args.deepspeed_fields_from_accelerate_config = ",".join(
            list(defaults.deepspeed_config) + (["mixed_precision"] if mp_from_config else []))
        args.main_process_ip = args.main_process_ip or "127.0.0.1"
        args.main_process_port = args.main_process_port or 29500
        _, env = prepare_deepspeed_cmd_env(args)
        with mock.patch.dict(os.environ, env):
            return env, DeepSpeedPlugin()
    if args.use_fsdp:
        env = prepare_multi_gpu_env(args)
        with mock.patch.dict(os.environ, env):
            return env, FullyShardedDataParallelPlugin()
    return {}, None


# --------------------------------------------------------------------------- Megatron-LM

def megatron_flags() -> dict[str, tuple[str, tuple[str, ...]]]:
    """flag → (kind, choices) of the vendored core_v0.19.0 parser list."""
    out = {}
    for line in MEGATRON_ARGS_FILE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        flag, kind, choices = (line.split("\t") + ["", ""])[:3]
        out[flag] = (kind, tuple(c for c in choices.split(",") if c))
    return out


def _array(text: str, name: str) -> list[str]:
    start = text.index(f"{name}=(")
    body = text[start + len(name) + 2: text.index("\n)", start)]
    return shlex.split(body)


def megatron_script(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """(torchrun options, {flag: values}) of an exported megatron_args.sh; every flag is checked against the
    vendored parser list: it exists, a store_true/false flag has no value, a value flag one value of its
    choices, and none is given twice."""
    table = megatron_flags()
    tokens = _array(text, "MODEL_ARGS") + _array(text, "DATA_ARGS")
    args: dict[str, list[str]] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        assert flag in table, f"{flag} is not a Megatron-LM core_v0.19.0 argument"
        assert flag not in args, f"{flag} given twice"
        kind, choices = table[flag]
        j = i + 1
        while j < len(tokens) and not tokens[j].startswith("--"):
            j += 1
        values = tokens[i + 1:j]
        if kind in ("store_true", "store_false"):
            assert not values, f"{flag} takes no value, got {values}"
        elif kind == "value":
            assert len(values) == 1, f"{flag} takes one value, got {values}"
            assert not choices or values[0] in choices, f"{flag} {values[0]} is not one of {choices}"
        args[flag] = values
        i = j
    run = next(ln for ln in text.splitlines() if ln.startswith("torchrun "))
    words = shlex.split(run)
    launcher = {w: words[k + 1] for k, w in enumerate(words[:-1]) if w.startswith("--")}
    return launcher, args
