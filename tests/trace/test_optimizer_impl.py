"""``--optimizer-impl fused`` (torch's fused AdamW/Adam/SGD kernels: HF Trainer's ``adamw_torch_fused``
with torch >= 2.8, torchtitan's ``implementation = "fused"``): no list-wide temporary at the step, checked
against a trace that runs ``torch.optim.AdamW(fused=True)``, and by hand against foreach."""

from __future__ import annotations

import pytest

from tests.memory.tiny_configs import TINY
from trainmem.errors import ConfigError
from trainmem.memory import estimate
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

# Full recompute and a short sequence: the foreach step's temporary is the peak.
SMALL_ACT = dict(precision="bf16", seq_len=64, micro_batch=1, recompute="full")


def _spec(fam: str = "llama-gqa"):  # noqa: ANN202
    return spec_from_hf_config(TINY[fam], name=fam)


def test_fused_drops_the_foreach_temporary_by_hand() -> None:
    spec = _spec()
    foreach = estimate(spec, make_setup(**SMALL_ACT))
    fused = estimate(spec, make_setup(optimizer_impl="fused", **SMALL_ACT))
    assert foreach.peak_phase.startswith("optimizer")
    # _multi_tensor_adamw: _foreach_sqrt(exp_avg_sqs) = one bf16 copy of every trainable element, the
    # foreach peak's temporary; fused has none, so its step is below the backward peak
    assert foreach.breakdown_at_peak_bytes["temporaries"] >= 2 * spec.n_params
    assert foreach.peak_allocated_bytes - fused.peak_allocated_bytes > 0.5 * 2 * spec.n_params
    assert fused.breakdown_at_peak_bytes["optimizer_states"] == foreach.breakdown_at_peak_bytes["optimizer_states"]
    assert any("fused=True" in a for a in fused.assumptions)


@pytest.mark.parametrize("fields,needle", [
    (dict(engine="deepspeed", optimizer_impl="fused"), "runs its own fused optimizer"),
    (dict(engine="megatron", optimizer_impl="fused"), "runs its own fused optimizer"),
    (dict(optimizer="adafactor", optimizer_impl="fused"), "not adafactor"),
    (dict(optimizer="adamw-8bit", optimizer_impl="fused"), "not adamw-8bit"),
    (dict(optimizer_impl="apex"), "'foreach' or 'fused'"),
])
def test_fused_refused_where_no_such_kernel(fields: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        make_setup(**fields)


@pytest.mark.parametrize("fam,kw", [
    ("llama-gqa", dict(SMALL_ACT, optimizer_impl="fused")),
    ("qwen2", dict(precision="bf16", seq_len=64, micro_batch=2, recompute="full", optimizer_impl="fused")),
    ("llama-gqa", dict(precision="bf16", seq_len=128, micro_batch=2, engine="fsdp2", gpus=4, optimizer="adam",
                       optimizer_impl="fused")),
])
def test_fused_estimate_matches_trace(fam: str, kw: dict) -> None:
    pytest.importorskip("torch")
    from trainmem.trace.compare import compare
    cmp = compare(_spec(fam), make_setup(**kw))
    assert abs(cmp.peak_error) < 0.01, cmp.to_dict()
