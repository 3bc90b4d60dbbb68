"""torchtune's ``CEWithChunkedOutputLoss`` with ``compute_cross_entropy`` compiled (torchtune training/_compile.py
``compile_loss``): one compiled autograd node per chunk. Each node saves its 16-bit logits chunk, the labels and two
fp32 values per token (traced on the CPU with inductor and saved_tensors_hooks, torch 2.13) and releases them when
it has run; the engine runs every chunk's node before the LM head's matmuls. So at the loss backward the logits and
their gradient overlap by one chunk, not by the whole b·s·V (memory/compile.py ``compiled_loss_buffers``)."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.compile import compiled_loss_buffers
from trainmem.memory.loss import loss_buffers

torch = pytest.importorskip("torch")

KW = dict(engine="torch", precision="bf16", seq_len=4096, micro_batch=2, loop="trainer", loss="chunked",
          compile=True, recompute="full", lora_rank=64, adapter_dtype="bf16",
          lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", optimizer_impl="fused")


def test_overlap_is_one_chunk_of_logits() -> None:
    spec, s = build("llama-3.2-3b", **KW)
    lb = loss_buffers(spec, s)
    T, V = 2 * 4096, spec.output_size
    assert lb.logits_saved and lb.logits_bytes == lb.grad_logits_bytes == 2 * T * V
    assert lb.logits_overlap_bytes == 2 * (T // 8) * V
    unchunked = compiled_loss_buffers(loss_buffers(spec, s.model_copy(update={"compile": False, "loss": "hf",
                                                                             "loss_chunks": None})),
                                      s.model_copy(update={"loss": "hf", "loss_chunks": None}), T, V)
    assert unchunked.logits_overlap_bytes == 0  # (one node for the whole logits: they outlive dlogits' allocation)


def test_peak_falls_by_the_chunks_that_no_longer_overlap() -> None:
    """Llama-3.2-3B LoRA (the README table's LoRA row: packed 4096 x 2, compile, chunked CE, checkpointing): the step
    peaks at the loss backward, logits (2·T·V) + one chunk's gradient. With one chunk the whole gradient meets the
    whole logits: the difference is 2·T·V·(1 − 1/8) by hand = 1,838,678,016 B (T = 8192, V = 128,256)."""
    spec, s8 = build("llama-3.2-3b", **KW)
    _, s1 = build("llama-3.2-3b", **dict(KW, loss_chunks=1))
    e8, e1 = estimate(spec, s8), estimate(spec, s1)
    assert e8.peak_phase.startswith("backward") and e1.peak_phase.startswith("backward")
    T, V = 8192, 128256
    assert 2 * T * V * 7 // 8 == 1_838_678_016
    assert e1.peak_allocated_bytes - e8.peak_allocated_bytes == pytest.approx(1_838_678_016, abs=64 * 1024)


class _CompiledChunkCE(torch.autograd.Function):
    """Stands for one compiled ``compute_cross_entropy`` node with the saved set inductor's partition keeps (the
    16-bit chunk, the labels, the row max and log-sum-exp in fp32); its backward writes the gradient in the
    chunk's dtype and allocates one fp32 value per token (the inductor kernels' only other buffer)."""

    @staticmethod
    def forward(ctx, logits, labels):  # noqa: ANN001, ANN205
        m = torch.empty(logits.shape[0], 1, dtype=torch.float32)
        lse = torch.empty(logits.shape[0], 1, dtype=torch.float32)
        ctx.save_for_backward(logits, labels, m, lse)
        return torch.empty((), dtype=torch.float32)

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        logits, _, _, _ = ctx.saved_tensors
        _tmp = torch.empty(logits.shape[0], dtype=torch.float32)
        return torch.empty_like(logits), None


def test_traced_engine_frees_each_chunk_as_its_gradient_is_made() -> None:
    """A chunked head + loss traced with fake tensors (trainmem's StorageTracker): b 2, s 256, h 64, V 4096, 8
    chunks, frozen 16-bit head (LoRA), the hidden state trains. The backward's peak is the logits (2·T·V) + one
    chunk's gradient + that chunk's fp32 buffer + the labels and fp32 pairs still saved, by hand — not 2·(2·T·V)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace.tracker import StorageTracker

    B, S, H, V, K = 2, 256, 64, 4096, 8
    T, per = B * S, B * S // K
    with FakeTensorMode(), StorageTracker() as tr:
        w = torch.empty(V, H, dtype=torch.bfloat16)
        h = torch.empty(B, S, H, dtype=torch.bfloat16, requires_grad=True)
        labels = torch.zeros(B, S, dtype=torch.long)
        chunks = [torch.nn.functional.linear(c, w) for c in h.chunk(K, dim=1)]
        labs = [lab.reshape(-1) for lab in labels.chunk(K, dim=1)]
        total = 0.0
        for c, lab in zip(chunks, labs):
            total = total + _CompiledChunkCE.apply(c.reshape(-1, V), lab)
        del chunks, c
        before = tr.allocated
        tr.start_recording("backward")
        total.backward()
        peak = tr.peak - before
    logits = 2 * T * V
    assert before >= logits
    chunk = 2 * per * V
    # the first node's gradient and fp32 buffer (512-B rounded) on top of everything alive; the seed gradient (512)
    assert peak == pytest.approx(chunk + 512 + 512, abs=2048), (peak, chunk)
    assert peak < logits / 2


def test_compile_assumption_quotes_the_published_saving() -> None:
    """The --compile assumption line quotes torchtune's table (benchmarks/published_points.json): the measured saving of
    compile (packed row − packed + compile row, both allocated) and this estimator's, as published.py computes them."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import published

    rows = {p["id"]: published.evaluate(p) for p in published.load_points()
            if p["id"] in ("torchtune-3b-full-packed", "torchtune-3b-full-packed-compile")}
    eager, comp = rows["torchtune-3b-full-packed"], rows["torchtune-3b-full-packed-compile"]
    measured = (eager.low - comp.low) / 2**30
    est = (eager.estimate - comp.estimate) / 2**30
    spec, s = build("llama-3.2-3b", compile=True, precision="bf16")
    line = next(a for a in estimate(spec, s).assumptions if a.startswith("compile on a GPU"))
    assert f"compile saved {measured:g} GiB, this model {est:.2f} GiB" in line, (measured, est, line)
