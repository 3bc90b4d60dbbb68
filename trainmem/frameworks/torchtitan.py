"""torchtitan 0.2.2 as it ships: its Llama 3 8B train config (``torchtitan/models/llama3/train_configs/llama3_8b.toml``
at v0.2.2) over the ``torchtitan/config/job_config.py`` defaults (``tests/frameworks`` reads ``JobConfig()`` from the
installed package). Its 70B and 405B configs checkpoint fully (``mode = "full"``, ``local_batch_size`` 8 and 2)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_J = "torchtitan 0.2.2 torchtitan/config/job_config.py"
_T = "torchtitan v0.2.2 torchtitan/models/llama3/train_configs/llama3_8b.toml"


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
        Default(field="recompute", value="selective",
                source=f"{_T} activation_checkpoint mode = 'selective' selective_ac_option = 'op'"),
        Default(field="loss", value="hf", source="torchtitan 0.2.2 components/loss.py cross_entropy_loss "
                                                 "(pred.float())"),
        Default(field="loop", value="trainer", source="torchtitan 0.2.2 train.py forward_backward_step: del pred"),
        Default(field="seq_len", value=8192, source=f"{_T} training seq_len = 8192"),
        Default(field="micro_batch", value=1, source=f"{_T} training local_batch_size = 1"),
        Default(field="compile", value=False, source=f"{_J} Compile.enable=False"),
        Default(field="expandable_segments", value=True,
                source="torchtitan v0.2.2 run_train.sh PYTORCH_ALLOC_CONF=expandable_segments:True"),
    ),
    notes=(
        "torchtitan's op-level selective checkpointing (models/llama3/infra/parallelize.py _op_sac_save_list: "
        "matmul outputs but every second, attention, reductions saved) is counted as trainmem's selective recompute; "
        "without a config (JobConfig) it checkpoints every second block fully: --recompute full --recompute-layers N/2",
        "the 70B and 405B train configs checkpoint every block: --recompute full (local_batch_size 8 and 2)",
    ),
)
