"""The estimator against the tracer (its judge), on small models of several families and every traced
recipe: the peak must agree within 1 %, and the model-state categories exactly."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compare import compare  # noqa: E402

# Activation-heavy shapes (vocab 512, h 256, 3 layers), so the peak falls in forward/backward, not only
# at the optimizer step.
CASES = [
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4)),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4)),
    ("llama-gqa", dict(precision="fp32", seq_len=256, micro_batch=4, attn="eager")),
    ("llama-gqa", dict(precision="fp32", seq_len=256, micro_batch=2)),  # CUDA sdpa: math fallback
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, recompute="full")),
    ("llama-gqa", dict(precision="amp-fp16", seq_len=256, micro_batch=4, grad_accum=3)),
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=2, optimizer="sgd-momentum")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, engine="fsdp2", gpus=4)),
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4, engine="fsdp2", gpus=8, zero=2)),
    ("qwen2", dict(precision="bf16", seq_len=512, micro_batch=4, engine="fsdp2", gpus=2, grad_accum=2)),
    ("qwen3", dict(precision="amp-bf16", seq_len=512, micro_batch=2)),
    ("gemma", dict(precision="bf16", seq_len=512, micro_batch=4, recompute="full")),   # known residual, see TOL
    ("phi3", dict(precision="amp-bf16", seq_len=256, micro_batch=4)),
    ("gpt2-dropout", dict(precision="amp-bf16", seq_len=256, micro_batch=8)),         # known residual, see TOL
    ("gpt2", dict(precision="bf16", seq_len=256, micro_batch=8)),
    ("gpt_neox", dict(precision="bf16", seq_len=512, micro_batch=4, attn="eager")),
    ("gpt_neox", dict(precision="amp-bf16", seq_len=256, micro_batch=4)),
    ("mistral-window", dict(precision="bf16", seq_len=256, micro_batch=4)),
    ("falcon", dict(precision="bf16", seq_len=256, micro_batch=4)),
    ("falcon-new", dict(precision="amp-bf16", seq_len=256, micro_batch=4)),
    ("mixtral", dict(precision="bf16", seq_len=256, micro_batch=4)),
    ("qwen2_moe", dict(precision="amp-bf16", seq_len=256, micro_batch=4)),
]


# Known residuals on these 3-layer toys (each layer is a third of the model, so one misplaced
# transient shows large): Gemma's checkpoint recompute overlapping the norm backward (-3.3 %),
# GPT-2's fp32 gelu_new backward (+1.2 %).
TOL = {"gemma": 0.04, "gpt2-dropout": 0.02}


@pytest.mark.parametrize("fam,kw", CASES, ids=[f"{f}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for f, kw in CASES])
def test_estimate_matches_trace(fam: str, kw: dict) -> None:
    spec = spec_from_hf_config(TINY[fam], name=fam)
    cmp = compare(spec, make_setup(**kw))
    assert abs(cmp.peak_error) < TOL.get(fam, 0.01), cmp.to_dict()
    rows = {c: (e, t) for c, e, t, _ in cmp.rows()}
    for cat in ("parameters", "optimizer_states"):
        e, t = rows[cat]
        # one block per category here vs one 512-B-rounded tensor per parameter (and FSDP2's dim-0
        # padding of each shard) in the trace: a few KiB on these toys
        assert e == pytest.approx(t, rel=0.002, abs=16 * 1024), (cat, e, t)
