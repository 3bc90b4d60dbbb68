"""The megatron engine's per-layer saved activations, computed by hand from what Megatron-Core (core_v0.19.0)
and Transformer Engine (v2.9) modules save (trainmem/memory/megatron_activations.py cites file and line):

- GPT-2-style (LayerNorm, GeLU MLP of 4h, MHA, dropout, unfused attention, 16-bit) against Korthikanti et
  al. 2022 §4: 34·s·b·h + 5·a·s²·b, plus the norms' fp32 mean/rstd rows (8 B per token per LayerNorm), which
  the paper leaves out; with tensor parallelism s·b·h·(10 + 24/t + 5·a·s/(h·t)), with sequence parallelism
  all of it ÷ t;
- Llama (RMSNorm, SwiGLU, GQA, rotary, FusedAttention) tensor by tensor;
- fp8: the TE linears' saved inputs at 1 B, linear_proj's own fp8 copy of the attention output;
- sequence parallelism ÷ tp, selective and full recompute, and the planner's bound equal to the estimator's.
"""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.activations import layer_saved
from trainmem.memory.megatron_activations import megatron_te_layer
from trainmem.memory.plan import build_plan, kept_per_layer
from trainmem.memory.states import rank_params
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

H, A, SEQ, MB = 1024, 16, 2048, 2
GPT = {"model_type": "gpt2", "n_embd": H, "n_layer": 4, "n_head": A, "n_inner": 4 * H, "vocab_size": 1000,
       "n_positions": SEQ, "activation_function": "gelu", "attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}


def _gpt_layer(**kw) -> int:
    spec = spec_from_hf_config(GPT, name="gpt-korthikanti")
    s = make_setup(engine="megatron", seq_len=SEQ, micro_batch=MB, attn="eager", **kw)
    return layer_saved(spec, s, 0).total_bytes


def test_gpt_layer_is_korthikanti_34sbh_plus_5as2b() -> None:
    sbh, as2b = SEQ * MB * H, A * SEQ * SEQ * MB
    rows = 2 * 8 * SEQ * MB  # two LayerNorms' fp32 mu + rsigma per token
    assert _gpt_layer(gpus=1) == 34 * sbh + 5 * as2b + rows


def test_gpt_layer_tensor_parallel_is_korthikanti_10_plus_24_over_t() -> None:
    """Table 2 of the paper, tensor parallelism without sequence parallelism: sbh(10 + 24/t + 5as/(ht))."""
    t, sbh, as2b = 2, SEQ * MB * H, A * SEQ * SEQ * MB
    rows = 2 * 8 * SEQ * MB
    assert _gpt_layer(gpus=t, tp=t, sp=False) == 10 * sbh + 24 * sbh // t + 5 * as2b // t + rows


def test_gpt_layer_sequence_parallel_divides_everything_by_tp() -> None:
    """Sequence parallelism: sbh(34/t + 5as/(ht)) — the norms, their GEMM inputs and the dropout masks are
    sequence shards."""
    t, sbh, as2b = 4, SEQ * MB * H, A * SEQ * SEQ * MB
    rows = 2 * 8 * SEQ * MB
    assert _gpt_layer(gpus=t, tp=t, sp=True) == (34 * sbh + 5 * as2b + rows) // t


def _llama(tp: int = 1, sp: bool = False, **kw):
    spec, s = build("llama-3.1-8b", engine="megatron", gpus=tp, tp=tp, sp=sp, seq_len=4096, micro_batch=1, **kw)
    return spec, s


# Llama-3.1-8B: h 4096, 32 heads, 8 kv heads, head dim 128, MLP 14336
h, a, kv, d, i = 4096, 32, 8, 128, 14336


def _llama_bf16_per_token() -> int:
    """Each tensor Megatron-Core + TE keep for one token of a Llama layer, bf16, FusedAttention (H100)."""
    return (2 * h + 4            # linear_qkv LayerNormLinear: the norm's input (bf16) + fp32 rsigma
            + 2 * h              #   and its normalised output ln_out (bf16)
            + 2 * a * d          # FusedAttnFunc: q (rotary output)
            + 2 * kv * d         #   k (rotary output)
            + 2 * kv * d         #   v (contiguous copy of the fused-qkv view)
            + 2 * a * d          #   out (also linear_proj's input, a view)
            + 4 * a              #   softmax_lse (fp32)
            + 2 * h + 4          # linear_fc1 LayerNormLinear: norm input + rsigma
            + 2 * h              #   ln_out
            + 2 * 2 * i          # SwiGLUFunction: its input, fc1's output of width 2i
            + 2 * i)             # linear_fc2 Linear: its input, the SwiGLU product


def test_llama_layer_by_hand() -> None:
    spec, s = _llama()
    ls = layer_saved(spec, s, 0)
    assert ls.total_bytes == 4096 * _llama_bf16_per_token()
    assert ls.total_bytes < 35 * 4096 * h  # ~34·s·b·h in bf16, where the transformers module keeps ~49


def test_fp8_saves_te_linear_inputs_in_one_byte() -> None:
    """Under fp8 the four TE GEMM inputs (ln_out twice, fc2's input; linear_proj's is the attention output)
    are kept as 1-B Float8Tensors (columnwise data only), and linear_proj (delayed scaling) keeps its own
    1-B copy of the attention output beside FusedAttention's bf16 one; the norms' inputs, q/k/v/out and
    the SwiGLU input stay bf16."""
    spec, s8 = _llama(precision="fp8")
    per_token = _llama_bf16_per_token() - (h + h + i) + a * d
    assert layer_saved(spec, s8, 0).total_bytes == 4096 * per_token
    # the estimator walks the fp8 sizes although it runs the bf16 base recipe (estimate.py)
    assert estimate(spec, s8).activation_bytes_per_layer == 4096 * per_token


def test_sequence_parallel_divides_every_term_by_tp() -> None:
    spec, s1 = _llama()
    _, s4 = _llama(tp=4, sp=True)
    _, s4n = _llama(tp=4, sp=False)
    one = {t.name: t.bytes for t in layer_saved(spec, s1, 0).terms}
    four = {t.name: t.bytes for t in layer_saved(spec, s4, 0).terms}
    assert four == {k: v // 4 for k, v in one.items()}
    no_sp = {t.name: t.bytes for t in layer_saved(spec, s4n, 0).terms}
    for name in ("input_norm", "qkv_input", "post_attention_norm", "mlp_input"):
        assert no_sp[name] == one[name]  # replicated on every tensor-parallel rank without SP
    for name in ("q", "k", "v", "attn_out", "mlp_act_input", "mlp_down_input"):
        assert no_sp[name] == one[name] // 4


def test_selective_keeps_the_checkpointed_core_inputs_and_full_the_layer_input() -> None:
    """--recompute-granularity selective: CheckpointFunction saves q, k (rotary outputs) and v, a view that
    keeps linear_qkv's whole (a + 2kv)·d output alive; softmax_lse is recomputed; linear_proj still keeps
    the core's output. full: the layer input only (bf16)."""
    spec, s = _llama(recompute="selective")
    kept = kept_per_layer(spec, s)
    core = 2 * a * d + 2 * kv * d + 2 * kv * d + 4 * a
    ckpt = 2 * (a * d + kv * d) + 2 * (a * d + 2 * kv * d)
    assert kept == [4096 * (_llama_bf16_per_token() - core + ckpt)] * spec.num_layers
    spec, s = _llama(recompute="full")
    assert kept_per_layer(spec, s) == [4096 * 2 * h] * spec.num_layers


@pytest.mark.parametrize("model, kw", [
    ("llama-3.1-8b", dict(tp=2, sp=True)), ("llama-3.1-8b", dict(cp=2)),
    ("mixtral-8x7b", dict(ep=8, tp=1)), ("mixtral-8x7b", dict(tp=2, sp=True, ep=4)),
])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_planner_bound_equals_the_estimators_fp8_plan(model: str, kw: dict, recompute: str) -> None:
    """The planner's bound (kept_per_layer on the fp8 setup) is what the estimator's plan keeps (built on the
    bf16 base recipe with fp8=True), so it never refuses a configuration the estimate accepts."""
    spec, s8 = build(model, engine="megatron", precision="fp8", gpus=8, seq_len=4096, recompute=recompute, **kw)
    base = s8.model_copy(update={"precision": "mixed-bf16"})
    plan = build_plan(spec, base, rank_params(spec, base, 0), amp_copy=False, bulk=False, fp8=True)
    assert kept_per_layer(spec, s8)[: len(plan.saved_eff)] == plan.saved_eff


def test_mixtral_experts_keep_the_tp_gathered_tokens() -> None:
    """MoE (TEGroupedMLP): the alltoall dispatcher all-gathers the tokens over the tensor-parallel group
    before the experts (token_dispatcher.py L734-742): fc1's saved input is k·h per token of the whole
    sequence on every tp rank; the expert activations are ÷ tp (sharded mi); probs are applied in the
    weighted SwiGLU, so no expert output is kept."""
    spec, s1 = build("mixtral-8x7b", engine="megatron", gpus=8, ep=8, seq_len=4096)
    _, s2 = build("mixtral-8x7b", engine="megatron", gpus=8, ep=4, tp=2, sp=True, seq_len=4096)
    one = {t.name: t.bytes for t in layer_saved(spec, s1, 0).terms}
    two = {t.name: t.bytes for t in layer_saved(spec, s2, 0).terms}
    k, mi = 2, 14336
    assert one["expert_inputs"] == two["expert_inputs"] == 4096 * 2 * k * h
    assert one["expert_act_input"] == 4096 * (2 * 2 * k * mi + 4 * k)
    assert one["expert_down_input"] == 4096 * 2 * k * mi == 2 * two["expert_down_input"]
    assert "expert_outputs_weighted" not in one


def test_layers_megatron_does_not_build_keep_the_transformers_terms() -> None:
    """Parallel-residual (Falcon), MLA (DeepSeek) and Gemma-2 layers are not the TE GPT layer: the
    transformers-derived terms stay."""
    for model in ("falcon-7b", "deepseek-v2-lite", "gemma-2-2b"):
        spec, s = build(model, engine="megatron", gpus=8)
        assert not megatron_te_layer(spec)
        names = {t.name for t in layer_saved(spec, s, 0).terms}
        assert "mlp_intermediate" in names and "mlp_act_input" not in names
