"""A launch config → the setup fields of :func:`trainmem.api.build`, so that the doctor compares the run with
the estimate of *that* run.

Formats (detected from the content, not the file name):

* DeepSpeed JSON (keys of deepspeed/runtime/constants.py and zero/config.py, DeepSpeed 0.19.5, as
  :mod:`trainmem.export.deepspeed` writes them): ``train_micro_batch_size_per_gpu``,
  ``gradient_accumulation_steps``, ``train_batch_size``, ``zero_optimization.stage``, ``offload_optimizer`` /
  ``offload_param`` (``device`` cpu or nvme), ``bf16.enabled`` / ``fp16.enabled`` (else fp32),
  ``optimizer.type``; ``"auto"`` values (the HF integration fills them) are left unset;
* HF ``TrainingArguments`` JSON (``TrainingArguments.to_json_string()``, TRL's configs):
  ``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``bf16`` / ``fp16`` (torch.autocast:
  amp-bf16 / amp-fp16), ``gradient_checkpointing`` (full recompute), ``optim`` (adamw_torch*, adamw_8bit /
  adamw_bnb_8bit / paged_adamw_8bit, adafactor, sgd, lion*), ``use_liger_kernel`` (fused-linear loss),
  ``max_seq_length`` / ``max_length``, ``fsdp`` (``full_shard`` = FSDP ZeRO-3, ``shard_grad_op`` = ZeRO-2,
  ``offload``), ``deepspeed`` (an inline dict, or a path read relative to the config);
* Accelerate YAML (accelerate/commands/config/config_args.py ``ClusterConfig``, Accelerate 1.15.0):
  ``distributed_type`` (NO, MULTI_GPU, FSDP, DEEPSPEED), ``num_processes``, ``mixed_precision``, ``fsdp_config``
  (``fsdp_reshard_after_forward`` or v1's ``fsdp_sharding_strategy``, ``fsdp_offload_params``,
  ``fsdp_activation_checkpointing``), ``deepspeed_config`` (``zero_stage``, ``offload_optimizer_device``,
  ``offload_param_device``, ``gradient_accumulation_steps``, or ``deepspeed_config_file``);
* torchtitan TOML (torchtitan/config/job_config.py, 0.2.2): ``[training] local_batch_size`` (older:
  ``batch_size``), ``seq_len``, ``mixed_precision_param``, ``enable_cpu_offload``; ``[parallelism]``
  ``data_parallel_shard_degree``, ``tensor_parallel_degree``, ``pipeline_parallel_degree``,
  ``context_parallel_degree``, ``fsdp_reshard_after_forward``; ``[activation_checkpoint] mode``;
  ``[optimizer] name``.

Only what the file states is returned; flags given on the command line win over it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainmem.doctor.inputs import read_text
from trainmem.errors import ConfigError

__all__ = ["LaunchConfig", "parse_launch_config", "deepspeed_fields", "hf_fields", "accelerate_fields",
           "torchtitan_fields"]


class LaunchConfig(dict):
    """Setup fields read from a launch config; ``kind`` says which format it was."""

    kind: str = ""


def _num(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def deepspeed_fields(cfg: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"engine": "deepspeed"}
    mb, ga, tb = (_num(cfg.get(k)) for k in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                                             "train_batch_size"))
    out.update({k: v for k, v in (("micro_batch", mb), ("grad_accum", ga)) if v})
    if tb and mb and ga and tb % (mb * ga) == 0:
        out["gpus"] = tb // (mb * ga)
    z = cfg.get("zero_optimization") if isinstance(cfg.get("zero_optimization"), dict) else {}
    if isinstance(z.get("stage"), int) and 0 <= z["stage"] <= 3:
        out["zero"] = z["stage"]
    off = lambda k: isinstance(z.get(k), dict) and z[k].get("device") in ("cpu", "nvme")  # noqa: E731
    if off("offload_param"):
        out["offload"] = "optimizer+params"
    elif off("offload_optimizer"):
        out["offload"] = "optimizer"
    enabled = lambda k: isinstance(cfg.get(k), dict) and cfg[k].get("enabled") is True  # noqa: E731
    out["precision"] = "mixed-bf16" if enabled("bf16") else ("mixed-fp16" if enabled("fp16") else "fp32")
    if any(isinstance(cfg.get(k), dict) and cfg[k].get("enabled") == "auto" for k in ("bf16", "fp16")):
        del out["precision"]
    opt = cfg.get("optimizer")
    kind = str(opt.get("type", "")).lower() if isinstance(opt, dict) else ""
    if kind in ("adam", "adamw", "lion"):
        out["optimizer"] = kind
    return out


_OPTIM = {"adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw", "adamw_apex_fused": "adamw",
          "adamw_8bit": "adamw-8bit", "adamw_bnb_8bit": "adamw-8bit", "paged_adamw_8bit": "adamw-8bit",
          "adafactor": "adafactor", "sgd": "sgd", "lion_32bit": "lion", "paged_lion_32bit": "lion"}


def hf_fields(cfg: dict, base: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for src, dst in (("per_device_train_batch_size", "micro_batch"), ("gradient_accumulation_steps", "grad_accum"),
                     ("max_seq_length", "seq_len"), ("max_length", "seq_len")):
        if _num(cfg.get(src)):
            out[dst] = cfg[src]
    if cfg.get("bf16") is True:
        out["precision"] = "amp-bf16"
    elif cfg.get("fp16") is True:
        out["precision"] = "amp-fp16"
    if cfg.get("gradient_checkpointing") is True:
        out["recompute"] = "full"
    if isinstance(cfg.get("optim"), str) and cfg["optim"] in _OPTIM:
        out["optimizer"] = _OPTIM[cfg["optim"]]
    if cfg.get("use_liger_kernel") is True:
        out["loss"] = "fused-linear"
    fsdp = cfg.get("fsdp")
    fsdp = " ".join(fsdp) if isinstance(fsdp, list) else (fsdp if isinstance(fsdp, str) else "")
    if "full_shard" in fsdp or "shard_grad_op" in fsdp:
        out.update(engine="fsdp2", zero=3 if "full_shard" in fsdp else 2)
        if "offload" in fsdp:
            out["offload"] = "optimizer+params"
    ds = cfg.get("deepspeed")
    if isinstance(ds, str) and ds:
        path = Path(ds) if Path(ds).is_absolute() or base is None else base / ds
        if path.is_file():
            ds = _json(read_text(str(path), "--config", "a DeepSpeed JSON config"), str(path))
    if isinstance(ds, dict):
        keep = {k: v for k, v in out.items() if k in ("micro_batch", "grad_accum", "recompute", "seq_len", "loss")}
        amp = out.get("precision")
        out = {**deepspeed_fields(ds), **keep}
        if "precision" not in out and amp in ("amp-bf16", "amp-fp16"):  # "auto": the Trainer's bf16/fp16 decide
            out["precision"] = "mixed-" + amp.split("-")[1]
    return out


def accelerate_fields(cfg: dict, base: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = str(cfg.get("distributed_type", "")).upper()
    if _num(cfg.get("num_processes")):
        out["gpus"] = cfg["num_processes"]
    mp = str(cfg.get("mixed_precision", "")).lower()
    if mp in ("bf16", "fp16"):
        out["precision"] = f"amp-{mp}"
    if kind == "FSDP":
        f = cfg.get("fsdp_config") if isinstance(cfg.get("fsdp_config"), dict) else {}
        reshard = f.get("fsdp_reshard_after_forward", f.get("fsdp_sharding_strategy", True))
        zero3 = reshard is True or str(reshard).upper() in ("FULL_SHARD", "1", "TRUE")
        out.update(engine="fsdp2", zero=3 if zero3 else 2)
        if f.get("fsdp_offload_params") is True:
            out["offload"] = "optimizer+params"
        if f.get("fsdp_activation_checkpointing") is True:
            out["recompute"] = "full"
        if mp in ("bf16", "fp16"):  # FSDP2's MixedPrecisionPolicy: 16-bit parameters
            out["precision"] = "bf16" if mp == "bf16" else "amp-fp16"
    elif kind == "DEEPSPEED":
        d = cfg.get("deepspeed_config") if isinstance(cfg.get("deepspeed_config"), dict) else {}
        file = d.get("deepspeed_config_file")
        if isinstance(file, str) and file:
            path = Path(file) if Path(file).is_absolute() or base is None else base / file
            ds = _json(read_text(str(path), "--config", "a DeepSpeed JSON config"), str(path))
            return {**deepspeed_fields(ds), **({"gpus": out["gpus"]} if "gpus" in out else {})}
        out["engine"] = "deepspeed"
        out["precision"] = {"bf16": "mixed-bf16", "fp16": "mixed-fp16"}.get(mp, "fp32")
        if isinstance(d.get("zero_stage"), int):
            out["zero"] = d["zero_stage"]
        if str(d.get("offload_param_device", "none")).lower() in ("cpu", "nvme"):
            out["offload"] = "optimizer+params"
        elif str(d.get("offload_optimizer_device", "none")).lower() in ("cpu", "nvme"):
            out["offload"] = "optimizer"
        if _num(d.get("gradient_accumulation_steps")):
            out["grad_accum"] = d["gradient_accumulation_steps"]
    return out


def torchtitan_fields(cfg: dict) -> dict[str, Any]:
    t = cfg.get("training") if isinstance(cfg.get("training"), dict) else {}
    par = cfg.get("parallelism") if isinstance(cfg.get("parallelism"), dict) else {}
    out: dict[str, Any] = {"engine": "fsdp2"}
    mb = _num(t.get("local_batch_size")) or _num(t.get("batch_size"))
    degrees = {k: _num(par.get(f"{k}_parallel_degree")) or 1 for k in ("tensor", "pipeline", "context")}
    dp = _num(par.get("data_parallel_shard_degree"))
    if mb:
        pp_mb = _num(par.get("pipeline_parallel_microbatch_size"))
        if degrees["pipeline"] > 1 and pp_mb and mb % pp_mb == 0:
            out.update(micro_batch=pp_mb, grad_accum=mb // pp_mb)
        else:
            out["micro_batch"] = mb
    if _num(t.get("seq_len")):
        out["seq_len"] = t["seq_len"]
    out.update(tp=degrees["tensor"], pp=degrees["pipeline"], cp=degrees["context"])
    if dp:
        out.update(dp=dp, gpus=dp * degrees["tensor"] * degrees["pipeline"] * degrees["context"])
    reshard = str(par.get("fsdp_reshard_after_forward", "default")).lower()
    if reshard in ("always", "never"):
        out["zero"] = 3 if reshard == "always" else 2
    if t.get("enable_cpu_offload") is True:
        out["offload"] = "optimizer+params"
    out["precision"] = "fp32" if str(t.get("mixed_precision_param", "bfloat16")) == "float32" else "amp-bf16"
    ac = cfg.get("activation_checkpoint") if isinstance(cfg.get("activation_checkpoint"), dict) else {}
    if ac.get("mode") in ("none", "selective", "full"):
        out["recompute"] = ac["mode"]
    opt = cfg.get("optimizer") if isinstance(cfg.get("optimizer"), dict) else {}
    if str(opt.get("name", "")).lower() in ("adamw", "adam"):
        out["optimizer"] = str(opt["name"]).lower()
    return out


def _json(text: str, name: str) -> dict:
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ConfigError(f"--config {name}: not valid JSON (nested too deeply)") from None
    except ValueError as e:
        raise ConfigError(f"--config {name}: not valid JSON ({str(e)[:80]})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"--config {name}: not a JSON object")
    return obj


def _load(text: str, name: str) -> tuple[str, dict]:
    """(syntax, mapping) of a config's text: JSON, TOML or YAML."""
    s = text.lstrip()
    if s.startswith("{"):
        return "json", _json(text, name)
    if s.startswith("[") or "\n[" in text:
        try:
            import tomllib
        except ImportError:  # pragma: no cover - Python 3.10
            try:
                import tomli as tomllib  # type: ignore[no-redef]
            except ImportError:
                raise ConfigError("--config: reading TOML needs Python 3.11 or tomli (pip install tomli)") from None
        try:
            return "toml", tomllib.loads(text)
        except RecursionError:
            raise ConfigError(f"--config {name}: not valid TOML (nested too deeply)") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"--config {name}: not valid TOML ({str(e)[:80]})") from None
    try:
        import yaml
    except ImportError:
        raise ConfigError("--config: reading YAML needs PyYAML (pip install pyyaml)") from None
    try:
        obj = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"--config {name}: not valid YAML (nested too deeply)") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {name}: not valid YAML ({str(e).splitlines()[0][:80]})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"--config {name}: neither a DeepSpeed/TrainingArguments JSON, an Accelerate YAML nor a "
                          "torchtitan TOML")
    return "yaml", obj


def _framework_fields(path: str) -> tuple[str, dict[str, Any]]:
    """The values a framework's own config states (trainmem.frameworks.readers, as ``--from`` reads it; the
    framework's defaults for what it leaves out are not added): (format, fields)."""
    from trainmem.frameworks.readers import read_config
    try:
        fs = read_config(path)
    except ConfigError as e:
        text = str(e)
        if "not a config trainmem reads" in text:
            raise ConfigError(f"--config {path}: neither a DeepSpeed/TrainingArguments JSON, an Accelerate YAML nor a "
                              "torchtitan TOML") from None
        if text.startswith("--from "):  # the --from reader's message, said of --config
            where, _, why = text[len("--from "):].partition(": ")
            raise ConfigError(f"--config {where}: {why}") from None
        raise ConfigError(text) from None
    stated = {what.split(" ", 1)[0] for what, _ in fs.read}
    return fs.format, {k: v for k, v in fs.fields.items() if k in stated and k not in fs.blocked}


def parse_launch_config(path: str) -> LaunchConfig:
    """The setup fields a DeepSpeed / HF TrainingArguments JSON, Accelerate YAML or torchtitan TOML states."""
    text = read_text(path, "--config", "a launch config (JSON, YAML or TOML)")
    syntax, cfg = _load(text, path)
    base = Path(path).parent if path != "-" else None
    if syntax == "json" and ("zero_optimization" in cfg or "train_micro_batch_size_per_gpu" in cfg):
        kind, fields = "deepspeed", deepspeed_fields(cfg)
    elif syntax == "json" and ("per_device_train_batch_size" in cfg or "output_dir" in cfg):
        kind, fields = "hf", hf_fields(cfg, base)
    elif syntax == "yaml" and "distributed_type" in cfg:
        kind, fields = "accelerate", accelerate_fields(cfg, base)
    elif syntax == "toml" and ("training" in cfg or "parallelism" in cfg):
        kind, fields = "torchtitan", torchtitan_fields(cfg)
    else:  # axolotl, LLaMA-Factory, torchtune, litgpt, TRL YAML, Megatron, NeMo: the --from reader
        kind, fields = _framework_fields(path)
    out = LaunchConfig(fields)
    out.kind = kind
    return out
