"""Unsloth's kernels (``--kernels unsloth``, ``--loss unsloth``: trainmem/memory/unsloth.py), counted by hand from
unslothai/unsloth @ ef70177a24 (kernels/fast_lora.py, rms_layernorm.py, rope_embedding.py, cross_entropy_loss.py).

These are hand counts from the source; a fake-tensor trace of the same autograd Functions reimplemented from that
source would not be independent evidence, so there is none."""

import json

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory import estimate
from trainmem.memory.activations import layer_saved
from trainmem.memory.loss import loss_buffers
from trainmem.memory.loss import unsloth_ce_buffers
from trainmem.memory.unsloth import fused_lora_groups

H, I, A, V = 4096, 11008, 32, 32000  # Llama-2-7B
ALL = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
RUN = dict(precision="bf16", attn="flash", seq_len=2048, micro_batch=1, recompute="full", lora_rank=16,
           gpu="A100-SXM-80G")


def _terms(**kw) -> dict[str, int]:
    spec, s = build("llama-2-7b", **{**RUN, **kw})
    out: dict[str, int] = {}
    for t in layer_saved(spec, s, 5).terms:
        out[t.name] = out.get(t.name, 0) + t.bytes
    return out


def test_all_linear_layer_is_the_fused_functions_saved_tensors():
    """s=2048, b=1 (T=2048), bf16, flash, checkpointed: input norm r only (X is the checkpointed input, 4 B a row);
    LoRA_QKV's X (2h); flash's q, k, v, out (2h each) and lse (4 B per head and token); LoRA_W's X is flash's out
    (nothing more); post-attention norm X + r (2h + 4); LoRA_MLP's X (2h), e and g (2i each). No PEFT adapter
    term: every linear is inside a fused Function."""
    T = 2048
    got = _terms(lora_targets=ALL, kernels="unsloth")
    assert got == {"input_norm": 4 * T, "lora_input": 2 * H * T, "q": 2 * H * T, "k": 2 * H * T, "v": 2 * H * T,
                   "attn_out": 2 * H * T, "logsumexp": 4 * A * T, "post_attention_norm": (2 * H + 4) * T,
                   "mlp_input": 2 * H * T, "mlp_intermediate": 4 * I * T}
    assert sum(got.values()) == 8_192 + 6 * 16_777_216 + 262_144 + 16_785_408 + 90_177_536


def test_q_v_only_leaves_peft_and_the_hf_mlp_and_changes_the_norms():
    """LLaMA-Factory's q_proj,v_proj: no group is whole, so get_peft_model patches nothing; PEFT's fp32 adapters
    keep their fp32 input copies (4h each) as without unsloth; HF's RMSNorm's fp32 copy (4h + 4) becomes 4 (input
    norm) and 2h + 4 (post-attention norm); the transformers MLP keeps its 3 tensors of width i."""
    T = 2048
    hf = _terms(lora_targets="q_proj,v_proj")
    us = _terms(lora_targets="q_proj,v_proj", kernels="unsloth")
    assert hf["input_norm"] == hf["post_attention_norm"] == (4 * H + 4) * T
    assert us["input_norm"] == 4 * T and us["post_attention_norm"] == (2 * H + 4) * T
    for name in ("lora_input", "lora_a_out", "mlp_intermediate", "q", "k", "v", "attn_out"):
        assert us[name] == hf[name]
    assert us["lora_input"] == 2 * 4 * H * T and us["mlp_intermediate"] == 3 * 2 * I * T


def test_without_checkpointing_the_input_norm_keeps_x():
    assert _terms(lora_targets=ALL, kernels="unsloth", recompute="none")["input_norm"] == (2 * H + 4) * 2048


def test_groups_patch_only_when_whole():
    mlp, qkv = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"), ("self_attn.q_proj", "self_attn.k_proj",
                                                                     "self_attn.v_proj")
    assert fused_lora_groups(("self_attn.q_proj", "self_attn.v_proj")) == ()
    assert fused_lora_groups(qkv) == ("qkv",)
    assert fused_lora_groups(mlp + qkv + ("self_attn.o_proj",)) == ("mlp", "qkv", "o")
    assert fused_lora_groups(mlp[:2] + ("self_attn.o_proj",)) == ("o",)


def test_cross_entropy_keeps_16bit_logits_and_writes_the_gradient_in_place():
    """Fast_CrossEntropyLoss saves (logits, logsumexp, labels): 2·T·V + 4·T + 8·T (hstack's int64 labels); no fp32
    b·s·V tensor; the gradient is the logits' storage."""
    T = 4 * 1024
    lb = unsloth_ce_buffers(T, V, 2)
    assert (lb.logits_bytes, lb.kept_bytes, lb.backward_transient_bytes) == (2 * T * V, 12 * T, 0)
    assert lb.grad_in_place and lb.logits_saved
    spec, s = build("llama-2-7b", **{**RUN, "seq_len": 1024, "micro_batch": 4, "loss": "unsloth"})
    assert loss_buffers(spec, s) == lb


def test_in_place_gradient_lowers_the_peak_by_one_logits_buffer():
    """The same run with flash-attn's cross-entropy (which allocates dlogits = empty_like(logits)) peaks at the
    loss backward with logits and their gradient; unsloth's in-place backward has one of them: the peak drops by
    at most 2·T·V, and by more than 99 % of it (what else moves is per-token: 8·T against 12·T kept)."""
    kw = dict(precision="bf16", attn="flash", seq_len=2048, micro_batch=2, recompute="full", lora_rank=8)
    spec, fce = build("qwen2.5-0.5b", loss="fused-ce", **kw)
    _, us = build("qwen2.5-0.5b", loss="unsloth", **kw)
    drop = estimate(spec, fce).peak_allocated_bytes - estimate(spec, us).peak_allocated_bytes
    n = 2 * 2048 * 2 * spec.output_size
    assert 0.99 * n < drop <= n


@pytest.mark.parametrize("model,kw", [("qwen2.5-7b", dict(lora_rank=8, kernels="unsloth")),
                                      ("llama-2-7b", dict(kernels="unsloth")),
                                      ("llama-2-7b", dict(lora_rank=8, lora_dropout=0.05, kernels="unsloth"))])
def test_refused(model, kw):
    with pytest.raises((ConfigError, ValueError)):
        build(model, **kw)


def test_cli_flags_json_and_one_line_refusal(capsys):
    from trainmem.cli import main

    args = ["estimate", "llama-2-7b", "--lora-rank", "8", "--attn", "flash", "--recompute", "full", "--json"]
    assert main(args + ["--kernels", "unsloth", "--loss", "unsloth"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["setup"]["kernels"] == "unsloth" and d["setup"]["loss"] == "unsloth"
    assert sum("unsloth" in a for a in d["assumptions"]) == 2
    assert main(["estimate", "llama-2-7b", "--kernels", "unsloth"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--lora-rank" in err, err
