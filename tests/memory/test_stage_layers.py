"""Explicit pipeline splits (``--stage-layers``): Megatron's first/last-stage counts and its
account-for-embedding/loss split, torchtitan's split points — estimated, timed and exported as given."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.export.megatron import megatron_args
from trainmem.export.common import ExportTarget
from trainmem.memory import estimate
from trainmem.memory.estimate import candidate_stages
from trainmem.memory.states import account_split, layers_of_stage, rank_params
from trainmem.setup import make_setup


def test_account_split_of_llama_405b() -> None:
    """Megatron-Core get_num_layers_to_build: (126 + 2) units over pp 8 = 16 a rank, the first and the last
    rank one decoder layer fewer (the embedding, the loss); with vpp 8 each chunk is 2 units."""
    assert account_split(126, 8, 8) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert account_split(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert account_split(126, 4, 8) == (31, 32, 32, 31)
    assert account_split(32, 8) is None          # 34 units do not divide over 8 ranks
    assert account_split(30, 4, 2) == (7, 8, 8, 7)


def test_bad_splits_are_one_line_errors() -> None:
    with pytest.raises(ConfigError, match=r"gives 3 stages for pp\(4\)"):
        make_setup(engine="megatron", gpus=4, pp=4, stage_layers="8,8,16")
    with pytest.raises(ConfigError, match="comma-separated layer counts"):
        make_setup(engine="megatron", gpus=4, pp=4, stage_layers="8,8,x,8")
    with pytest.raises(ConfigError, match="every stage needs a layer"):
        make_setup(engine="megatron", gpus=4, pp=4, stage_layers="0,12,10,10")
    with pytest.raises(ConfigError, match=r"sums to 30, not num_layers\(32\)"):
        build("llama-3.1-8b", engine="megatron", gpus=4, pp=4, stage_layers="6,8,8,8")
    with pytest.raises(ConfigError, match=r"num_layers\(126\) is not divisible by pp\(8\) \* vpp\(8\); give the split"):
        build("llama-3.1-405b", engine="megatron", gpus=64, pp=8, vpp=8)


def test_the_split_moves_layers_and_their_parameters() -> None:
    spec, s = build("llama-3.1-8b", engine="megatron", gpus=4, pp=4, stage_layers="5,9,9,9")
    assert [len(layers_of_stage(spec, s, j)) for j in range(4)] == [5, 9, 9, 9]
    assert layers_of_stage(spec, s, 1) == range(5, 14)
    per_layer = spec.params.layers[0].total
    even = rank_params(spec, build("llama-3.1-8b", engine="megatron", gpus=4, pp=4)[1], 1)
    assert rank_params(spec, s, 1).total - even.total == per_layer   # 9 layers instead of 8


def test_an_even_split_given_explicitly_is_the_even_estimate() -> None:
    spec, even = build("qwen2.5-7b", engine="megatron", gpus=4, pp=4, grad_accum=8, seq_len=4096)
    _, given = build("qwen2.5-7b", engine="megatron", gpus=4, pp=4, grad_accum=8, seq_len=4096, stage_layers="7,7,7,7")
    assert estimate(spec, given).peak_allocated_bytes == estimate(spec, even).peak_allocated_bytes


def test_a_heavier_middle_stage_is_simulated() -> None:
    """With the first stage lightened (2 layers), stage 1 holds 14 layers and pp − 1 micro-batches in flight:
    it, not the first or the last stage, is the most loaded, and the estimate finds it."""
    spec, s = build("llama-3.1-8b", engine="megatron", gpus=4, pp=4, grad_accum=8, seq_len=4096,
                    stage_layers="2,14,8,8")
    assert candidate_stages(spec, s) == (0, 1, 3)   # stage 2 (8 layers, fewer in flight) is dominated by stage 1
    est = estimate(spec, s)
    per_stage = [estimate(spec, s, stages=(j,)).peak_allocated_bytes for j in range(4)]
    assert est.peak_allocated_bytes == max(per_stage) == per_stage[1]
    assert "most loaded stage is stage 1" in " ".join(est.assumptions)


def test_megatron_export_writes_the_split() -> None:
    target = ExportTarget(nodes=128, gpus_per_node=8, model_ref="meta-llama/Llama-3.1-405B")
    spec, s = build("llama-3.1-405b", engine="megatron", precision="fp8", gpus=1024, tp=8, pp=8, vpp=8, cp=2,
                    seq_len=8192, grad_accum=64, zero=1, sp=True, stage_layers="15,16,16,16,16,16,16,15")
    flat = [str(x) for group in megatron_args(spec, s, target) for x in group]
    assert "--account-for-embedding-in-pipeline-split" in flat and "--account-for-loss-in-pipeline-split" in flat
    assert "--decoder-first-pipeline-num-layers" not in flat
    # uneven under vpp: the chunk count, not a per-chunk layer count ((126 + 2) / 64 = 2, not 126 // 64)
    i = flat.index("--num-virtual-stages-per-pipeline-rank")
    assert flat[i + 1] == "8" and "--num-layers-per-virtual-pipeline-stage" not in flat
    spec, s = build("llama-3.1-8b", engine="megatron", gpus=4, pp=4, stage_layers="5,9,9,9")
    flat = [str(x) for group in megatron_args(spec, s, ExportTarget(model_ref="meta-llama/Llama-3.1-8B", nodes=1, gpus_per_node=4)) for x in group]
    i = flat.index("--decoder-first-pipeline-num-layers")
    assert flat[i + 1: i + 4] == ["5", "--decoder-last-pipeline-num-layers", "9"]


def test_the_step_waits_for_the_slowest_stage() -> None:
    """The last stage (with the LM head and the 128k-vocabulary loss) is the slowest; giving it 10 or 11 of the
    32 layers instead of 8 adds 2 or 3 layer-times to every micro-batch: linear in its layer count."""
    from trainmem.hardware.cluster import parse_cluster
    from trainmem.perf.step import step_time
    grp = parse_cluster("4xH100-SXM-80G").groups[0]
    kw = dict(engine="megatron", gpus=4, pp=4, grad_accum=8, seq_len=4096)
    spec, even = build("llama-3.1-8b", **kw)
    mb = {name: step_time(spec, s, grp).microbatch_seconds
          for name, s in (("8", even), ("10", build("llama-3.1-8b", stage_layers="8,8,6,10", **kw)[1]),
                          ("11", build("llama-3.1-8b", stage_layers="7,7,7,11", **kw)[1]))}
    layer = mb["11"] - mb["10"]
    assert layer > 0
    assert mb["11"] - mb["8"] == pytest.approx(3 * layer, rel=0.01)
    # a middle stage of 9 layers stays faster than the last stage of 8 + the head: the even pace holds
    assert step_time(spec, build("llama-3.1-8b", stage_layers="7,9,8,8", **kw)[1], grp).microbatch_seconds \
        == pytest.approx(mb["8"], rel=1e-9)
