"""Optimizer in backward (torchtune ``optimizer_in_bwd: True``, torchtune/training/memory.py
``register_optim_in_bwd_hooks``): one optimizer per parameter, stepped and ``zero_grad``-ed in the parameter's
post-accumulate-grad hook, so no gradient outlives its parameter's backward. Computed by hand."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import TrainmemError
from trainmem.memory import estimate

# Llama-3.2-3B: hidden 3072, MLP 8192, vocabulary 128256, tied embeddings
H, I, V = 3072, 8192, 128256


def test_gradients_alive_are_the_tied_embedding_and_one_layer_piece() -> None:
    """bf16: the tied embedding's gradient (the head's part, 2·V·h B) waits in autograd's input buffer from the
    head's backward to the embedding's, while each layer's gradients come and go; the largest layer piece alive
    with it is the MLP's gate and up projections (2 × h × i, 2 B each)."""
    spec, s = build("llama-3.2-3b", precision="bf16", optimizer_in_backward=True)
    est = estimate(spec, s)
    want = 2 * V * H + 2 * (2 * H * I)
    assert 0 <= est.category_peak_bytes["gradients"] - want <= 4 * 512
    assert est.breakdown_at_peak_bytes["gradients"] <= want + 4 * 512
    # the plain loop holds every gradient (2 B × 3.21e9) at its optimizer step
    _, plain = build("llama-3.2-3b", precision="bf16")
    assert estimate(spec, plain).category_peak_bytes["gradients"] >= 2 * spec.n_params
    assert est.peak_allocated_bytes < estimate(spec, plain).peak_allocated_bytes


def test_the_step_itself_allocates_nothing() -> None:
    """Every parameter was stepped in the backward: ``optimizer.step()`` after it allocates nothing (the plain
    loop's foreach AdamW makes a model-sized sqrt(exp_avg_sq) copy there, 2 B × 3.21e9 in bf16)."""
    spec, s = build("llama-3.2-3b", precision="bf16", optimizer_in_backward=True)
    t = estimate(spec, s).to_dict()["timeline"]
    step = next(p for p in t if p["phase"] == "optimizer step")
    assert step["phase_max_bytes"] == step["allocated_bytes"]
    _, plain = build("llama-3.2-3b", precision="bf16")
    t = estimate(spec, plain).to_dict()["timeline"]
    step = next(p for p in t if p["phase"] == "optimizer step")
    assert step["phase_max_bytes"] - step["allocated_bytes"] >= 2 * spec.n_params


@pytest.mark.parametrize("kw, msg", [
    (dict(grad_accum=2), r"grad_accum\(2\) must be 1"),
    (dict(engine="fsdp2", gpus=2), "one GPU"),
    (dict(loss="fused-linear"), "fused-linear"),
])
def test_refusals(kw: dict, msg: str) -> None:
    with pytest.raises(TrainmemError, match=msg):
        build("llama-3.2-3b", optimizer_in_backward=True, **kw)
