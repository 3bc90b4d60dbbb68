"""Megatron-DeepSpeed (trainmem.perf.deepspeed_pipe) by hand: the TrainSchedule replay behind the
critical-path transfer count, each formula, and the step parts of a small setup."""

from __future__ import annotations

import pytest

from trainmem.model.resolve import resolve_model
from trainmem.perf import deepspeed_pipe as dsp
from trainmem.perf import grad_sync_seconds, step_time
from trainmem.perf.collectives import allgather_seconds, allreduce_seconds, p2p_seconds, span
from trainmem.perf.device import device_of
from trainmem.perf.kernels import pointwise_seconds
from trainmem.perf.step import _entry
from trainmem.setup import make_setup
from tests.perf._fixtures import IB, NVLINK, group


def _micro_batch(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """DeepSpeed ``TrainSchedule._step_to_micro_batch`` (deepspeed/runtime/pipe/schedule.py, unchanged from
    v0.6.4 to 0.19.5): (micro-batch, is_forward) of ``stage`` at ``step``."""
    if step % 2 == stage % 2:  # forward steps: even/even and odd/odd
        return (step - stage % 2) // 2 - stage // 2, True
    if step % 2 == 0:  # even step, odd stage
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def _commands(m: int, stages: int, stage: int) -> list[str]:
    """The instruction stream ``TrainSchedule.steps`` yields for one stage (loads and the final reductions
    left out: they take no time here)."""
    out, prev = [], -1
    for step in range(2 * (m + stages - 1)):
        j, fwd = _micro_batch(step, stage, stages)
        ok_j, ok_prev = 0 <= j < m, 0 <= prev < m
        if fwd:
            out += (["SendGrad"] if ok_prev and stage > 0 else []) + (["RecvActivation"] if ok_j and stage > 0 else [])
        else:
            out += (["RecvGrad"] if ok_j and stage < stages - 1 else []) + \
                   (["SendActivation"] if ok_prev and stage < stages - 1 else [])
        if ok_j:
            out.append("ForwardPass" if fwd else "BackwardPass")
        prev = j
    return out


_PEER = {"SendActivation": (1, "RecvActivation"), "RecvActivation": (-1, "SendActivation"),
         "SendGrad": (-1, "RecvGrad"), "RecvGrad": (1, "SendGrad")}


def _replay(m: int, stages: int, t_f: float, t_b: float, t_x: float) -> float:
    """Batch time with every send/recv blocking both ends (p2p.send/recv are synchronous): a transfer starts
    when both stages reach it and takes t_x on both."""
    prog = [_commands(m, stages, s) for s in range(stages)]
    pos, clock = [0] * stages, [0.0] * stages
    moved = True
    while moved:
        moved = False
        for s in range(stages):
            while pos[s] < len(prog[s]):
                op = prog[s][pos[s]]
                if op in _PEER:
                    d, want = _PEER[op]
                    q = s + d
                    if pos[q] >= len(prog[q]) or prog[q][pos[q]] != want:
                        break
                    clock[s] = clock[q] = max(clock[s], clock[q]) + t_x
                    pos[q] += 1
                else:
                    clock[s] += t_f if op == "ForwardPass" else t_b
                pos[s] += 1
                moved = True
    assert pos == [len(p) for p in prog], "the replay deadlocked"
    return max(clock)


@pytest.mark.parametrize("m,p", [(8, 2), (3, 3), (16, 4), (10, 5), (64, 8), (128, 12), (240, 35)])
def test_train_schedule_is_1f1b_plus_the_blocking_transfers(m, p):
    """Without communication DeepSpeed's schedule is 1F1B, (m + p − 1)·(t_f + t_b); each blocking transfer on
    the critical path adds t_x: 4·m + 2·(p − 4) of them (2·m with two stages), whatever t_f and t_b."""
    for t_f, t_b in ((1.0, 3.0), (1.0, 1.0)):
        base = _replay(m, p, t_f, t_b, 0.0)
        assert base == pytest.approx((m + p - 1) * (t_f + t_b))
        extra = (_replay(m, p, t_f, t_b, 1e-3) - base) / 1e-3
        assert extra == pytest.approx(dsp.ds_pipe_critical_transfers(m, p), abs=1e-6)


def test_formulas_by_hand():
    assert [dsp.ds_pipe_transfers_per_microbatch(p) for p in (1, 2, 3, 12)] == [0, 2, 4, 4]
    assert dsp.ds_pipe_critical_transfers(128, 12) == 528 and dsp.ds_pipe_critical_transfers(240, 35) == 1022
    assert dsp.ds_pipe_critical_transfers(64, 2) == 128 and dsp.ds_pipe_critical_transfers(64, 1) == 0
    assert [dsp.ds_pipe_restores_per_microbatch(p, t) for p, t in ((12, 4), (2, 4), (12, 1), (1, 4))] == [3, 2, 0, 0]
    assert dsp.ds_pipe_schedule_slots(128, 12) == 139
    # BLOOM, 2 × 2048 tokens, h 14336, bf16, tp 4: 29.4 MB per transfer; a restore touches 3 full tensors
    assert dsp.ds_pipe_partition_bytes(4096, 14336, 2, 4) == 4096 * 14336 * 2 / 4 == 29_360_128
    assert dsp.ds_pipe_restore_hbm_bytes(4096, 14336, 2) == 3 * 117_440_512
    assert dsp.ds_pipe_comm_seconds(528, 0.01, 139, 3, 0.002) == pytest.approx(5.28 + 0.834)
    # update_hp_grads: 18 B per parameter; 1e9 parameters at 2 TB/s → 9 ms
    assert dsp.bf16_accumulate_seconds(1e9, 2e12) == pytest.approx(9e-3)
    assert dsp.bf16_grad_reduce_hbm_bytes(1e9) == 28e9
    # BLOOM's tied embedding on one TP rank of four: fp32, 62720 × 14336
    assert dsp.tied_embedding_grad_bytes(250880, 14336, 4) == 4 * 62720 * 14336


GPT2 = resolve_model("gpt2")  # tied embeddings, 12 layers


def test_step_parts_of_a_megatron_deepspeed_setup():
    """tp 2, pp 4, dp 2 on 2 nodes of 8: PP ranks stride tp·dp = 4, so stage boundaries cross nodes (IB); DP
    ranks stride 2 inside a node (NVLink); the first and last stage sit 12 ranks apart (IB)."""
    kw = dict(engine="megatron", gpus=16, tp=2, pp=4, micro_batch=1, grad_accum=8, seq_len=1024, zero=1)
    s = make_setup(**kw, megatron_deepspeed=True)
    g = group(count=16)
    t = step_time(GPT2, s, g)
    base = step_time(GPT2, make_setup(**kw), g)
    hbm = device_of(g.gpu).hbm_bytes_per_s
    hop = p2p_seconds(1024 * 768 * 2 / 2, IB)
    assert hop == pytest.approx(786432 / 40e9 + 10e-6)
    restore = (allgather_seconds(1024 * 768 * 2, span(2, 1, 8), NVLINK, IB)
               + pointwise_seconds(3 * 1024 * 768 * 2, 2, hbm))
    slots = 8 + 4 - 1
    assert t.breakdown["pp_comm"] == pytest.approx((4 * 8 + 2 * (4 - 4)) * hop + slots * 3 * restore)
    params = float(_entry(GPT2, s, g).counts[4])  # the rank's trainable parameters (first stage)
    assert t.breakdown["optimizer"] == pytest.approx(base.breakdown["optimizer"] + slots * 18 * params / hbm)
    dp = span(2, 2, 8)
    expected_dp = (allreduce_seconds(2 * params, dp, NVLINK, IB) + pointwise_seconds(28 * params, 4, hbm)
                   + allgather_seconds(2 * params, dp, NVLINK, IB)
                   + allreduce_seconds(4 * (50257 // 2) * 768, span(2, 12, 8), NVLINK, IB))
    assert t.breakdown["dp_comm"] == pytest.approx(expected_dp)
    assert grad_sync_seconds(GPT2, s, g) == pytest.approx(expected_dp)
    # same compute, recompute and bubble as Megatron's own 1F1B; the step parts still sum to the step
    for k in ("compute", "recompute", "tp_comm", "bubble"):
        assert t.breakdown[k] == pytest.approx(base.breakdown[k])
    assert sum(t.breakdown.values()) == pytest.approx(t.step_seconds)
    assert any("PipelineEngine" in n for n in t.notes)


def test_fp16_has_no_fp32_accumulation_and_the_knob_needs_a_pipeline():
    kw = dict(engine="megatron", gpus=16, tp=2, pp=4, micro_batch=1, grad_accum=8, seq_len=1024, zero=1,
              precision="mixed-fp16")
    g = group(count=16)
    t, base = step_time(GPT2, make_setup(**kw, megatron_deepspeed=True), g), step_time(GPT2, make_setup(**kw), g)
    assert t.breakdown["optimizer"] == pytest.approx(base.breakdown["optimizer"])
    with pytest.raises(Exception, match="--pp > 1"):
        make_setup(engine="megatron", gpus=8, tp=8, megatron_deepspeed=True)
