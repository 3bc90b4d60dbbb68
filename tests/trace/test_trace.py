"""trace_step on tiny models: exact model states, trends, FSDP2 sharding, unsupported setups."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trace._specs import LLAMA_TINY, make_spec  # noqa: E402
from trainmem.errors import UnsupportedError  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace import CATEGORIES, trace_step  # noqa: E402

SPEC = make_spec(LLAMA_TINY)
# llama-tiny: every parameter tensor is a multiple of 128 floats, so 512 B rounding adds nothing.
N_PARAMS = 1024 * 128 * 2 + 2 * (4 * 128 * 128 + 3 * 128 * 256 + 2 * 128) + 128


def _trace(**kw):
    kw.setdefault("seq_len", 64)
    return trace_step(SPEC, make_setup(**kw))


def test_model_states_exact_fp32_adamw():
    # Short sequences: the peak is at optimizer.step (foreach sqrt temporary on top of the grads).
    r = _trace(precision="fp32", seq_len=32)
    assert r.n_params == N_PARAMS == r.n_trainable_params
    assert r.peak_phase == "optimizer.step"
    b = r.breakdown_at_peak_bytes
    assert b["parameters"] == 4 * N_PARAMS
    assert b["gradients"] == 4 * N_PARAMS
    assert b["optimizer_states"] == 8 * N_PARAMS
    assert b["temporaries"] >= 4 * N_PARAMS  # _foreach_sqrt(exp_avg_sq)
    assert sum(b.values()) == r.peak_allocated_bytes
    assert set(b) == set(CATEGORIES) == set(r.category_peak_bytes)
    assert r.static_bytes == r.static_bytes_after == 12 * N_PARAMS + b["other"]


def test_breakdown_sums_to_peak_and_serialises():
    seen = []
    r = trace_step(SPEC, make_setup(precision="amp-bf16", seq_len=128, grad_accum=2),
                   progress=lambda d, t, label: seen.append((d, t, label)))
    assert sum(r.breakdown_at_peak_bytes.values()) == r.peak_allocated_bytes
    assert seen[-1][0] == seen[-1][1] and len(seen) == seen[-1][1]
    assert {"forward[1]", "loss[1]", "backward[1]"} <= set(r.phase_peak_bytes)
    json.dumps(r.to_dict())
    assert max(p[1] for p in r.timeline) == r.peak_allocated_bytes


def test_full_recompute_lowers_activations():
    none = _trace(precision="bf16", seq_len=256)
    full = _trace(precision="bf16", seq_len=256, recompute="full")
    assert full.category_peak_bytes["activations"] < none.category_peak_bytes["activations"]


def test_memory_grows_with_micro_batch():
    one = _trace(precision="bf16", seq_len=128, micro_batch=1)
    two = _trace(precision="bf16", seq_len=128, micro_batch=2)
    assert two.peak_allocated_bytes > one.peak_allocated_bytes
    assert two.category_peak_bytes["activations"] > 1.8 * one.category_peak_bytes["activations"]
    assert two.static_bytes == one.static_bytes


def test_two_traces_are_identical():
    a, b = _trace(precision="amp-bf16"), _trace(precision="amp-bf16")
    da, db = a.to_dict(), b.to_dict()
    da.pop("wall_seconds"), db.pop("wall_seconds")
    assert da == db


def test_fsdp2_shards_parameters():
    one = trace_step(SPEC, make_setup(engine="fsdp2", gpus=1, precision="fp32", seq_len=64))
    four = trace_step(SPEC, make_setup(engine="fsdp2", gpus=4, precision="fp32", seq_len=64))
    # static = sharded params + Adam states, ~1/4 (dim-0 padding and 512 B rounding aside)
    assert 0.24 < four.static_bytes / one.static_bytes < 0.27
    # unsharded units in flight on top of the 1/4 shards
    assert four.category_peak_bytes["parameters"] > N_PARAMS  # > 4·N/4 bytes
    assert four.category_peak_bytes["communication_buffers"] > 0
    assert 0.24 < four.category_peak_bytes["gradients"] / (4 * N_PARAMS) < 0.27


@pytest.mark.parametrize("fields, needle", [
    ({"engine": "deepspeed"}, "deepspeed"),
    ({"gpus": 2}, "dp(2)"),
    ({"optimizer": "adamw-8bit"}, "adamw-8bit"),
    ({"lora_rank": 8, "qlora": True}, "QLoRA"),
    ({"lora_rank": 8, "engine": "fsdp2", "gpus": 2}, "LoRA with the fsdp2 engine"),
    ({"attn": "flash"}, "flash"),
    ({"recompute": "selective"}, "selective"),
    ({"engine": "fsdp2", "gpus": 2, "offload": "optimizer+params"}, "offload"),
    ({"engine": "fsdp2", "gpus": 4, "tp": 2, "pp": 2, "dp": 1}, "pp(2)"),  # (fsdp2 + tp alone is traced: test_tp_trace.py)
])
def test_unsupported_raise_one_line(fields, needle):
    with pytest.raises(UnsupportedError) as e:
        trace_step(SPEC, make_setup(**fields))
    msg = str(e.value)
    assert "\n" not in msg and needle in msg and "trainmem estimate" in msg
