"""A test oracle for Qwen1's decoder block: the sequence of tensor operations of ``QWenBlock.forward`` as the
Qwen/Qwen-7B hub repository's ``modeling_qwen.py`` runs it on torch 2 without flash-attn (its torch RMSNorm and
rotary paths, the SDPA branch), rewritten here op for op so that autograd saves what it saves there. transformers
has no Qwen1 class; this is what tests/memory/test_qwen1_bnb_legacy.py measures the estimator against.

Ops, per block (h hidden, a heads, d = h / a, i = intermediate_size // 2):
  norm(x)      = (x.float() * rsqrt(mean(x.float()², -1) + eps)).to(x.dtype) * weight          (ln_1, ln_2)
  qkv          = c_attn(norm_1)               (h -> 3h, bias); q, k, v = views of its three h-wide slices
  rope(t)      = cat(t.float()·cos + rotate_half(t.float())·sin).to(t.dtype)                    (q and k)
  mask         = padding mask (b, 1, 1, s) expanded to (b, 1, s, s), masked_fill'ed outside the causal tril
  attn         = SDPA(q, k, v as (b, a, s, d) views, attn_mask=mask).transpose(1, 2).contiguous()
  y            = x + c_proj(attn);  out = y + c_proj_mlp(w1(norm_2(y)) * silu(w2(norm_2(y))))
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight


def _rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    t32 = t.float()
    first, second = t32.reshape(*t32.shape[:-1], 2, t32.shape[-1] // 2).unbind(dim=-2)
    rotated = torch.cat((-second, first), dim=-1)
    return torch.cat((t32 * cos + rotated * sin, t32[..., t32.shape[-1]:]), dim=-1).type_as(t)


class QwenBlockOracle(nn.Module):
    def __init__(self, h: int, heads: int, inter: int) -> None:
        super().__init__()
        self.h, self.heads = h, heads
        self.ln_1, self.ln_2 = nn.Parameter(torch.ones(h)), nn.Parameter(torch.ones(h))
        self.c_attn, self.c_proj = nn.Linear(h, 3 * h), nn.Linear(h, h, bias=False)
        self.w1, self.w2 = nn.Linear(h, inter // 2, bias=False), nn.Linear(h, inter // 2, bias=False)
        self.mlp_proj = nn.Linear(inter // 2, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        d = self.h // self.heads
        q, k, v = (t.view(b, s, self.heads, d) for t in self.c_attn(_norm(x, self.ln_1)).split(self.h, dim=2))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        causal = torch.tril(torch.ones((s, s), dtype=torch.bool)).view(1, 1, s, s)
        mask = pad_mask.expand(-1, -1, s, -1).masked_fill(~causal, torch.finfo(q.dtype).min)
        attn = F.scaled_dot_product_attention(q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3),
                                              attn_mask=mask).transpose(1, 2).contiguous().view(b, s, self.h)
        y = x + self.c_proj(attn)
        n2 = _norm(y, self.ln_2)
        return y + self.mlp_proj(self.w1(n2) * F.silu(self.w2(n2)))


def measured_block_saved_bytes(*, h: int, heads: int, inter: int, b: int, s: int, dtype: torch.dtype) -> int:
    """Bytes autograd saves for the middle one of three blocks (by storage; parameters and tensors shared with the
    neighbouring blocks — the rotary tables — left out), as tests/memory/measure.py counts a transformers layer."""
    torch.manual_seed(0)
    blocks = nn.ModuleList(QwenBlockOracle(h, heads, inter) for _ in range(3)).to(dtype)
    params = {p.untyped_storage().data_ptr() for p in blocks.parameters()}
    d = h // heads
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.outer(torch.arange(s).float(), inv)
    ang = torch.cat((ang, ang), dim=-1)[None, :, None, :]
    cos, sin = ang.cos(), ang.sin()
    pad = ((1.0 - torch.ones(b, s)[:, None, None, :].to(dtype)) * torch.finfo(dtype).min)
    per: list[dict[int, int]] = [{} for _ in blocks]
    current: dict[str, int | None] = {"i": None}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if current["i"] is not None:
            st = t.untyped_storage()
            per[current["i"]][st.data_ptr()] = st.nbytes()
        return t

    x = torch.randn(b, s, h, dtype=dtype, requires_grad=True)
    outs = []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        for i, blk in enumerate(blocks):
            current["i"] = i
            x = blk(x, cos, sin, pad)
            outs.append(x)
    shared = set(per[0]) | set(per[2])
    return sum(n for ptr, n in per[1].items() if ptr not in params and ptr not in shared)
