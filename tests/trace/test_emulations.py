"""Each CUDA emulation, tested so that it fails when the emulation is off or wrong."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trace._specs import LLAMA_TINY, make_spec  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.autocast import cuda_autocast  # noqa: E402
from trainmem.trace.sdpa import cuda_backend  # noqa: E402
from trainmem.trace.step import trace_step  # noqa: E402

SPEC = make_spec(LLAMA_TINY)
MATMUL_WEIGHTS = 2 * (4 * 128 * 128 + 3 * 128 * 256) + 1024 * 128  # q,k,v,o, gate,up,down; lm_head


# -- sdpa -------------------------------------------------------------------------------------
def test_sdpa_backend_choice():
    q = torch.empty(1, 4, 8, 64, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(1, 2, 8, 64, dtype=torch.bfloat16, device="meta")
    assert cuda_backend(q, kv, kv, None, True) == "flash"
    assert cuda_backend(q.float(), q.float(), q.float(), None, False) == "efficient"
    assert cuda_backend(q.float(), kv.float(), kv.float(), None, True) == "math"
    mask = torch.empty(1, 1, 8, 8, dtype=torch.bool, device="meta")
    assert cuda_backend(q, q, q, mask, False) == "efficient"


def test_sdpa_with_dropout_keeps_no_s_squared_buffer():
    """fp32, attention dropout 0.1: CUDA's memory-efficient kernel keeps no b·a·s² matrix; the CPU
    falls back to the math kernel, which keeps the fp32 probabilities and the dropout mask."""
    b, a, s, L = 2, 4, 256, 2
    s2_bytes = b * a * s * s * 4
    spec = make_spec({**LLAMA_TINY, "attention_dropout": 0.1})
    setup = make_setup(precision="fp32", seq_len=s, micro_batch=b)
    drop = trace_step(spec, setup).category_peak_bytes["activations"]
    no_drop = trace_step(SPEC, setup).category_peak_bytes["activations"]
    assert drop - no_drop < s2_bytes / 8  # only the philox seeds (and rounding)
    cpu = trace_step(spec, setup, _emulate=False).category_peak_bytes["activations"]
    assert cpu - drop >= L * s2_bytes  # what the emulation removes


# -- autocast ---------------------------------------------------------------------------------
def _saved_dtypes(fn):
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.dtype) or t, lambda t: t):
        out = fn()
    return out.dtype, sorted(map(str, saved))


def test_autocast_matches_cpu_autocast_where_lists_agree():
    x = torch.randn(4, 8)
    lin = torch.nn.Linear(8, 16)

    def run():
        return _saved_dtypes(lambda: lin(x) @ torch.randn(16, 2))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        real = run()
    with cuda_autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
        emulated = run()
    assert real == emulated and real[0] == torch.bfloat16


def test_autocast_uses_cuda_lists_not_cpu_lists():
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.softmax(x, -1).dtype == torch.bfloat16  # CPU autocast: softmax not listed
        assert torch.exp(x).dtype == torch.bfloat16
    with cuda_autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.softmax(x, -1).dtype == torch.float32  # CUDA: fp32_set_opt_dtype
        assert torch.exp(x).dtype == torch.float32          # CUDA: fp32
        assert torch.nn.functional.layer_norm(x, (8,)).dtype == torch.float32


def test_autocast_weight_cache_lives_until_region_exit():
    lin = torch.nn.Linear(8, 8)
    casts = []
    with cuda_autocast(casts.append) as mode:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lin(torch.randn(2, 8))
            lin(torch.randn(2, 8))
            assert len(casts) == 2  # weight and bias, cast once for both calls
            assert len(mode.cache) == 2
        assert len(mode.cache) == 0  # cleared when the outermost region exits


def test_amp_trace_holds_16bit_weight_copies():
    r = trace_step(SPEC, make_setup(precision="amp-bf16", seq_len=256, micro_batch=2))
    assert r.peak_phase.startswith("backward")
    assert r.amp_weight_copies_at_peak_bytes == 2 * MATMUL_WEIGHTS


# -- optimizer ----------------------------------------------------------------------------------
def test_foreach_temporaries_at_optimizer_step():
    n = SPEC.hf_config
    r = trace_step(SPEC, make_setup(precision="fp32", seq_len=32))
    n_params = r.n_params
    step_peak = r.phase_peak_bytes["optimizer.step"] - r.static_bytes
    # grads (4·N) + the group-wide _foreach_sqrt(exp_avg_sq) temporary (4·N), + a few scalars
    assert 8 * n_params <= step_peak < 8 * n_params + 64 * 1024, n


# -- moe ----------------------------------------------------------------------------------------
MIXTRAL_TINY = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "num_local_experts": 4,
                "num_experts_per_tok": 2}


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp-bf16"])
def test_moe_experts_trace_in_every_recipe(precision):
    spec = make_spec(MIXTRAL_TINY, architecture="MixtralForCausalLM")
    r = trace_step(spec, make_setup(precision=precision, seq_len=64))
    assert any(e.startswith("moe") for e in r.emulations)


def test_moe_activations_grow_with_top_k():
    setup = make_setup(precision="bf16", seq_len=128)
    k1 = trace_step(make_spec({**MIXTRAL_TINY, "num_experts_per_tok": 1}, "MixtralForCausalLM"), setup)
    k2 = trace_step(make_spec(MIXTRAL_TINY, "MixtralForCausalLM"), setup)
    assert k2.category_peak_bytes["activations"] > k1.category_peak_bytes["activations"]


# -- dropout ----------------------------------------------------------------------------------
def test_dropout_keeps_a_bool_mask_as_on_cuda():
    """GPT-2 block, bf16, dropout 0.1 after the attention projection and the MLP (+ the embedding):
    CUDA's fused native_dropout keeps a 1-byte bool mask per element, (2·L + 1)·b·s·h bytes in all;
    the CPU's dropout keeps a mask in the input dtype (2 bytes)."""
    from trainmem.model.hf import spec_from_hf_config

    cfg = {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4, "n_positions": 512,
           "vocab_size": 1024, "attn_pdrop": 0.0}
    b, s, L, h = 2, 128, 2, 128
    setup = make_setup(precision="bf16", seq_len=s, micro_batch=b)
    with_drop = spec_from_hf_config({**cfg, "resid_pdrop": 0.1, "embd_pdrop": 0.1}, name="gpt2-drop")
    no_drop = spec_from_hf_config({**cfg, "resid_pdrop": 0.0, "embd_pdrop": 0.0}, name="gpt2")
    masks = (2 * L + 1) * b * s * h
    act = lambda sp, **kw: trace_step(sp, setup, **kw).breakdown_at_peak_bytes["activations"]  # noqa: E731
    assert act(with_drop) - act(no_drop) == pytest.approx(masks, abs=5 * 512)
    assert act(with_drop, _emulate=False) - act(no_drop, _emulate=False) >= 2 * masks - 5 * 512


def test_adafactor_traces_with_factored_state():
    """torch.optim.Adafactor reads .item() of its step and of norms; the tracker gives fake tensors a
    neutral value. Its state is factored: far below one value per parameter."""
    res = trace_step(SPEC, make_setup(precision="fp32", optimizer="adafactor", seq_len=64))
    n_params = res.n_params
    assert 0 < res.breakdown_at_peak_bytes["optimizer_states"] + res.category_peak_bytes["optimizer_states"] < n_params
