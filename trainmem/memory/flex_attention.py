"""FlexAttention (``torch.nn.attention.flex_attention``; torchtitan ``attn_type = "flex"``, HF
``attn_implementation="flex_attention"``): what it keeps, beyond what the fused SDPA kernels keep.

``FlexAttentionAutogradOp.forward`` (torch 2.13 ``torch/_higher_order_ops/flex_attention.py``) saves query, key,
value, out, logsumexp (fp32, (b, h, s)), max_scores and the block mask's tensors. Both torchtitan
(``FlexAttentionWrapper``) and transformers (``integrations/flex_attention.py``) call it under ``torch.compile``,
where AOTAutograd keeps only what ``flex_attention_backward`` reads: q, k, v, out and logsumexp — the terms of the
fused SDPA kernels (unexpanded k/v with ``enable_gqa``) — and the block mask, which is made once per batch and
shared by every layer. (Eager flex_attention runs the math reference with an s² score matrix: not modelled.
Not traced: torch 2.13 has no FlexAttention backward on CPU, ``_validate_device`` in
torch/nn/attention/flex_attention.py.)

The block mask (``BlockMask``, ``create_block_mask(mask_mod, B, H, s, s)``, 128×128 blocks,
``_DEFAULT_SPARSE_BLOCK_SIZE``): ``kv_num_blocks`` / ``full_kv_num_blocks`` (B, H, n) and ``kv_indices`` /
``full_kv_indices`` (B, H, n, n), the same four transposed for the backward (``q_*``), all int32, n = ⌈s/128⌉.
A causal mask is built with B = H = None (one row shared by the batch and the heads), as torchtitan and HF do.
"""

from __future__ import annotations

__all__ = ["FLEX_NOTE", "flex_block_mask_bytes"]

#: torch/nn/attention/flex_attention.py ``_DEFAULT_SPARSE_BLOCK_SIZE`` (torch 2.13).
BLOCK = 128

FLEX_NOTE = ("attn flex: FlexAttention under torch.compile keeps q, k, v, output and logsumexp as the fused SDPA "
             "kernels (AOTAutograd keeps what flex_attention_backward reads), plus one causal block mask per "
             "batch (int32 block counts and indices of 128x128 blocks, kv and q sides, shared by every layer)")


def flex_block_mask_tensor_bytes(seq_len: int, batch: int = 1, heads: int = 1) -> tuple[int, int]:
    """(bytes of one (B, H, n) block-count tensor, bytes of one (B, H, n, n) index tensor), int32."""
    n = -(-seq_len // BLOCK)
    return 4 * batch * heads * n, 4 * batch * heads * n * n


def flex_block_mask_bytes(seq_len: int, batch: int = 1, heads: int = 1) -> int:
    """Bytes of a ``BlockMask`` over ``seq_len`` × ``seq_len``: four count tensors and four index tensors
    (kv, full kv, q, full q), 16·B·H·(n + n²) with n = ⌈s/128⌉ (torch 2.13 ``create_block_mask``)."""
    counts, indices = flex_block_mask_tensor_bytes(seq_len, batch, heads)
    return 4 * counts + 4 * indices
