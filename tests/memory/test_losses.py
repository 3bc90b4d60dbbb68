"""Loss implementations, hand-computed: HF's upcast cross-entropy, torchtune's chunked loss, Liger's fused
linear cross-entropy."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory import estimate
from trainmem.memory.loss import liger_chunk_rows, loss_buffers

T, V, H = 2 * 8192, 128256, 4096   # llama-3.1-8b, micro-batch 2, seq 8192


def _lb(**kw):  # noqa: ANN202
    spec, s = build("llama-3.1-8b", seq_len=8192, micro_batch=2, precision="bf16", **kw)
    return spec, s, loss_buffers(spec, s)


def test_hf_loss_is_14_bytes_per_logit_at_backward() -> None:
    _, _, lb = _lb()
    n = T * V
    assert (lb.logits_bytes, lb.kept_bytes, lb.backward_transient_bytes) == (2 * n, 4 * n, 8 * n)


def test_chunked_loss_upcasts_one_chunk_at_a_time() -> None:
    _, _, lb = _lb(loss="chunked")           # torchtune's default: 8 chunks
    n = T * V
    assert lb.logits_bytes == 2 * n and lb.kept_bytes == 4 * n
    assert lb.forward_transient_bytes == 4 * n // 8 and lb.backward_transient_bytes == 8 * n // 8
    _, _, lb16 = _lb(loss="chunked", loss_chunks=16)
    assert lb16.backward_transient_bytes == 8 * n // 16


def test_liger_chunk_rows_formula() -> None:
    # next_power_of_2(cdiv(BT, cdiv(V, H))): cdiv(128256, 4096) = 32, 16384 / 32 = 512
    assert liger_chunk_rows(T, V, H) == 512
    assert liger_chunk_rows(1000, 32000, 4096) == 128   # cdiv(32000, 4096) = 8; cdiv(1000, 8) = 125 → 128
    assert liger_chunk_rows(1000, 32000, 4096, chunks=4) == 250


def test_fused_linear_never_materialises_logits() -> None:
    spec, s, lb = _lb(loss="fused-linear")
    assert lb.logits_bytes == 0 and lb.grad_logits_bytes == 0
    assert lb.kept_bytes == 2 * T * H                      # grad_input, bf16
    assert lb.head_grad_in_forward_bytes == 2 * V * H      # grad_weight, weight dtype
    # the final hidden state (held by the model's forward), one chunk's logits, the bf16 V·H product and its
    # fp32 copy, and 13 B per token (contiguous shifted labels, loss_1d, the ignore mask)
    assert lb.forward_transient_bytes == 2 * T * H + 2 * 512 * V + (2 + 4) * V * H + 13 * T
    # under autocast: fp32 grad_input (the final hidden state's dtype); the weight's cached 16-bit cast and
    # the uncached cast of its transposed view; grad_weight accumulated by addmm(out_dtype=fp32), no product
    amp = loss_buffers(*build("llama-3.1-8b", seq_len=8192, micro_batch=2, precision="amp-bf16",
                              loss="fused-linear")[:2])
    assert amp.kept_bytes == 4 * T * H and amp.head_grad_in_forward_bytes == 4 * V * H
    assert amp.forward_transient_bytes == 4 * T * H + 2 * 512 * V + 2 * 2 * V * H + 2 * 512 * H + 13 * T
    peaks = {loss: estimate(*build("llama-3.1-8b", seq_len=8192, micro_batch=2, precision="bf16", loss=loss)[:2])
             .peak_allocated_bytes for loss in ("hf", "chunked", "fused-linear")}
    assert peaks["fused-linear"] < peaks["chunked"] < peaks["hf"]


def test_loss_options_refused_where_the_engine_has_its_own() -> None:
    with pytest.raises(ConfigError, match="Megatron"):
        build("llama-3.1-8b", engine="megatron", loss="chunked")
    with pytest.raises(ConfigError, match="vocab-parallel"):
        build("llama-3.1-8b", engine="fsdp2", gpus=8, tp=8, loss="fused-linear")
    with pytest.raises(ConfigError, match="loss-chunks"):
        build("llama-3.1-8b", loss_chunks=4)
    build("llama-3.1-8b", engine="fsdp2", gpus=8, tp=8, loss="chunked", no_loss_parallel=True)


def test_trainer_loop_frees_logits_before_backward() -> None:
    """loop trainer vs script: the 16-bit logits (2 B per b·s·V element) are what the script loop keeps
    alive at the loss backward, where this step peaks."""
    kw = dict(seq_len=4096, micro_batch=4, precision="bf16")
    spec, tr = build("gemma-2-2b", attn="eager", **kw)
    _, sc = build("gemma-2-2b", attn="eager", loop="script", **kw)
    e_tr, e_sc = estimate(spec, tr), estimate(spec, sc)
    n = 4 * 4096 * spec.vocab_size
    assert e_sc.peak_allocated_bytes - e_tr.peak_allocated_bytes == pytest.approx(2 * n, rel=0.02)
    assert any("loop trainer" in a for a in e_tr.assumptions)


def test_fused_ce_keeps_only_16bit_logits_and_their_gradient() -> None:
    """flash-attn's cross-entropy (flash_attn/ops/triton/cross_entropy.py): no fp32 b·s·V buffer; it saves the
    bf16 logits (so the trainer loop cannot drop them before backward) and makes a bf16 dlogits."""
    spec, s, lb = _lb(loss="fused-ce")
    n = T * V
    assert (lb.logits_bytes, lb.grad_logits_bytes, lb.backward_transient_bytes) == (2 * n, 2 * n, 0)
    assert lb.kept_bytes == 4 * T and lb.forward_transient_bytes == 8 * T   # lse; losses + z_losses
    assert lb.logits_saved
    hf = estimate(*build("llama-3.1-8b", seq_len=8192, micro_batch=2, precision="bf16")[:2])
    fce = estimate(spec, s)
    # HF at its loss backward (loop trainer: the bf16 logits already dropped): the fp32 log-softmax (4) + the
    # nll and log-softmax input gradients (4 + 4) = 12 B per logit; fused-ce: the saved bf16 logits (2) +
    # dlogits (2) = 4: 8 B per logit less (both peak there)
    assert hf.peak_allocated_bytes - fce.peak_allocated_bytes == pytest.approx(8 * n, rel=0.01)
    with pytest.raises(ConfigError, match="loss-chunks"):
        build("llama-3.1-8b", loss="fused-ce", loss_chunks=4)


def test_fused_ce_logits_outlive_the_trainer_loops_drop() -> None:
    """The logits are saved by the loss, so the trainer loop holds them into the loss backward too (peak:
    logits + dlogits); only the script loop still holds them at the LM head's backward, one step later,
    where the head's weight gradient (bf16, V·h) joins them: the loops differ by exactly that gradient."""
    kw = dict(seq_len=4096, micro_batch=4, precision="bf16", loss="fused-ce")
    spec, tr = build("llama-3.2-1b", **kw)
    _, sc = build("llama-3.2-1b", loop="script", **kw)
    diff = estimate(spec, sc).peak_allocated_bytes - estimate(spec, tr).peak_allocated_bytes
    assert diff == pytest.approx(2 * spec.vocab_size * spec.hidden_size, abs=8192)  # (allocation rounding)
