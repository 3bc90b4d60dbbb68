"""``--accelerate-autocast``: 16-bit weights under accelerate's native AMP (HF Trainer ``bf16=True`` over a bf16
model, as ms-swift 1.x runs): ``model.forward = convert_outputs_to_fp32(autocast(forward))`` (accelerate v0.25.0
src/accelerate/accelerator.py ``prepare_model``). Hand-computed buffers, Qwen1's own loss code traced on fake
tensors under the CUDA autocast emulation with accelerate's own wrapper, and the estimate against the tracer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainmem.memory.loss import (accelerate_logits_fp32_copy_bytes, loss_buffers, unshifted_16bit_ce_buffers,
                                  unshifted_autocast_ce_buffers)
from trainmem.setup import make_setup


def test_logits_copy_hand_computed() -> None:
    # b=1, s=2048, V=151,936 (Qwen-7B): 311,164,928 bf16 logits -> 1,244,659,712 B fp32 copy (4 B each)
    n = 2048 * 151_936
    assert n == 311_164_928
    assert accelerate_logits_fp32_copy_bytes(n, 2) == 1_244_659_712
    assert accelerate_logits_fp32_copy_bytes(n, 4) == 0  # (fp32 logits: convert_to_fp32 leaves them)


def test_unshifted_autocast_hand_computed() -> None:
    n = 1000
    lb = unshifted_autocast_ce_buffers(n, 2)
    # logits 2n; kept fp32 log_softmax 4n; forward: the 16-bit shifted copy 2n + its fp32 cast 4n;
    # backward: nll_loss's and log_softmax's fp32 gradients 4n + 4n; the logits' 16-bit gradient 2n
    assert (lb.logits_bytes, lb.kept_bytes, lb.forward_transient_bytes, lb.backward_transient_bytes,
            lb.grad_logits_bytes) == (2000, 4000, 6000, 8000, 2000)
    # against the all-16-bit path (no autocast): 2n kept, 2n shifted copy, 4n of 16-bit gradients
    pure = unshifted_16bit_ce_buffers(n, 2)
    assert (pure.kept_bytes, pure.forward_transient_bytes, pure.backward_transient_bytes) == (2000, 2000, 4000)


def test_loss_buffers_take_the_autocast_path() -> None:
    from tests.memory.tiny_configs import TINY
    from trainmem.model.hf import spec_from_hf_config
    spec = replace(spec_from_hf_config(TINY["llama-gqa"], name="llama-gqa"), logits_upcast=False)  # (Qwen1-like)
    s = make_setup(precision="bf16", seq_len=256, micro_batch=2, accelerate_autocast=True)
    n = 2 * 256 * spec.output_size
    lb = loss_buffers(spec, s)
    assert lb.kept_bytes == 4 * n and lb.forward_transient_bytes == 6 * n and lb.output_fp32_copy_bytes == 4 * n
    off = loss_buffers(spec, make_setup(precision="bf16", seq_len=256, micro_batch=2))
    assert off.kept_bytes == 2 * n and off.output_fp32_copy_bytes == 0


@pytest.mark.parametrize("kw", [dict(precision="amp-bf16"), dict(precision="bf16", engine="fsdp2", gpus=2),
                                dict(precision="fp32")])
def test_refused_outside_bf16_torch(kw: dict) -> None:
    with pytest.raises(Exception, match="--accelerate-autocast models 16-bit weights"):
        make_setup(accelerate_autocast=True, **kw)


def test_qwen1_loss_traced_under_accelerate_autocast() -> None:
    """QWenLMHeadModel.forward's loss (modeling_qwen.py, Qwen/Qwen-7B hub repo) on fake bf16 logits, run inside
    accelerate's own ``convert_outputs_to_fp32`` under ``torch.autocast`` with the CUDA lists (trace/autocast.py):
    the tracked bytes at the loss forward, after the wrapped forward, after the loop drops the output, and at the
    loss backward match the buffers the estimator walks."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("accelerate")
    from accelerate.utils import convert_outputs_to_fp32
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.trace.autocast import cuda_autocast
    from trainmem.trace.tracker import StorageTracker

    b, s, V = 2, 128, 4096
    n = b * s * V
    with FakeTensorMode():
        tr = StorageTracker()
        with tr, cuda_autocast():
            head_out = torch.zeros(b, s, V, dtype=torch.bfloat16, requires_grad=True)
            labels = torch.randint(0, V, (b, s))

            def forward() -> dict:
                lm_logits = head_out * 1  # (the LM head's 16-bit output)
                shift_logits = lm_logits[..., :-1, :].contiguous()
                shift_labels = labels[..., 1:].contiguous()
                loss = torch.nn.CrossEntropyLoss()(shift_logits.view(-1, V), shift_labels.view(-1))
                return {"loss": loss, "logits": lm_logits}

            base = tr.allocated
            tr.start_recording("forward[0]")
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = convert_outputs_to_fp32(forward)()
            fwd_peak, after_fwd = tr.peak - base, tr.allocated - base
            assert out["logits"].dtype == torch.float32 and out["loss"].dtype == torch.float32
            loss = out["loss"]
            del out  # (HF Trainer's compute_loss returns the loss only)
            after_drop = tr.allocated - base
            tr.peak = 0
            loss.backward()
            bwd_peak = tr.peak - base
            tr.stop_recording()
    lb = unshifted_autocast_ce_buffers(n, 2)
    est_fwd = lb.logits_bytes + lb.kept_bytes + lb.forward_transient_bytes  # 12n
    est_after = lb.kept_bytes + accelerate_logits_fp32_copy_bytes(n, 2)  # 8n: the 16-bit logits are gone
    est_bwd = lb.kept_bytes + lb.backward_transient_bytes  # 12n
    # (the trace's shifted tensors are s - 1 long: 1/128 less)
    assert fwd_peak == pytest.approx(est_fwd, rel=0.01), (fwd_peak / n, est_fwd / n)
    assert after_fwd == pytest.approx(est_after, rel=0.01), (after_fwd / n, est_after / n)
    assert after_drop == pytest.approx(lb.kept_bytes, rel=0.01)
    assert bwd_peak == pytest.approx(est_bwd, rel=0.01), (bwd_peak / n, est_bwd / n)


_LORA = dict(lora_rank=8, lora_targets="q_proj,k_proj,v_proj", lora_dropout=0.05)


@pytest.mark.parametrize("kw", [dict(), dict(loop="script"), dict(recompute="full"), _LORA,
                                dict(_LORA, recompute="full")],
                         ids=["trainer", "script", "full-recompute", "lora", "lora-full-recompute"])
def test_estimate_matches_trace_tiny_llama(kw: dict) -> None:
    """A tiny Llama with bf16 weights traced under torch.autocast('cpu', bfloat16) (CUDA lists) with accelerate's
    own convert_outputs_to_fp32 around its forward (trace/step.py): the peak within 1 %. LoRA (fp32 adapters on
    the 16-bit base, peft casting x to fp32 and autocast casting it back): the amp recipes' LoRA terms
    (layers/base.py is_amp); without them the estimate was +8.5 % (full recompute) / +12.6 % over the trace. With loop script the
    fp32 copy of the logits is held through backward in place of the 16-bit logits: +2 B per logit over
    --precision bf16, in the trace and in the estimate."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from tests.memory.tiny_configs import TINY
    from trainmem.model.hf import spec_from_hf_config
    from trainmem.trace.compare import compare
    spec = spec_from_hf_config(TINY["llama-gqa"], name="llama-gqa")
    cmp = compare(spec, make_setup(precision="bf16", seq_len=512, micro_batch=4, accelerate_autocast=True, **kw))
    assert abs(cmp.peak_error) < 0.01, cmp.to_dict()
    if kw.get("loop") == "script":
        plain = compare(spec, make_setup(precision="bf16", seq_len=512, micro_batch=4, **kw))
        n = 4 * 512 * spec.output_size
        assert cmp.trace.peak_allocated_bytes - plain.trace.peak_allocated_bytes == 2 * n
        assert cmp.estimate_peak_bytes - plain.estimate_peak_bytes == 2 * n
