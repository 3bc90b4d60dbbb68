"""``--from FILE``: the user's own training config → the setup fields of :func:`trainmem.api.build`.

One module per format; the format is detected from the content (not the file name):

=================  ==========================================  =============
format             detected by                                 stack
=================  ==========================================  =============
torchtune          ``model._component_: torchtune.…``           torchtune
axolotl            ``base_model`` / ``micro_batch_size``        axolotl
ms-swift           ``tuner_type`` / ``train_type``, ``model`` as a string …  ms-swift
llama-factory      ``stage`` / ``finetuning_type`` / ``cutoff_len`` …  llama-factory
litgpt             ``checkpoint_dir`` / ``train.micro_batch_size``  litgpt
accelerate         ``distributed_type`` / ``compute_environment``   accelerate
nemo               ``trainer`` + ``model.tensor_model_parallel_size``  megatron
hf / trl           ``per_device_train_batch_size``, ``output_dir`` …  hf-trainer
deepspeed          ``zero_optimization``, ``train_micro_batch_size_per_gpu`` …  deepspeed
torchtitan         TOML with ``[training]`` / ``[parallelism]`` / ``[job]``  torchtitan
megatron           text with ``--micro-batch-size`` / ``--tensor-model-parallel-size`` …  megatron
=================  ==========================================  =============

Each reader returns the fields it read plus ``stack``; the stack's shipped defaults (``--stack``) fill what the file
and the command line leave unset. Merge order (:func:`merge_fields`): command-line flags > file values (including the
framework's defaults for keys the file leaves out, which the framework's own loader would apply) > stack defaults >
trainmem defaults. ``FileSetup.notes()`` are the assumption lines: what came from the file, from the framework's
defaults, and every key ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmem.errors import ConfigError
from trainmem.frameworks.readers._base import FileSetup, Reading, load_text, parse_mapping, shown

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec

__all__ = ["FileSetup", "read_config", "merge_fields", "file_setup", "FORMATS", "FLAGS"]

FORMATS = ("torchtune", "axolotl", "llama-factory", "litgpt", "accelerate", "nemo", "hf", "deepspeed", "torchtitan",
           "megatron", "ms-swift")
#: The command-line flag of each setup field (for the error lines).
FLAGS = {"recompute": "--recompute", "grad_accum": "--grad-accum", "dp": "--dp/--gpus", "stage_layers": "--stage-layers",
         "optimizer_in_backward": "--optimizer-in-backward"}
_STACK = {"torchtune": "torchtune", "axolotl": "axolotl", "llama-factory": "llama-factory", "litgpt": "litgpt",
          "accelerate": "accelerate", "nemo": "megatron", "hf": "hf-trainer", "trl": "hf-trainer",
          "deepspeed": "deepspeed", "torchtitan": "torchtitan", "megatron": "megatron", "ms-swift": "ms-swift"}
_UNKNOWN = ("not a config trainmem reads: axolotl, LLaMA-Factory, torchtune, litgpt, HF TrainingArguments / TRL, "
            "DeepSpeed, Accelerate, torchtitan, Megatron-LM arguments or NeMo YAML")


def read_config(path: str) -> FileSetup:
    """The setup ``path`` states (ConfigError, one line, for an unreadable file, an unknown format or a value
    trainmem cannot express)."""
    text = load_text(path)
    base = Path(path).expanduser().resolve().parent
    syntax = _syntax(text, path)
    if syntax == "args":
        from trainmem.frameworks.readers.megatron import read_megatron_args
        r = Reading(path, "megatron", "megatron", {})
        read_megatron_args(r, text)
        return _done(r)
    data = parse_mapping(text, path, syntax)
    fmt = _detect(data, syntax)
    if fmt is None:
        raise ConfigError(f"--from {shown(path)}: {_UNKNOWN}")
    r = Reading(path, "trl" if fmt == "hf" and _trl(data) else fmt, _STACK[fmt], data,
                depth=2 if fmt in ("torchtitan", "nemo", "torchtune", "litgpt") else 1)
    _dispatch(fmt, r, base, text)
    return _done(r)


def _done(r: Reading) -> FileSetup:
    out = r.finish()
    for fld, why in out.blocked.items():
        if fld in out.fields:
            del out.fields[fld]
    return out


def _trl(data: dict) -> bool:
    from trainmem.frameworks.readers.hf import is_trl
    return is_trl(data)


def _syntax(text: str, path: str) -> str:
    s = text.lstrip()
    suffix = Path(path).suffix.lower()
    if s.startswith("{") or suffix == ".json":
        return "json"
    if suffix == ".toml" or (s.startswith("[") and "=" in text and ":" not in s.split("\n", 1)[0]):
        return "toml"
    from trainmem.frameworks.readers.megatron import is_megatron_text
    if suffix in (".sh", ".args", ".txt") or (is_megatron_text(text) and s.startswith(("#!", "--"))):
        return "args"
    return "yaml"


def _detect(data: dict, syntax: str) -> str | None:
    from trainmem.frameworks.readers import (accelerate, axolotl, deepspeed, hf, litgpt, llama_factory, megatron,
                                             ms_swift, torchtitan, torchtune)
    if syntax == "toml":
        return "torchtitan" if torchtitan.is_torchtitan(data) else None
    checks = (("torchtune", torchtune.is_torchtune), ("nemo", megatron.is_nemo), ("axolotl", axolotl.is_axolotl),
              ("accelerate", accelerate.is_accelerate), ("litgpt", litgpt.is_litgpt), ("ms-swift", ms_swift.is_ms_swift),
              ("llama-factory", llama_factory.is_llama_factory), ("deepspeed", deepspeed.is_deepspeed),
              ("hf", hf.is_hf))
    for name, test in checks:
        if test(data):
            return name
    return None


def _dispatch(fmt: str, r: Reading, base: Path, text: str) -> None:
    from trainmem.frameworks.readers import (accelerate, axolotl, deepspeed, hf, litgpt, llama_factory, megatron,
                                             ms_swift, torchtitan, torchtune)
    if fmt == "torchtune":
        torchtune.read_torchtune(r, text)
    elif fmt == "axolotl":
        axolotl.read_axolotl(r, base)
    elif fmt == "llama-factory":
        llama_factory.read_llama_factory(r, base)
    elif fmt == "ms-swift":
        ms_swift.read_ms_swift(r, base)
    elif fmt == "litgpt":
        litgpt.read_litgpt(r, base)
    elif fmt == "accelerate":
        accelerate.read_accelerate(r, base)
    elif fmt == "nemo":
        megatron.read_nemo(r)
    elif fmt == "hf":
        hf.read_hf(r, base)
    elif fmt == "deepspeed":
        deepspeed.read_deepspeed(r)
    else:
        torchtitan.read_torchtitan(r)


def merge_fields(file: FileSetup, cli: dict[str, Any], model: "str | ModelSpec | None" = None) -> dict[str, Any]:
    """The setup fields of a run: the command line's set values (not None) over the file's. A file value trainmem
    cannot express (``file.blocked``) is refused unless the command line gives that field. LoRA targets the file
    gives as a regex (``file.lora_regex``) are matched on ``model`` (a reference or, from the Python API, the
    resolved spec of a config dict / live module; else the file's), unless the command line gives
    ``lora_targets``."""
    given = {k: v for k, v in cli.items() if v is not None}
    for fld, why in file.blocked.items():
        if fld not in given:
            flag = FLAGS.get(fld, "--" + fld.replace("_", "-"))
            raise ConfigError(f"--from {shown(file.path)}: {why}; give {flag} to choose")
    out = {**file.fields, **given}
    if file.lora_regex is not None and "lora_targets" not in given:
        from trainmem.frameworks.readers.peft_regex import resolve_regex
        out["lora_targets"] = resolve_regex(file, model or file.model)
    return out


def file_setup(path: str, cli: dict[str, Any], model: str | None,
               model_required: bool = True) -> tuple[dict[str, Any], str | None, FileSetup]:
    """``--from FILE`` as every command reads it (estimate, plan's layout aside, doctor ``--from`` / ``--config``):
    (setup fields: the command line's set values over the file's, with the file's assumption lines as ``notes``;
    the model: ``model`` when given, else the one the file names; the file read). A model given that differs from
    the file's is noted; no model at all is refused when ``model_required``."""
    file = read_config(path)
    fields = merge_fields(file, cli, model)
    notes = file.notes()
    if model is None:
        if file.model is None and model_required:
            raise ConfigError(f"--from {path}: {file.model_error or 'the file names no model'}; give MODEL")
        model = file.model
    elif file.model is not None and file.model != model:
        notes.append(f"model {model}: given on the command line, not the file's {file.model}")
    fields["notes"] = tuple(notes)
    return fields, model, file


#: File precision (a setup recipe) → ``trainmem plan --precision`` (a family the planner gives each engine, or a recipe
#: it keeps as is).
_PLAN_PRECISION = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "amp-bf16": "amp-bf16",
                   "amp-fp16": "amp-fp16", "mixed-bf16": "mixed-bf16", "mixed-fp16": "mixed-fp16"}
_LAYOUT = ("engine", "gpus", "dp", "tp", "pp", "cp", "ep", "vpp", "zero", "offload", "recompute", "micro_batch",
           "grad_accum", "sp", "stage_layers", "recompute_layers")


def plan_inputs(path: str, model: str | None, seq_len: int | None, precision: str | None, global_batch: int,
                keys: tuple[str, ...], cli: dict[str, Any] | None = None,
                ) -> tuple[str, int | None, str | None, int, dict[str, Any], list[str]]:
    """``trainmem plan --from FILE``: (model, seq_len, precision, global_batch, extra, notes) with what the command
    line left unset taken from the file: its model, sequence length, precision, global batch (micro-batch ×
    accumulation × data-parallel degree, when the file gives its world size) and the recipe fields the planner
    keeps (``keys``: trainmem.python_api.PLAN_EXTRA_KEYS; optimizer, attention, LoRA, ...) and ``stack``. The file's
    layout (engine, degrees, ZeRO, recompute, micro-batch) is what the planner searches; the notes say so.
    ``seq_len`` and ``cli`` (the other setup fields the command line gives; None: not given) are merged over the
    file as :func:`merge_fields` does for estimate: a value the file cannot express (ms-swift without
    ``max_length``) is refused only when the command line does not give it, given LoRA targets win over a regex."""
    file = read_config(path)
    fields = merge_fields(file, {**(cli or {}), "seq_len": seq_len}, model)
    notes = file.notes()
    if model is None:
        if file.model is None:
            raise ConfigError(f"--from {shown(path)}: {file.model_error or 'the file names no model'}; give MODEL")
        model = file.model
    if seq_len is None and fields.get("seq_len") is not None:
        seq_len = int(fields["seq_len"])
    if precision is None and fields.get("precision") in _PLAN_PRECISION:
        precision = _PLAN_PRECISION[str(fields["precision"])]
    if global_batch == 0 and fields.get("gpus"):
        degrees = 1
        for k in ("tp", "pp", "cp"):
            degrees *= int(fields.get(k) or 1)
        dp = int(fields.get("dp") or int(fields["gpus"]) // degrees)
        global_batch = int(fields.get("micro_batch") or 1) * int(fields.get("grad_accum") or 1) * dp
        notes.append(f"global batch {global_batch}: the file's micro-batch × accumulation × dp {dp}")
    out: dict[str, Any] = {"stack": file.stack}
    out.update({k: fields[k] for k in keys if fields.get(k) not in (None, False)})
    searched = [k for k in _LAYOUT if k in file.fields]
    if searched:
        notes.append(f"plan searches what the file fixes ({', '.join(searched)}); pin it with --fix")
    return model, seq_len, precision, global_batch, out, notes
