"""One pipeline stage traced (trace/pipeline.py: the stage's slice of the real model, 1F1B micro-batches in
flight, the received input / output gradient) against the estimator's most loaded stage."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compare import compare  # noqa: E402

CASES = [
    (dict(engine="fsdp2", gpus=2, pp=2, grad_accum=4, precision="bf16", seq_len=256, micro_batch=2), 0.01),
    (dict(engine="fsdp2", gpus=4, pp=2, grad_accum=4, precision="amp-bf16", seq_len=256, micro_batch=2), 0.01),
    (dict(engine="fsdp2", gpus=4, pp=4, grad_accum=8, precision="bf16", seq_len=256, micro_batch=2), 0.01),
    (dict(engine="fsdp2", gpus=8, pp=2, grad_accum=2, precision="bf16", seq_len=512, micro_batch=2, zero=3), 0.01),
    # the last stage peaks (one micro-batch): +2.1 % on this toy, whose LM head is a large share of the
    # stage; the same path on Qwen2.5-0.5B (docs/accuracy.md) is within 0.2 %
    (dict(engine="fsdp2", gpus=2, pp=2, grad_accum=1, precision="bf16", seq_len=256, micro_batch=2), 0.025),
    # Known residual: under full recompute the trace keeps the stage's other unit gathered during the
    # recomputed layer's backward of the second micro-batch (one unit of parameters, -3.5 % on this
    # 4-layer toy); not modelled yet.
    (dict(engine="fsdp2", gpus=2, pp=2, grad_accum=4, precision="bf16", seq_len=256, micro_batch=2,
          recompute="full"), 0.04),
]


@pytest.mark.parametrize("kw,tol", CASES, ids=[f"pp{k['pp']}-ga{k['grad_accum']}-{k['precision']}-"
                                              f"{k.get('recompute', 'none')}-g{k['gpus']}" for k, _ in CASES])
def test_pipeline_stage_estimate_matches_trace(kw: dict, tol: float) -> None:
    spec = spec_from_hf_config({**TINY["llama-gqa"], "num_hidden_layers": 4}, name="llama-gqa-4")
    cmp = compare(spec, make_setup(**kw))
    assert abs(cmp.peak_error) < tol, cmp.to_dict()
    assert any(n.startswith("pipeline: stage") for n in cmp.trace.notes)
