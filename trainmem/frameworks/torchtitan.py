"""torchtitan 0.2.2 as it ships: ``torchtitan/config/job_config.py`` defaults (``tests/frameworks`` reads
``JobConfig()`` from the installed package)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Run, Stack

__all__ = ["STACK", "every_second_layer"]

_J = "torchtitan 0.2.2 torchtitan/config/job_config.py"


def every_second_layer(run: Run) -> int:
    """Layers torchtitan's layer SAC checkpoints per pipeline stage: ``selective_ac_option="2"`` wraps every
    second block (torchtitan/distributed/activation_checkpoint.py ``_apply_layer_sac``: a counter from 1,
    ``count % 2 == 0``), floor(n/2) of the stage's n; trainmem's block recompute takes as many (the first ones:
    the same saved bytes for alike layers)."""
    pp = int(run.fields.get("pp") or 1)
    return (run.num_layers // pp) // 2


STACK = Stack(
    name="torchtitan",
    release="torchtitan 0.2.2",
    engines=("fsdp2",),
    defaults=(
        Default(field="engine", value="fsdp2", source="torchtitan 0.2.2 models/llama3/infra/parallelize.py apply_fsdp"),
        Default(field="precision", value="amp-bf16", engines=("fsdp2",),
                source=f"{_J} mixed_precision_param='bfloat16' mixed_precision_reduce='float32' (fp32 sharded "
                       "parameters, MixedPrecisionPolicy)"),
        Default(field="optimizer", value="adamw", source=f"{_J} Optimizer.name='AdamW'"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"),
                source=f"{_J} Optimizer.implementation='fused'"),
        Default(field="recompute", value="full", source=f"{_J} ActivationCheckpoint.mode='selective' "
                                                        "selective_ac_option='2'"),
        Default(field="recompute_layers", value=every_second_layer,
                source="torchtitan 0.2.2 torchtitan/distributed/activation_checkpoint.py _apply_layer_sac "
                       "(count % 2 == 0)"),
        Default(field="loss", value="hf", source="torchtitan 0.2.2 components/loss.py cross_entropy_loss "
                                                 "(pred.float())"),
        Default(field="loop", value="trainer", source="torchtitan 0.2.2 train.py forward_backward_step: del pred"),
        Default(field="seq_len", value=2048, source=f"{_J} Training.seq_len=2048"),
        Default(field="micro_batch", value=8, source=f"{_J} Training.local_batch_size=8"),
        Default(field="compile", value=False, source=f"{_J} Compile.enable=False"),
        Default(field="expandable_segments", value=True,
                source="torchtitan v0.2.2 run_train.sh PYTORCH_ALLOC_CONF=expandable_segments:True"),
    ),
    notes=(
        "every second block is checkpointed in torchtitan; trainmem checkpoints the first half of each stage "
        "(--recompute-layers), the same saved bytes for alike layers",
    ),
)
