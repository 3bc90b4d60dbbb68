"""Megatron-DeepSpeed: Megatron-LM's model code run by DeepSpeed's ``PipelineEngine`` (BLOOM, MT-NLG).

What the engine does, as read in DeepSpeed v0.6.4 / v0.7.0 (2022: the BLOOM run's era; ``bf16+pipeline
parallelism`` arrived in v0.6.2, PR #1801) — ``deepspeed/runtime/pipe/schedule.py``, ``pipe/engine.py``,
``pipe/p2p.py``, ``runtime/bf16_optimizer.py``, ``runtime/engine.py``, ``runtime/utils.py``:

- Schedule. ``TrainSchedule.steps`` runs 2·(m + p − 1) steps, each a forward or a backward of one
  micro-batch: stage s runs the forward of micro-batch j at step 2j + s and its backward at step 2j + 2p − 1 − s.
  With no communication that is 1F1B: (m + p − 1)·(t_f + t_b) per batch, the same bubble as Megatron's.
- Blocking sends. A forward step starts with ``SendGrad`` (to s − 1) and ``RecvActivation`` (from s − 1), a
  backward step with ``RecvGrad`` (from s + 1) and ``SendActivation`` (to s + 1); ``p2p.send``/``p2p.recv``
  are synchronous ``dist.send``/``dist.recv`` (``dist.broadcast`` in a two-rank group before torch 1.8), on the
  compute stream's critical path on both ends. An interior stage takes part in 4 transfers per micro-batch,
  an end stage in 2. A discrete-event replay of the schedule with blocking pairs (tests/perf/
  test_deepspeed_pipe.py; the same replay of the real ``TrainSchedule`` of DeepSpeed 0.19.5, whose schedule
  is unchanged since v0.6) gives exactly (m + p − 1)·(t_f + t_b) + (4·m + 2·(p − 4))·t_x for p ≥ 3, and
  2·m·t_x for two stages, whatever t_f, t_b and m: 4 transfers per micro-batch on the critical path, plus 2
  per stage beyond the fourth along the warm-up and cool-down chain.
- Partitioned activations. With tensor parallelism ``is_pipe_partitioned = is_grad_partitioned =
  is_model_parallel``: each TP rank sends 1/tp of the b·s·h activation (``PartitionedTensor``) and the receiver
  rebuilds it with ``PartitionedTensor.full()`` — zeros, an all-gather over the TP group, a ``clone`` (3 full
  tensors of HBM traffic). An interior stage rebuilds 3 tensors per micro-batch (its input in the forward,
  its output and the received gradient in the backward).
- BF16_Optimizer. bf16 with pipeline parallelism runs DeepSpeed's ``BF16_Optimizer`` (ZeRO stage 0 in the
  config, "it implements its own zero stage 1 equivalent": bigscience tr11-176B-ml.slurm). After every
  micro-batch's backward ``update_hp_grads`` accumulates each bf16 gradient into its fp32 copy:
  ``hp_grad.add_(lp.grad.to(float32))`` — 18 bytes of HBM traffic per parameter per micro-batch.
- After the flush. ``ReduceTiedGrads`` all-reduces the fp32 gradient of the tied word embedding between the
  first and the last stage; ``ReduceGrads`` (``_bf16_reduce_grads`` → ``buffered_allreduce_fallback``)
  all-reduces every fp32 gradient over the data-parallel group in ``communication_data_type`` (bf16 for bf16
  at ZeRO stage 0, engine.py) — flatten, cast, all-reduce, copy back, unflatten: 28 bytes of HBM traffic per
  parameter and the all-reduce, nothing overlapped (the engine turns ``enable_backward_allreduce`` off). The
  step ends with ``update_lp_params``: an all-gather of the updated bf16 parameters over the data-parallel
  group (``all_gather_dp_groups``).

Every function is one formula, pure, with its unit in its name; :mod:`trainmem.perf.step` applies them to a
``megatron`` setup with ``megatron_deepspeed`` set.
"""

from __future__ import annotations

__all__ = ["ds_pipe_transfers_per_microbatch", "ds_pipe_critical_transfers", "ds_pipe_restores_per_microbatch",
           "ds_pipe_partition_bytes", "ds_pipe_restore_hbm_bytes", "ds_pipe_schedule_slots", "ds_pipe_comm_seconds",
           "BF16_ACCUMULATE_BYTES_PER_PARAM", "bf16_accumulate_seconds", "BF16_REDUCE_BYTES_PER_PARAM",
           "bf16_grad_reduce_hbm_bytes", "tied_embedding_grad_bytes"]

#: HBM bytes per parameter of ``BF16_Optimizer.update_hp_grads`` (bf16_optimizer.py, DeepSpeed v0.6.4–v0.7.0):
#: ``lp.grad.to(float32)`` reads 2 and writes 4, ``hp_grad.add_`` reads 4 + 4 and writes 4.
BF16_ACCUMULATE_BYTES_PER_PARAM = 18.0
#: HBM bytes per parameter of ``_bf16_reduce_grads`` besides the all-reduce (engine.py ``allreduce_bucket`` /
#: ``allreduce_and_copy``): ``flatten`` of the fp32 grads (read 4, write 4), ``.to(bf16)`` (4 + 2), the copy back
#: into the flat fp32 tensor (2 + 4), the unflatten copy into the gradients (4 + 4).
BF16_REDUCE_BYTES_PER_PARAM = 28.0


def ds_pipe_transfers_per_microbatch(pp: int) -> int:
    """Blocking point-to-point transfers a stage takes part in per micro-batch (TrainSchedule): an interior
    stage exchanges an activation and a gradient with each neighbour (4); with two stages each has one
    neighbour (2); no pipeline, none."""
    if pp <= 1:
        return 0
    return 2 if pp == 2 else 4


def ds_pipe_critical_transfers(micro_batches: int, pp: int) -> int:
    """Blocking transfers on the critical path of one batch (module docstring, from a replay of TrainSchedule):
    4·m + 2·(p − 4) for p ≥ 3, 2·m for two stages, none without a pipeline."""
    if pp <= 1:
        return 0
    if pp == 2:
        return 2 * micro_batches
    return ds_pipe_transfers_per_microbatch(pp) * micro_batches + 2 * (pp - 4)


def ds_pipe_restores_per_microbatch(pp: int, tp: int) -> int:
    """``PartitionedTensor.full()`` calls of an interior stage per micro-batch (its input in
    ``_exec_forward_pass``, its output and the received gradient in ``_exec_backward_pass``); with two stages
    the busier one has 2 (the first stage: output and gradient). None without tensor parallelism (nothing is
    partitioned) or without a pipeline."""
    if pp <= 1 or tp <= 1:
        return 0
    return 2 if pp == 2 else 3


def ds_pipe_partition_bytes(tokens: int, hidden: int, act_bytes: int, tp: int) -> float:
    """Bytes of one pipeline transfer: one TP rank's 1/tp share of the tokens·hidden activation (or its
    gradient)."""
    return tokens * hidden * act_bytes / max(tp, 1)


def ds_pipe_restore_hbm_bytes(tokens: int, hidden: int, act_bytes: int) -> float:
    """HBM bytes of one ``PartitionedTensor.full()`` besides its all-gather: the zeroed full tensor (write)
    and the final ``clone()`` (read and write)."""
    return 3.0 * tokens * hidden * act_bytes


def ds_pipe_schedule_slots(micro_batches: int, pp: int) -> int:
    """Forward-plus-backward slots of one batch on the critical path: TrainSchedule's 2·(m + p − 1) steps
    pair up into m + p − 1 slots (m of work, p − 1 of bubble)."""
    return micro_batches + max(pp, 1) - 1


def ds_pipe_comm_seconds(critical_transfers: int, transfer_seconds: float, slots: int, restores_per_slot: int,
                         restore_seconds: float) -> float:
    """Seconds of pipeline communication per batch, all serialised with the compute (nothing of DeepSpeed's
    pipeline runs on a side stream): the critical-path transfers, and the partition restores inside every
    slot's forward and backward (bubble slots included, like the compute they belong to)."""
    return critical_transfers * transfer_seconds + slots * restores_per_slot * restore_seconds


def bf16_accumulate_seconds(params: float, hbm_bytes_per_s: float) -> float:
    """Seconds of one ``update_hp_grads`` over ``params`` parameters (once per micro-batch)."""
    return params * BF16_ACCUMULATE_BYTES_PER_PARAM / hbm_bytes_per_s


def bf16_grad_reduce_hbm_bytes(params: float) -> float:
    """HBM bytes of ``_bf16_reduce_grads`` besides the all-reduce itself (BF16_REDUCE_BYTES_PER_PARAM)."""
    return params * BF16_REDUCE_BYTES_PER_PARAM


def tied_embedding_grad_bytes(vocab: int, hidden: int, tp: int) -> float:
    """Bytes of the tied word-embedding gradient ``ReduceTiedGrads`` all-reduces: the fp32 ``_hp_grad`` of one
    TP rank's vocab-parallel V/tp × h shard."""
    return 4.0 * (vocab // max(tp, 1)) * hidden
