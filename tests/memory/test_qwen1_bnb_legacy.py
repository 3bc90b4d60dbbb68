"""Qwen1 (remote-code QWenLMHeadModel) and ``--qlora-impl bnb-legacy``, by hand.

transformers has no Qwen1 class, so its layer cannot be traced. The estimator's Qwen1 layer is measured against
an op-for-op rewrite of modeling_qwen.py's block (tests/memory/qwen1_block.py, saved_tensors_hooks on the CPU,
SDPA branch, bf16 and fp32: equal to the byte); it is also held to its Phi-3-shaped twin (a fused qkv projection
whose output v stays a view of, rotary making new q and k, a gated MLP whose four width-i tensors are kept, two
RMSNorms), and the 16-bit loss is checked by hand.
"""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.activations import layer_saved
from trainmem.memory.bnb_legacy import legacy_matmul4bit_input_bytes_per_token
from trainmem.memory.loss import loss_buffers
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

QWEN_TOY = {"model_type": "qwen", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
            "kv_channels": 64, "intermediate_size": 1408, "vocab_size": 1000, "no_bias": True}
#: The same shapes as Phi-3: one fused qkv_proj (h -> 3h), o_proj, fused gate_up (h -> 2·704), down
PHI3_TWIN = {"model_type": "phi3", "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
             "num_key_value_heads": 4, "intermediate_size": 704, "vocab_size": 1000, "tie_word_embeddings": False,
             "max_position_embeddings": 4096, "sliding_window": None}


def test_qwen1_toy_counts_by_hand():
    spec = spec_from_hf_config(QWEN_TOY, name="toy")
    h, i, V = 256, 704, 1000
    block = 2 * h + (h * 3 * h + 3 * h) + h * h + 3 * h * i
    assert spec.n_params == 2 * V * h + 3 * block + h
    assert spec.intermediate_size == i and spec.head_dim == 64


@pytest.mark.parametrize("prec", ["bf16", "amp-bf16"])
@pytest.mark.parametrize("attn", ["flash"])
def test_qwen1_layer_saves_what_its_phi3_twin_saves(prec, attn):
    setup = make_setup(precision=prec, attn=attn, seq_len=128, micro_batch=2)
    qwen = layer_saved(spec_from_hf_config(QWEN_TOY, name="q"), setup, 1).total_bytes
    phi3 = layer_saved(spec_from_hf_config(PHI3_TWIN, name="p"), setup, 1).total_bytes
    # under autocast w1 and w2 each cast the fp32 norm output to 16 bits (autocast caches weights, not inputs);
    # Phi-3's one gate_up_proj casts it once
    assert qwen == phi3 + (2 * 256 * 2 * 128 if prec == "amp-bf16" else 0)


@pytest.mark.parametrize("prec", ["bf16", "fp32"])
@pytest.mark.parametrize("b,s", [(2, 64), (1, 128)])
def test_qwen1_layer_matches_a_measured_qwen_block(prec, b, s):
    """Against what autograd saves when Qwen1's block runs (tests/memory/qwen1_block.py: modeling_qwen.py's ops on
    torch 2 without flash-attn, measured with saved_tensors_hooks on the CPU, by storage)."""
    torch = pytest.importorskip("torch")
    from tests.memory.qwen1_block import measured_block_saved_bytes

    dtype = torch.bfloat16 if prec == "bf16" else torch.float32
    measured = measured_block_saved_bytes(h=256, heads=4, inter=1408, b=b, s=s, dtype=dtype)
    spec = spec_from_hf_config(QWEN_TOY, name="q")
    est = layer_saved(spec, make_setup(precision=prec, attn="sdpa", seq_len=s, micro_batch=b), 1).total_bytes
    assert est == measured


def test_qwen1_sdpa_keeps_its_per_layer_mask():
    """Without flash-attn each QWenAttention builds a (b, 1, s, s) mask in the compute dtype for SDPA."""
    spec = spec_from_hf_config(QWEN_TOY, name="q")
    b, s = 2, 128
    flash = layer_saved(spec, make_setup(precision="bf16", attn="flash", seq_len=s, micro_batch=b), 1)
    sdpa = layer_saved(spec, make_setup(precision="bf16", attn="sdpa", seq_len=s, micro_batch=b), 1)
    assert sdpa.total_bytes - flash.total_bytes == 2 * b * s * s


def test_qwen1_loss_is_16bit_cross_entropy():
    """QWenLMHeadModel.forward: CrossEntropyLoss on lm_logits[..., :-1, :].contiguous(), no upcast. Qwen-7B, bf16,
    b·s = 2048 tokens: n = 2048 · 151,936 logits; 2 B each for the logits, the shifted copy, log_softmax's kept
    output, its two backward gradients and the head's gradient. Under autocast log_softmax runs in fp32 (the
    upcast path)."""
    spec, setup = build("qwen-7b", precision="bf16", seq_len=2048)
    n = 2048 * 151936
    lb = loss_buffers(spec, setup)
    assert (lb.logits_bytes, lb.kept_bytes, lb.forward_transient_bytes, lb.backward_transient_bytes,
            lb.grad_logits_bytes) == (2 * n, 2 * n, 2 * n, 4 * n, 2 * n)
    spec, amp = build("qwen-7b", precision="amp-bf16", seq_len=2048)
    assert loss_buffers(spec, amp).kept_bytes == 4 * n
    llama, s2 = build("llama-2-7b", precision="bf16", seq_len=2048)
    assert loss_buffers(llama, s2).kept_bytes == 4 * 2048 * 32000   # transformers upcasts


def test_qwen1_lora_targets():
    spec, setup = build("qwen-7b-chat", precision="bf16", lora_rank=8, lora_targets="c_attn")
    assert setup.lora_targets == ("c_attn",)
    assert estimate(spec, setup).n_trainable_params == 32 * 8 * (4096 + 3 * 4096)


# -- bitsandbytes < 0.43.2 --------------------------------------------------------------------------------
#: litgpt's QLoRA recipe (benchmarks/published_points.json litgpt-llama2-7b-qlora): its own loop keeps the logits
LITGPT = dict(engine="torch", precision="bf16", attn="sdpa", seq_len=512, micro_batch=2, lora_rank=32,
              lora_targets="q_proj,v_proj", qlora=True, loop="script", loss="chunked", loss_chunks=4, gpu="A10-24G")


def test_legacy_matmul4bit_keeps_each_distinct_16bit_input():
    """Llama-2-7B layer, 16-bit: q/k/v read one norm output (2·4096 B a token), o_proj reads the kernel's saved
    output (nothing new), gate/up one norm output (2·4096), down the product (2·11008): 38,400 B a token."""
    spec, setup = build("llama-2-7b", qlora_impl="bnb-legacy", **LITGPT)
    assert legacy_matmul4bit_input_bytes_per_token(spec, setup, 0, kernel_keeps_out=True) == 38_400
    assert legacy_matmul4bit_input_bytes_per_token(spec, setup, 0, kernel_keeps_out=False) == 38_400 + 2 * 4096
    # first layer, frozen input: nothing before (and at) the first adapted linear's input requires grad
    assert legacy_matmul4bit_input_bytes_per_token(spec, setup, 0, kernel_keeps_out=True, input_frozen=True) == 30_208
    mlp_only, s2 = build("llama-2-7b", qlora_impl="bnb-legacy", **{**LITGPT, "lora_targets": "down_proj"})
    assert legacy_matmul4bit_input_bytes_per_token(mlp_only, s2, 0, kernel_keeps_out=True, input_frozen=True) == 0


def test_bnb_legacy_peak_adds_every_layers_inputs_and_one_layer_under_recompute():
    """No checkpointing: 31 layers x 38,400 B + layer 0's 30,208 B (its q/k/v read the norm of the frozen
    embedding, which needs no grad: ``ctx.tensors = (A, B)`` only ``if any(ctx.needs_input_grad[:2])``) over
    1,024 tokens = 1,249,902,592 B more at the backward peak; with HF's reentrant checkpointing (the layer input
    requires grad) only the layer being recomputed keeps them: 39,321,600 B."""
    new = estimate(*build("llama-2-7b", qlora_impl="bnb", **LITGPT)).peak_allocated_bytes
    old = estimate(*build("llama-2-7b", qlora_impl="bnb-legacy", **LITGPT)).peak_allocated_bytes
    assert old - new == (31 * 38_400 + 30_208) * 1024 == 1_249_902_592
    new_ac = estimate(*build("llama-2-7b", qlora_impl="bnb", recompute="full", **LITGPT)).peak_allocated_bytes
    old_ac = estimate(*build("llama-2-7b", qlora_impl="bnb-legacy", recompute="full", **LITGPT)).peak_allocated_bytes
    assert old_ac - new_ac == 38_400 * 1024


def test_bnb_legacy_needs_qlora():
    with pytest.raises(Exception, match="needs --qlora"):
        build("llama-2-7b", qlora_impl="bnb-legacy")


# -- Cut Cross-Entropy (--loss cce) -----------------------------------------------------------------------
def test_cut_cross_entropy_keeps_no_logits():
    """apple/ml-cross-entropy LinearCrossEntropyFunction: lse (fp32) and valid indices (int64) per token and the
    mean logit per vocabulary entry (fp32) kept; the target logits (fp32) in the forward; the vocabulary order
    (int32) in the backward. Llama-3.2-1B, b·s = 4096 tokens, V = 128,256."""
    from trainmem.memory.loss import cut_cross_entropy_buffers

    spec, setup = build("llama-3.2-1b", precision="bf16", seq_len=4096, loss="cce")
    lb = loss_buffers(spec, setup)
    assert lb == cut_cross_entropy_buffers(4096, 128256)
    assert (lb.logits_bytes, lb.kept_bytes, lb.forward_transient_bytes, lb.backward_transient_bytes,
            lb.grad_logits_bytes) == (0, 12 * 4096 + 4 * 128256, 4 * 4096, 4 * 128256, 0)
    hf = estimate(*build("llama-3.2-1b", precision="bf16", seq_len=4096)).peak_allocated_bytes
    cce = estimate(*build("llama-3.2-1b", precision="bf16", seq_len=4096, loss="cce")).peak_allocated_bytes
    assert cce < hf


def test_cut_cross_entropy_refusals():
    from trainmem.errors import TrainmemError

    with pytest.raises(TrainmemError, match="cce with tp"):
        build("llama-3.2-1b", engine="fsdp2", gpus=2, tp=2, loss="cce")
    pytest.importorskip("torch")
    from trainmem.trace.support import check_traceable

    with pytest.raises(TrainmemError, match="cannot trace --loss cce"):
        check_traceable(*build("llama-3.2-1b", loss="cce"))
