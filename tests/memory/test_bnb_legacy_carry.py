"""``--script-keeps-graph`` with ``--qlora-impl bnb-legacy``: the previous micro-batch's graph through the next
forward (litgpt's fit loop), by hand and on torch itself.

bitsandbytes < 0.43.2 ``MatMul4Bit.forward`` keeps its input as a plain ctx attribute (``ctx.tensors = (A, B)``,
bitsandbytes/autograd/_functions.py @ 0.42.0). Autograd frees what ``save_for_backward`` saved when the node's
backward has run, not the ctx's attributes: those live as long as the graph does, and litgpt's
``logits = model(...)`` keeps the graph until the next forward returns.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.bnb_legacy import legacy_ctx_retained_bytes_per_token, previous_graph_bytes
from trainmem.memory.loss import loss_buffers
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

TOY = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
       "num_key_value_heads": 4, "intermediate_size": 704, "vocab_size": 1000, "tie_word_embeddings": False}
H, I, L, B, S = 256, 704, 3, 2, 64


def _setup(**kw):
    base = dict(precision="bf16", attn="sdpa", seq_len=S, micro_batch=B, grad_accum=2, lora_rank=8,
                lora_targets="q_proj,v_proj", qlora=True, qlora_impl="bnb-legacy", loop="script",
                loss="chunked", loss_chunks=4, adapter_dtype="bf16")
    base.update(kw)
    return make_setup(**base)


def test_retained_inputs_by_hand():
    spec, s = spec_from_hf_config(TOY, name="toy"), _setup(script_keeps_graph=True)
    # every 4-bit linear's 16-bit input, once per tensor: norm_1 out (q/k/v), attention out (o), norm_2 out
    # (gate/up), act product (down); layer 0's input needs no grad before q_proj's adapter: q/k/v keep nothing
    assert legacy_ctx_retained_bytes_per_token(spec, s, 1) == 2 * (3 * H + I)
    assert legacy_ctx_retained_bytes_per_token(spec, s, 0) == 2 * (2 * H + I)
    logits = loss_buffers(spec, s).logits_bytes
    T = B * S
    want = T * (2 * (2 * H + I) + (L - 1) * 2 * (3 * H + I)) + logits
    assert previous_graph_bytes(spec, s, range(L), T, logits) == want
    assert previous_graph_bytes(spec, _setup(), range(L), T, logits) == 0  # (flag off)
    # without bnb-legacy only the old logits stay
    assert previous_graph_bytes(spec, _setup(qlora_impl="bnb", script_keeps_graph=True), range(L), T, logits) == logits


def test_timeline_holds_it_through_the_forward_only():
    spec, on = spec_from_hf_config(TOY, name="toy"), _setup(script_keeps_graph=True)
    a, b = estimate(spec, _setup()), estimate(spec, on)
    carry = previous_graph_bytes(spec, on, range(L), B * S, loss_buffers(spec, on).logits_bytes)
    pa, pb = dict(a.timeline), dict(b.timeline)
    rounded = -(-carry // 512) * 512
    assert pb["loss mb1"] - pa["loss mb1"] == rounded  # alive at the forward's end
    assert pb["backward mb1"] == pa["backward mb1"]  # freed when the loop rebinds, before the loss


def test_needs_script_loop():
    with pytest.raises(Exception, match="script-keeps-graph needs --loop script"):
        build("llama-2-7b", lora_rank=8, qlora=True, script_keeps_graph=True)


def test_ctx_attribute_outlives_backward_on_torch():
    torch = pytest.importorskip("torch")

    class CtxKeep(torch.autograd.Function):  # MatMul4Bit's pattern
        @staticmethod
        def forward(ctx, a, w):
            ctx.tensors = (a, w)
            return a @ w

        @staticmethod
        def backward(ctx, g):
            _, w = ctx.tensors
            return g @ w.t(), None

    class Saved(torch.autograd.Function):  # save_for_backward, for contrast
        @staticmethod
        def forward(ctx, a, w):
            ctx.save_for_backward(a, w)
            return a @ w

        @staticmethod
        def backward(ctx, g):
            a, w = ctx.saved_tensors
            return g @ w.t(), None

    w = torch.randn(8, 8)
    for fn, alive_after_backward in ((CtxKeep, True), (Saved, False)):
        x = torch.randn(4, 8, requires_grad=True)
        a = x * 2
        ref = weakref.ref(a)
        out = fn.apply(a, w)
        del a
        out.sum().backward()
        gc.collect()
        assert (ref() is not None) is alive_after_backward  # `out` still bound, as litgpt's `logits` is
        del out
        gc.collect()
        assert ref() is None
