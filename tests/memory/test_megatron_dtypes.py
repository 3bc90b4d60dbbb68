"""Megatron's gradient-buffer dtype and fp8 parameters, computed by hand (Megatron-Core r0.15 @ 92c8482e6d,
Transformer Engine 2.9; trainmem/memory/engines/megatron.py), and the exact-GeLU MLP the published GPT/MPT
points are mapped to (benchmarks/plan_vs_published.py)."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory import estimate
from trainmem.memory.engines import engine_for
from trainmem.memory.states import rank_params
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup
from trainmem.units import round_up_bytes

# Llama-3.1-8B: 8,030,261,248 parameters; 32 layers × (4096·(4096 + 2·1024 + 4096) + 3·4096·14336)
N = 8_030_261_248
LAYER_MM = 32 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336)


def _states(**kw):
    spec, s = build("llama-3.1-8b", engine="megatron", gpus=8, **kw)
    rp = rank_params(spec, s, 0)
    return spec, s, rp, engine_for(spec, s, rp, []).st


def test_16bit_main_grads_halve_the_buffer_and_cast_the_owned_shard_at_step() -> None:
    """grad_reduce_in_fp32=False: a bf16 main-grad buffer of every parameter (2 B, not 4), and the
    distributed optimizer's fp32 copy of the 1/8 it owns (4 B · N/8) alive through step()."""
    spec, _, rp, st32 = _states(zero=1)
    _, _, _, st16 = _states(zero=1, grad_reduce_16bit=True)
    assert rp.trainable == spec.n_params == N
    assert (st32.grads_static, st32.grad_elem, st32.step_grad_fp32) == (4 * N, 4, 0)
    assert (st16.grads_static, st16.grad_elem) == (2 * N, 2)
    assert st16.step_grad_fp32 == 4 * (N // 8)
    assert st16.master == st32.master == 4 * (N // 8) and st16.states == st32.states == 8 * (N // 8)
    # what stays allocated after the step: the buffer is 2·N bytes smaller (each rounded to 512 B)
    _, s32 = build("llama-3.1-8b", engine="megatron", gpus=8, zero=1)
    _, s16 = build("llama-3.1-8b", engine="megatron", gpus=8, zero=1, grad_reduce_16bit=True)
    e32, e16 = estimate(spec, s32), estimate(spec, s16)
    assert e32.static_bytes - e16.static_bytes == round_up_bytes(4 * N) - round_up_bytes(2 * N)


def test_16bit_main_grads_without_the_distributed_optimizer_cast_every_gradient() -> None:
    _, _, _, st = _states(zero=0, grad_reduce_16bit=True)
    assert st.grads_static == 2 * N and st.step_grad_fp32 == 4 * N


def test_fp8_params_store_the_layer_weights_in_one_byte_plus_the_hopper_transpose() -> None:
    """--fp8-param-gather: layer linear weights 1 B (uint8 buffer) + their fp8 transpose 1 B, instead of
    bf16 (2 B) + the TE workspace's fp8 copy and transpose (2 B): 2 B less per layer matmul weight."""
    spec, s, rp, st = _states(zero=1, precision="fp8", fp8_params=True)
    assert sum(rp.layer_matmul) == LAYER_MM
    assert st.params == 2 * (N - LAYER_MM) + LAYER_MM
    _, s8 = build("llama-3.1-8b", engine="megatron", gpus=8, zero=1, precision="fp8")
    d = estimate(spec, s8).peak_allocated_bytes - estimate(spec, s).peak_allocated_bytes
    assert d == round_up_bytes(2 * N) + round_up_bytes(2 * LAYER_MM) - round_up_bytes(st.params) \
        - round_up_bytes(LAYER_MM)
    assert abs(d - 2 * LAYER_MM) < 2048


@pytest.mark.parametrize("kw, says", [
    (dict(engine="fsdp2", grad_reduce_16bit=True), "--grad-reduce-16bit is a megatron option"),
    (dict(engine="megatron", precision="fp32", grad_reduce_16bit=True), "--grad-reduce-16bit is a megatron option"),
    (dict(engine="megatron", fp8_params=True), "--fp8-params needs --engine megatron with --precision fp8"),
    (dict(engine="megatron", precision="fp8", fp8_params=True, zero=0), "--fp8-params needs the distributed optimizer"),
])
def test_the_knobs_are_refused_where_the_engine_has_none(kw, says) -> None:
    with pytest.raises(ConfigError, match=says):
        make_setup(gpus=8, **kw)


def test_exact_gelu_gpt2_keeps_two_mlp_tensors_not_five() -> None:
    """The GPT-2-shaped stand-in of Megatron GPT / MPT: Megatron keeps 2 tensors of width 4h (16 B per token
    per h in bf16) for either GeLU: the activation's input (fused_bias_gelu.py ``save_for_backward(input,
    bias)``; ``--openai-gelu``'s ``gelu_impl`` is a torch.compile'd pointwise function whose backward keeps
    its input, megatron/core/transformer/utils.py core_v0.19.0 L58-62) and linear_fc2's input. The
    transformers module (torch engine, bf16) keeps 2 for native GeLU and 5 for gelu_new's formula."""
    from trainmem.memory.activations import layer_saved
    h, L = 1024, 4
    cfg = {"model_type": "gpt2", "n_embd": h, "n_layer": L, "n_head": 8, "n_inner": 4 * h, "vocab_size": 1000,
           "n_positions": 2048, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
    s = make_setup(engine="megatron", gpus=1, seq_len=2048)
    s_hf = make_setup(engine="torch", precision="bf16", gpus=1, seq_len=2048)
    T = 2048
    mlp, hf = {}, {}
    for act in ("gelu", "gelu_new"):
        spec = spec_from_hf_config({**cfg, "activation_function": act}, name=f"gpt2-{act}")
        mlp[act] = sum(t.bytes for t in layer_saved(spec, s, 0).terms if t.name in ("mlp_act_input", "mlp_down_input"))
        hf[act] = next(t.bytes for t in layer_saved(spec, s_hf, 0).terms if t.name == "mlp_intermediate")
    assert mlp["gelu"] == mlp["gelu_new"] == 2 * 2 * 4 * h * T
    assert hf["gelu"] == 2 * 2 * 4 * h * T
    assert hf["gelu_new"] == 5 * 2 * 4 * h * T
