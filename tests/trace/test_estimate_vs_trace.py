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
    # loop "script": the model output (logits) is held through backward
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4, loop="script")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, grad_accum=2, loop="script")),
    ("gemma", dict(precision="amp-bf16", seq_len=256, micro_batch=4, loop="script")),
    ("qwen2", dict(precision="bf16", seq_len=512, micro_batch=4, engine="fsdp2", gpus=2, loop="script")),
    ("gpt2", dict(precision="fp32", seq_len=256, micro_batch=4, loop="script")),
    # --loss chunked (torchtune CEWithChunkedOutputLoss) and fused-linear (Liger's allocations)
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4, loss="chunked")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, loss="chunked", loop="script")),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, grad_accum=2, loss="chunked", loss_chunks=4)),
    ("mistral-window", dict(precision="bf16", seq_len=256, micro_batch=4, loss="chunked")),
    ("qwen3", dict(precision="amp-bf16", seq_len=256, micro_batch=2, loss="chunked")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, loss="fused-linear")),
    ("qwen3", dict(precision="amp-bf16", seq_len=256, micro_batch=2, loss="fused-linear")),
    ("mistral-window", dict(precision="bf16", seq_len=256, micro_batch=4, loss="fused-linear")),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, grad_accum=2, loss="fused-linear")),
    # tied head (qwen2): Liger's grad_weight is the embedding's .grad; later micro-batches hold it to the end
    ("qwen2", dict(precision="amp-bf16", seq_len=256, micro_batch=4, grad_accum=2, loss="fused-linear")),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, engine="fsdp2", gpus=2, loss="fused-linear")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=256, micro_batch=4, recompute="full", loss="fused-linear")),
    # --loss fused-ce (flash-attn's cross-entropy: saved bf16 logits, a bf16 dlogits, nothing in fp32)
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4, loss="fused-ce")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, loss="fused-ce", loop="script")),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, grad_accum=2, loss="fused-ce")),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, engine="fsdp2", gpus=2, loss="fused-ce")),
    ("gpt2", dict(precision="fp32", seq_len=256, micro_batch=4, loss="fused-ce")),
    # chunked: k weight-gradient contributions summed in place; loop script; FSDP2
    ("llama-gqa", dict(precision="bf16", seq_len=256, micro_batch=4, loss="chunked", loss_chunks=16, loop="script")),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, engine="fsdp2", gpus=2, loss="chunked")),
    # block recompute: only the first N layers checkpointed (the tracer clears the others' gradient_checkpointing)
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4, recompute="full", recompute_layers=1)),
    ("llama-gqa", dict(precision="bf16", seq_len=512, micro_batch=4, recompute="full", recompute_layers=2,
                       engine="fsdp2", gpus=4)),
    ("qwen2", dict(precision="bf16", seq_len=256, micro_batch=4, recompute="full", recompute_layers=1, grad_accum=2)),
]


# Known residuals on these 3-layer toys (each layer is a third of the model, so one misplaced
# transient shows large): Gemma's checkpoint recompute overlapping the norm backward (-3.3 %),
# GPT-2's fp32 gelu_new backward (+1.2 %).
TOL = {"gpt2-dropout": 0.025}
# Cases whose estimate was within 1 % only while the estimator freed the logits at the LM head's backward
# and the trace held them to the end of backward (loop "script"): with the logits freed before backward
# (loop "trainer", now the default) or held through it in both (loop "script"), what remains is an
# over-estimate at the layer-0 backward of these 3-layer toys (fp32 SDPA math-fallback and eager
# attention backward transients, the recomputed layer-0 MLP) of 1–3 % of the step — b·s·h-sized
# terms that are a large share of a toy and a small one of a real model (docs/accuracy.md).
CASE_TOL = {
    ("llama-gqa", "fp32", "none", "sdpa"): 0.03,
    ("gpt_neox", "bf16", "none", "eager"): 0.015,
    ("gpt2", "fp32", "none", "sdpa"): 0.03,
}


# (amp + full recompute had a +2.9 % residual here until the recomputed input norm's fp32 input — the
# checkpointed input itself on an fp32 stream — stopped being counted twice: now within 0.03 %)


def _tol(fam: str, kw: dict) -> float:
    if kw.get("loss", "hf") != "hf":
        key5 = (fam, kw.get("precision"), kw.get("recompute", "none"), kw.get("attn", "sdpa"), kw["loss"])
        return CASE_TOL.get(key5, 0.01)
    key = (fam, kw.get("precision"), kw.get("recompute", "none"), kw.get("attn", "sdpa"))
    return CASE_TOL.get(key, TOL.get(fam, 0.01))


@pytest.mark.parametrize("fam,kw", CASES, ids=[f"{f}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for f, kw in CASES])
def test_estimate_matches_trace(fam: str, kw: dict) -> None:
    spec = spec_from_hf_config(TINY[fam], name=fam)
    cmp = compare(spec, make_setup(**kw))
    assert abs(cmp.peak_error) < _tol(fam, kw), cmp.to_dict()
    rows = {c: (e, t) for c, e, t, _ in cmp.rows()}
    for cat in ("parameters", "optimizer_states"):
        e, t = rows[cat]
        # one block per category here vs one 512-B-rounded tensor per parameter (and FSDP2's dim-0
        # padding of each shard) in the trace: a few KiB on these toys
        assert e == pytest.approx(t, rel=0.002, abs=16 * 1024), (cat, e, t)


def test_head_weight_gradients_are_summed_in_place() -> None:
    """A tied weight's two gradients meet in autograd's InputBuffer, which adds the second into the first in
    place on plain tensors (torch/csrc/autograd/input_buffer.cpp); fake tensors add out of place, which the
    tracer undoes (trace/step.py ``_HeadGradInPlace``): the first gradient's storage becomes the .grad and
    no third V·h buffer exists."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace.step import _HeadGradInPlace
    from trainmem.trace.tracker import StorageTracker

    size = 1024 * 1024 * 4
    peaks = {}
    for emulate in (False, True):
        with FakeTensorMode():
            tr = StorageTracker()
            with tr:
                mode = _HeadGradInPlace(lambda: "backward[0]")
                with mode:
                    w = torch.nn.Parameter(torch.zeros(1024, 1024))
                    if emulate:
                        mode.shapes.add(tuple(w.shape))
                    e = torch.nn.functional.embedding(torch.randint(0, 1024, (8,)), w)
                    loss = torch.nn.functional.linear(e * 2, w).sum()
                    tr.start_recording("backward[0]")
                    loss.backward()
                    tr.stop_recording()
            big = [lf for lf in tr.lives if lf.nbytes >= size and lf.phase == "backward[0]"]
            peaks[emulate] = (tr.peak // size, len(big), mode.calls)
    assert peaks[False] == (4, 3, 0)   # w, the head's gradient, the embedding's, their out-of-place sum
    assert peaks[True] == (3, 2, 1)    # w, the head's gradient (now w.grad), the embedding's
