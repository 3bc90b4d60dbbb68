"""Block recompute (``--recompute-layers N``: the first N layers of each pipeline stage checkpointed, the rest
keep everything — Megatron-Core ``recompute_method="block"``): its end points are the uniform setups exactly,
memory falls by one layer's saved tensors less its checkpoint per recomputed layer, the step time mixes the two
uniform stages by layer share, the exporters say what runs it, and bad combinations are one-line errors. The
estimate against the tracer is in tests/trace/test_estimate_vs_trace.py (``recompute_layers`` cases)."""

from __future__ import annotations

import pytest

from tests.export.cases import export
from tests.perf._fixtures import group
from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.export import can_export
from trainmem.memory.estimate import estimate
from trainmem.memory.plan import kept_per_layer
from trainmem.perf import microbatch_seconds

BASE = dict(precision="bf16", seq_len=2048, micro_batch=2)


def _peak(model: str, **kw: object) -> int:
    spec, s = build(model, **{**BASE, **kw})  # (kw overrides BASE)
    return estimate(spec, s).peak_allocated_bytes


@pytest.mark.parametrize("model,kw", [
    ("llama-3.2-1b", {}),
    ("qwen2.5-0.5b", dict(precision="amp-bf16")),
    ("pythia-1b", dict(engine="fsdp2", gpus=8)),
    ("llama-3.1-8b", dict(engine="megatron", gpus=8, tp=2, pp=2, precision="mixed-bf16", sp=True, grad_accum=4)),
])
def test_end_points_are_the_uniform_setups(model: str, kw: dict) -> None:
    spec, _ = build(model, **{**BASE, **kw})
    per_stage = spec.num_layers // kw.get("pp", 1)
    none, full = _peak(model, **kw), _peak(model, recompute="full", **kw)
    assert _peak(model, recompute="full", recompute_layers=0, **kw) == none
    assert _peak(model, recompute="full", recompute_layers=per_stage, **kw) == full
    assert _peak(model, recompute="full", recompute_layers=per_stage + 5, **kw) == full  # (Megatron: all of them)


def test_each_recomputed_layer_saves_its_activations_less_its_checkpoint() -> None:
    """llama-3.2-1b, bf16, 2 × 2048 tokens: a layer saves ``kept_per_layer`` bytes without recompute, its
    bf16 input (2·T·h = 16 MiB) checkpointed; the peak (the first backward) falls by the difference for every
    layer moved to the block, except that the last layer is recomputed at the start of backward, so the
    all-layers case is not one more step of the same size."""
    spec, s = build("llama-3.2-1b", **BASE)
    saved = kept_per_layer(spec, s)[0]
    ckpt = 2 * 2 * 2048 * spec.hidden_size
    _, s_full = build("llama-3.2-1b", recompute="full", **BASE)
    assert kept_per_layer(spec, s_full)[0] == ckpt == 16 * 2**20
    peaks = [_peak("llama-3.2-1b", recompute="full", recompute_layers=n) for n in range(0, 9)]
    steps = {a - b for a, b in zip(peaks, peaks[1:])}
    assert steps == {saved - ckpt}, (steps, saved - ckpt)


def test_kept_per_layer_counts_positions_within_each_stage() -> None:
    spec, s = build("llama-3.2-1b", **BASE, engine="fsdp2", gpus=4, pp=4, recompute="full", recompute_layers=1)
    kept = kept_per_layer(spec, s)
    ckpt, full = min(kept), max(kept)
    assert kept == ([ckpt] + [full] * 3) * 4


def test_step_time_mixes_the_uniform_stages_by_layer_share() -> None:
    g = group(count=8)
    spec, none = build("llama-3.1-8b", engine="megatron", gpus=8, tp=8, sp=True, seq_len=4096)
    _, full = build("llama-3.1-8b", engine="megatron", gpus=8, tp=8, sp=True, seq_len=4096, recompute="full")
    t_none, t_full = microbatch_seconds(spec, none, g), microbatch_seconds(spec, full, g)
    assert t_full > t_none * 1.2
    for n in (0, 8, 16, 32):
        _, s = build("llama-3.1-8b", engine="megatron", gpus=8, tp=8, sp=True, seq_len=4096, recompute="full",
                     recompute_layers=n)
        assert microbatch_seconds(spec, s, g) == pytest.approx(t_none + n / 32 * (t_full - t_none), rel=1e-9)


def test_megatron_exports_the_block_method() -> None:
    _, _, files = export("llama-3.1-8b", "megatron", 1, 8, engine="megatron", tp=4, pp=2, recompute="full",
                         recompute_layers=5)
    text = files["megatron_args.sh"]
    assert "--recompute-granularity full --recompute-method block --recompute-num-layers 5" in " ".join(text.split())
    assert "uniform" not in text


@pytest.mark.parametrize("exporter,fields,says", [
    ("torchtitan", dict(engine="fsdp2"), "every k-th layer"),
    ("deepspeed", dict(engine="deepspeed"), "every decoder layer"),
    ("accelerate", dict(engine="fsdp2", precision="bf16"), "every decoder layer"),
])
def test_other_exporters_say_they_cannot_run_it(exporter: str, fields: dict, says: str) -> None:
    spec, s = build("llama-3.1-8b", gpus=8, recompute="full", recompute_layers=4, **fields)
    why = can_export(s, exporter, spec)
    assert why and says in why


@pytest.mark.parametrize("fields,says", [
    (dict(recompute_layers=4), "needs --recompute full"),
    (dict(recompute="selective", recompute_layers=4), "needs --recompute full"),
    (dict(recompute="full", recompute_layers=4, engine="megatron", gpus=8, pp=2, vpp=2), "vpp"),
    (dict(recompute="full", recompute_layers=4, lora_rank=8), "LoRA"),
    (dict(recompute="full", recompute_layers=4, engine="fsdp2", gpus=4, cp=2), "context parallelism"),
    (dict(recompute="full", recompute_layers=-1), "recompute-layers"),
])
def test_bad_combinations_are_one_line_errors(fields: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        build("llama-3.1-8b", **fields)
    assert "\n" not in str(err.value)


def test_gpt_oss_is_refused() -> None:
    with pytest.raises(ConfigError, match="gpt_oss"):
        build("gpt-oss-20b", attn="eager", recompute="full", recompute_layers=4)
