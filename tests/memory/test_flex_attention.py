"""--attn flex: the block mask's bytes (against torch's own create_block_mask) and what it adds to a step
(hand-computed); the saved tensors are the fused SDPA kernels' (compiled FlexAttention: read from torch 2.13
torch/_higher_order_ops/flex_attention.py, not traced: torch 2.13 has no FlexAttention backward on CPU —
torch/nn/attention/flex_attention.py ``_validate_device`` raises NotImplementedError for CPU inputs that
require grad — so no CPU trace can check it; a CUDA run would)."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import TrainmemError
from trainmem.memory.estimate import estimate
from trainmem.memory.flex_attention import flex_block_mask_bytes


def test_block_mask_hand_computed():
    # s = 8192: n = 64 blocks of 128; 4 count tensors of 64 int32 + 4 index tensors of 64 * 64 int32
    assert flex_block_mask_bytes(8192) == 4 * 4 * 64 + 4 * 4 * 64 * 64 == 66_560
    assert flex_block_mask_bytes(1000) == flex_block_mask_bytes(1024) == 16 * (8 + 64)  # ceil(1000 / 128) = 8
    assert flex_block_mask_bytes(1024, batch=2, heads=4) == 8 * flex_block_mask_bytes(1024)


@pytest.mark.parametrize("seq", [1000, 1024, 4096])
def test_block_mask_equals_torch(seq):
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask

    bm = create_block_mask(lambda b, h, q, k: q >= k, None, None, seq, seq, device="cpu")
    tensors = [t for t in bm.as_tuple()[2:] if isinstance(t, torch.Tensor)]
    assert len(tensors) == 8
    assert sum(t.numel() * t.element_size() for t in tensors) == flex_block_mask_bytes(seq)


def test_flex_adds_the_block_mask_to_the_step():
    kw = dict(engine="fsdp2", gpus=8, seq_len=8192, micro_batch=1, recompute="full")
    spec, s_flex = build("llama-3.1-8b", attn="flex", **kw)
    _, s_sdpa = build("llama-3.1-8b", attn="sdpa", **kw)
    assert s_flex.attn == "sdpa" and s_flex.flex_attention and not s_sdpa.flex_attention
    a, b = estimate(spec, s_flex), estimate(spec, s_sdpa)
    # alive the whole step: 4 count tensors (256 B -> one 512 B block each) + 4 index tensors (16,384 B)
    assert a.peak_allocated_bytes - b.peak_allocated_bytes == 4 * 512 + 4 * 16_384
    assert any(n.startswith("attn flex") for n in a.assumptions)


def test_flex_refusals():
    with pytest.raises(TrainmemError, match="--attn flex"):
        build("llama-3.1-8b", attn="flex", engine="fsdp2", gpus=8, cp=2)
    with pytest.raises(TrainmemError, match="--attn flex"):
        build("llama-3.1-8b", attn="flex", engine="megatron", gpus=8)


def test_trace_refuses_flex_and_device_map():
    from trainmem.trace.support import check_traceable

    spec, s = build("llama-3.2-1b", attn="flex")
    with pytest.raises(TrainmemError, match="--attn flex"):
        check_traceable(spec, s)
    spec, s = build("llama-3.1-8b", gpus=2, device_map="auto", lora_rank=8, precision="bf16")
    with pytest.raises(TrainmemError, match="--device-map auto"):
        check_traceable(spec, s)
