"""Eager ``--recompute selective`` (torchtitan's op-level SAC) on blocks with and without biased linears: one block
run under torchtitan's policy on fake tensors (trainmem/trace/op_sac.py: what the policy's cache and the checkpoint
keep once the forward is done) against the estimate's kept bytes per layer (memory/plan.py ``_torchtitan_op_sac``,
memory/op_sac.py). A biased ``nn.Linear`` and GPT-2's Conv1D run ``aten.addmm``, which torchtitan 0.2.2's
``_op_sac_save_list`` does not name: recomputed, and not counted among the every-other-``mm``."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import BASE, TINY  # noqa: E402
from trainmem.memory.op_sac import block_linears, moe_block_linears, op_sac_saved_mm_width  # noqa: E402
from trainmem.memory.plan import kept_per_layer  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup, validate_for_model  # noqa: E402
from trainmem.trace.op_sac import trace_op_sac_layer  # noqa: E402

_LLAMA_BIASED = dict(TINY["llama-gqa"], attention_bias=True, mlp_bias=True)
_GPT2_RESID_DROPOUT = dict(TINY["gpt2-dropout"], attn_pdrop=0.0)  # (CPU SDPA with dropout takes the math kernel)
CASES = [("qwen2", TINY["qwen2"], "bf16"), ("qwen2", TINY["qwen2"], "amp-bf16"), ("gpt2", TINY["gpt2"], "bf16"),
         ("gpt2-dropout", _GPT2_RESID_DROPOUT, "amp-bf16"), ("llama-biased", _LLAMA_BIASED, "bf16"),
         ("llama-gqa", TINY["llama-gqa"], "amp-bf16"), ("phi3", TINY["phi3"], "bf16"),
         ("gpt_neox", TINY["gpt_neox"], "bf16"), ("opt", TINY["opt"], "bf16"), ("nemotron", TINY["nemotron"], "bf16"),
         ("falcon-new", TINY["falcon-new"], "bf16")]


@pytest.mark.parametrize("name,cfg,precision", CASES, ids=[f"{n}-{p}" for n, _, p in CASES])
def test_eager_op_sac_matches_the_policy(name: str, cfg: dict, precision: str) -> None:
    spec = spec_from_hf_config(cfg, name=name)
    setup = make_setup(seq_len=128, micro_batch=2, recompute="selective", precision=precision)
    r = trace_op_sac_layer(spec, setup)
    assert r.linear_ops == ["mm" if ln.mm else "addmm" for ln in block_linears(spec)]
    assert kept_per_layer(spec, setup)[0] == r.saved_bytes, r.tensors


def test_which_linears_run_addmm() -> None:
    """Qwen2: q/k/v addmm, then o, gate, up, down mm (o and up saved); GPT-2: four addmm, no mm; Falcon's
    FalconLinear is mm with a bias too."""
    ops = {n: trace_op_sac_layer(spec_from_hf_config(c, name=n), make_setup(seq_len=64, recompute="selective",
                                                                               precision="bf16")).linear_ops
           for n, c in (("qwen2", TINY["qwen2"]), ("gpt2", TINY["gpt2"]),
                        ("falcon", dict(TINY["falcon-new"], bias=True)))}
    assert ops == {"qwen2": ["addmm"] * 3 + ["mm"] * 4, "gpt2": ["addmm"] * 4, "falcon": ["mm"] * 4}


def test_real_configs_by_hand_and_traced() -> None:
    """Qwen2.5-0.5B (h 896, 14 heads of 64, 2 kv heads, i 4864) and GPT-2 (h 768, 12 heads), bf16, 1 x 256 tokens.
    Per token: the input r·h, the flash output c·a·d and logsumexp 4a, and the saved mm outputs: Qwen2.5 o_proj
    (896) and up_proj (4864) -> 2·896 + 2·(896 + 4864) + 2·896 + 56 = 15,160 B (q, v, gate, down before: 17,208);
    GPT-2 none -> 2·768 + 2·768 + 48 = 3,120 B (c_attn and c_fc before: 13,872). The traced block agrees within
    1 %."""
    from trainmem.api import build
    for name, per_token in (("qwen2.5-0.5b", 15_160), ("gpt2", 3_120)):
        spec, setup = build(name, precision="bf16", seq_len=256, micro_batch=1, recompute="selective")
        est = kept_per_layer(spec, setup)[0]
        assert est == 256 * per_token
        traced = trace_op_sac_layer(spec, setup).saved_bytes
        assert abs(est - traced) <= 0.01 * traced, (name, est, traced)


def test_saved_mm_width_skips_addmm() -> None:
    from trainmem.memory.op_sac import OpSacLinear
    lin = [OpSacLinear(896, False, True), OpSacLinear(128, False, True), OpSacLinear(128, False, True),
           OpSacLinear(896, True, False), OpSacLinear(4864, True, True), OpSacLinear(4864, True, True),
           OpSacLinear(896, True, False)]
    assert op_sac_saved_mm_width(lin, 1) == 896 + 4864
    assert op_sac_saved_mm_width(lin, 2) == 896 + 4864 / 2  # (row-parallel o_proj: a full-width partial sum)


def test_compile_with_op_sac_accepts_biased_linears() -> None:
    """No longer refused: the partitioner check is tests/trace/test_compile_sac_trace.py's cases."""
    for fam in ("qwen2", "gpt2"):
        spec = spec_from_hf_config(TINY[fam], name=fam)
        validate_for_model(make_setup(precision="bf16", compile=True, recompute="selective"), spec)


_QWEN3_MOE = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                  num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=2, head_dim=32, num_experts=4,
                  num_experts_per_tok=2, **BASE)
MOE_CASES = [("mixtral", TINY["mixtral"], "bf16"), ("mixtral", TINY["mixtral"], "amp-bf16"),
             ("qwen2_moe", TINY["qwen2_moe"], "bf16"), ("qwen2_moe", TINY["qwen2_moe"], "amp-bf16"),
             ("qwen3_moe", _QWEN3_MOE, "bf16")]


@pytest.mark.parametrize("name,cfg,precision", MOE_CASES, ids=[f"{n}-{p}" for n, _, p in MOE_CASES])
def test_eager_op_sac_moe_block_matches_the_policy(name: str, cfg: dict, precision: str) -> None:
    """MoE layers: the router's (and Qwen2-MoE's shared expert's) aten.mm are counted, the grouped-GEMM experts
    neither saved nor counted (memory/op_sac.py ``moe_block_linears``); every layer of these configs is MoE."""
    spec = spec_from_hf_config(cfg, name=name)
    assert 0 in spec.moe_layer_indices
    setup = make_setup(seq_len=128, micro_batch=2, recompute="selective", precision=precision)
    r = trace_op_sac_layer(spec, setup)
    assert r.linear_ops == ["mm" if ln.mm else "addmm" for ln in moe_block_linears(spec)]
    assert kept_per_layer(spec, setup)[0] == r.saved_bytes, r.tensors


def test_moe_op_sac_by_hand() -> None:
    """Tiny Mixtral (h 256, 8 heads of 32, 2 kv heads, 4 experts), bf16, 2 x 128 tokens. Per token: the input
    2·256, q (1st mm) 2·256, v (3rd) 2·64, the flash output 2·256 and logsumexp 4·8, the router (5th) 2·4:
    1,704 B -> 436,224 B (the experts' grouped GEMMs recomputed). Qwen2-MoE (shared expert 256, qkv biased):
    o (1st mm) 2·256, shared up (3rd) 2·256, router (5th) 2·4, shared_expert_gate (6th) dropped; + input and
    flash: 2·256 + 2·256 + 2·256 + 8 + 2·256 + 32 = 2,088 B -> 534,528 B."""
    setup = make_setup(seq_len=128, micro_batch=2, recompute="selective", precision="bf16")
    for name, per_token in (("mixtral", 1_704), ("qwen2_moe", 2_088)):
        spec = spec_from_hf_config(TINY[name], name=name)
        assert kept_per_layer(spec, setup)[0] == 256 * per_token, name


def test_moe_real_configs_by_hand_and_traced() -> None:
    """Mixtral-8x7B (h 4096, 32 heads of 128, 8 kv heads, 8 experts), bf16, 1 x 256 tokens, per token: input
    8,192 + q 8,192 + v 2,048 + flash 8,192 + logsumexp 128 + router 16 = 26,768 B; the traced block agrees
    (Qwen1.5-MoE-A2.7B traced the same way)."""
    from trainmem.api import build
    spec, setup = build("mixtral-8x7b", precision="bf16", seq_len=256, micro_batch=1, recompute="selective")
    assert kept_per_layer(spec, setup)[0] == 256 * 26_768 == trace_op_sac_layer(spec, setup).saved_bytes
    spec, setup = build("qwen1.5-moe-a2.7b", precision="bf16", seq_len=256, micro_batch=1, recompute="selective")
    assert kept_per_layer(spec, setup)[0] == trace_op_sac_layer(spec, setup).saved_bytes
