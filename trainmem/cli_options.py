"""The setup flags shared by ``estimate``, ``explain`` and ``trace`` (a contract: keep the names stable).

Each is an ``Annotated`` type, so every command declares the very same option; :func:`setup_fields`
turns a command's arguments into :func:`trainmem.setup.make_setup` fields (unset flags fall back to the
defaults table).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

__all__ = ["Model", "SeqLen", "MicroBatch", "GradAccum", "Precision", "OptimizerOpt", "Recompute", "Attn",
           "Engine", "Gpus", "Dp", "Tp", "Pp", "Cp", "Ep", "Vpp", "Sp", "Zero", "Offload", "LoraRank",
           "LoraTargets", "Qlora", "Gpu", "Json", "Lang", "SETUP_FIELDS", "setup_fields"]

Model = Annotated[str, typer.Argument(help="catalog name (trainmem models), path to config.json, or a size like 7B")]
SeqLen = Annotated[Optional[int], typer.Option("--seq-len", help="tokens per sequence [2048]")]
MicroBatch = Annotated[Optional[int], typer.Option("--micro-batch", help="sequences per micro-batch per rank [1]")]
GradAccum = Annotated[Optional[int], typer.Option("--grad-accum", help="micro-batches per optimizer step [1]")]
Precision = Annotated[Optional[str], typer.Option(
    "--precision", help="fp32|bf16|fp16|amp-bf16|amp-fp16|mixed-bf16|mixed-fp16")]
OptimizerOpt = Annotated[Optional[str], typer.Option(
    "--optimizer", help="adamw|adam|sgd|sgd-momentum|adamw-8bit|adafactor|lion")]
Recompute = Annotated[Optional[str], typer.Option("--recompute", help="none|selective|full")]
Attn = Annotated[Optional[str], typer.Option("--attn", help="sdpa|flash|eager")]
Engine = Annotated[Optional[str], typer.Option("--engine", help="torch|fsdp2|deepspeed|megatron")]
Gpus = Annotated[Optional[int], typer.Option("--gpus", help="world size [1]")]
Dp = Annotated[Optional[int], typer.Option("--dp", help="data-parallel degree [gpus/(tp·pp·cp)]")]
Tp = Annotated[Optional[int], typer.Option("--tp", help="tensor-parallel degree [1]")]
Pp = Annotated[Optional[int], typer.Option("--pp", help="pipeline-parallel degree [1]")]
Cp = Annotated[Optional[int], typer.Option("--cp", help="context-parallel degree [1]")]
Ep = Annotated[Optional[int], typer.Option("--ep", help="expert-parallel degree [1]")]
Vpp = Annotated[Optional[int], typer.Option("--vpp", help="virtual pipeline chunks per stage [1]")]
Sp = Annotated[bool, typer.Option("--sp", help="Megatron sequence parallelism")]
Zero = Annotated[Optional[int], typer.Option(
    "--zero", help="0-3 (deepspeed), 2|3 (fsdp2), 1 = distributed optimizer (megatron)")]
Offload = Annotated[Optional[str], typer.Option("--offload", help="none|optimizer|optimizer+params")]
LoraRank = Annotated[Optional[int], typer.Option("--lora-rank", help="LoRA rank; 0 = full fine-tuning")]
LoraTargets = Annotated[Optional[str], typer.Option("--lora-targets", help="comma list, or all-linear")]
Qlora = Annotated[bool, typer.Option("--qlora", help="NF4 base weights (needs --lora-rank)")]
Gpu = Annotated[Optional[str], typer.Option("--gpu", help="GPU name [H100-SXM-80G] (trainmem gpus)")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object")]
Lang = Annotated[str, typer.Option("--lang", help="en|zh")]

#: The command arguments that are TrainingSetup fields.
SETUP_FIELDS = ("seq_len", "micro_batch", "grad_accum", "precision", "optimizer", "recompute", "attn", "engine",
                "gpus", "dp", "tp", "pp", "cp", "ep", "vpp", "sp", "zero", "offload", "lora_rank", "lora_targets",
                "qlora", "gpu")


def setup_fields(args: dict) -> dict:
    """The setup fields of a command's arguments; unset boolean flags are left to the defaults."""
    out = {k: args[k] for k in SETUP_FIELDS if k in args}
    for flag in ("sp", "qlora"):
        if flag in out and not out[flag]:
            out[flag] = None
    return out
