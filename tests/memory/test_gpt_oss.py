"""gpt_oss's per-layer saved tensors and transients, term by term, computed by hand.

Read from transformers 5.24.0 (models/gpt_oss/modeling_gpt_oss.py; integrations/moe.py
``grouped_mm_experts_forward``, the experts' default implementation) and checked against the real module
(``saved_tensors_hooks`` on the CPU) and the fake-tensor tracer (tests/trace/test_gpt_oss_trace.py).

The tiny model (tests/memory/tiny_configs.py GPT_OSS_TINY): h 256, 8 heads and 2 kv heads of d 32, 4 experts
of width i 256, top-k 2, vocabulary 512, three layers (sliding, full, sliding). Notation as activations.py:
c compute bytes, r residual bytes, ce the experts' bytes (fp32 under autocast: the weights' dtype).
"""

from __future__ import annotations

import pytest

from tests.memory.tiny_configs import GPT_OSS_TINY
from trainmem.memory.activations import layer_saved
from trainmem.memory.gpt_oss_frames import (gpt_oss_forward_peak_bytes, gpt_oss_recompute_frame_bytes,
                                            sink_attention_backward_bytes, sink_attention_forward_peak_bytes)
from trainmem.memory.layers.attention import eager_softmax_bytes
from trainmem.memory.layers.model_wide import model_wide_saved_bytes
from trainmem.model.catalog import load_catalog_spec
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

SPEC = spec_from_hf_config(GPT_OSS_TINY, name="gpt_oss-tiny")


def _per_token(setup) -> dict[str, float]:
    T = setup.micro_batch * setup.seq_len
    return {t.name: t.bytes / T for t in layer_saved(SPEC, setup, 1).terms}


def test_bf16_layer_terms_by_hand():
    """Pure bf16 (c = r = ce = 2), eager, s = 512, per token:
    GptOssRMSNorm keeps the fp32 input copy and the fp32 normalised value the weight multiplies, 8·256, plus
    its fp32 rsqrt row (4): 2,052, twice. q/k/v read the one norm output (2·256 = 512). q, the repeated k and
    v (2·8·32 = 512 each), o_proj's input (512). The sink softmax keeps its (s + 1)-wide output, 2·8·513 =
    8,208, and the row maxima's int64 indices, 8·8 = 64; P·V keeps a view of it. The router keeps its input
    (512), topk's indices (8·2), its softmax output (2·2), the dispatch's four int64 index tensors (4·8·2) and
    the gathered routing weights (2·2): 16 + 4 + 64 + 4 = 88. Per (token, expert) pair, 2 per token: the
    gathered token (2·256), gate_up (2·512) plus the clamped gate, sigmoid, up + 1, glu (4·2·256) = 6·2·256,
    the gated product (2·256), the down output (2·256)."""
    got = _per_token(make_setup(precision="bf16", attn="eager", seq_len=512, micro_batch=4))
    assert got == {
        "input_norm": 2052, "qkv_input": 512, "q": 512, "k_repeated": 512, "v_repeated": 512,
        "sink_max_indices": 64, "probs": 8208, "o_input": 512, "post_attention_norm": 2052,
        "moe_input": 512, "router": 88, "expert_inputs": 1024, "expert_gate_up": 6144,
        "expert_down_input": 1024, "expert_outputs_weighted": 1024}
    # 2,052·2 + 512·6 + 64 + 8,208 + 88 + 1,024·3 + 6,144 = 24,752 B per token, T = 2,048
    assert layer_saved(SPEC, make_setup(precision="bf16", attn="eager", seq_len=512, micro_batch=4), 1).total_bytes \
        == 24_752 * 2_048


def test_amp_layer_terms_by_hand():
    """amp-bf16 (c 2, r 4, ce 4), eager, s = 512: the norms keep the fp32 residual itself and the normalised
    value (still 2,052); each projection its own 16-bit cast of the fp32 norm output (3·512, the router 512);
    the fp32 mask promotes the scores, so softmax keeps 4·8·513 = 16,416 and P·V the 16-bit copy of the
    probabilities, 2·8·512 = 8,192; the experts run in fp32: 2·4·256 = 2,048 per h- or i-wide tensor, gate_up
    and the gate's tensors 6·4·256·2 = 12,288; routing state unchanged (the router's logits are 16-bit)."""
    got = _per_token(make_setup(precision="amp-bf16", attn="eager", seq_len=512, micro_batch=4))
    assert got == {
        "input_norm": 2052, "qkv_input": 1536, "q": 512, "k_repeated": 512, "v_repeated": 512,
        "sink_max_indices": 64, "softmax_fp32": 16416, "probs_16bit": 8192, "o_input": 512,
        "post_attention_norm": 2052, "moe_input": 512, "router": 88, "expert_inputs": 2048,
        "expert_gate_up": 12288, "expert_down_input": 2048, "expert_outputs_weighted": 2048}
    assert sum(got.values()) == 51_392


def test_fp32_layer_terms_by_hand():
    """fp32 (c = r = ce = 4), eager, s = 256: 4-byte tensors everywhere, no 16-bit copy of the probabilities
    (4·8·257 = 8,224); the router's two c·k tensors are 4·2 each: 64 + 16 + 8 + 8 = 96."""
    got = _per_token(make_setup(precision="fp32", attn="eager", seq_len=256, micro_batch=2))
    assert got == {
        "input_norm": 2052, "qkv_input": 1024, "q": 1024, "k_repeated": 1024, "v_repeated": 1024,
        "sink_max_indices": 64, "softmax_fp32": 8224, "o_input": 1024, "post_attention_norm": 2052,
        "moe_input": 1024, "router": 96, "expert_inputs": 2048, "expert_gate_up": 12288,
        "expert_down_input": 2048, "expert_outputs_weighted": 2048}


def test_sliding_and_full_layers_keep_the_same():
    """The 64-token window is an additive mask on the full (s, s + 1) scores: layers 0 (sliding) and 1 (full)
    keep the same bytes."""
    setup = make_setup(precision="bf16", attn="eager", seq_len=256, micro_batch=2)
    assert layer_saved(SPEC, setup, 0).terms == layer_saved(SPEC, setup, 1).terms


def test_gpt_oss_120b_layer_by_hand():
    """gpt-oss-120b (h 2880, 64 heads and 8 kv heads of 64, top-4 of 128 experts of width 2880), bf16, eager,
    s = 4,096, per token: norms 2·(8·2880 + 4) = 46,088; norm output 5,760 (q/k/v) and 5,760 (router); q, k, v,
    o_proj input 4·2·4096 = 32,768; probs 2·64·4,097 = 524,416; indices 8·64 = 512; router 40·4 + 2·2·2·4 =
    176; experts 4 pairs · (2·2880 + 6·2·2880 + 2·2880 + 2·2880) = 4 · 51,840 = 207,360. Total 822,840: the
    sink softmax alone is 64 %."""
    spec = load_catalog_spec("gpt-oss-120b")
    setup = make_setup(precision="bf16", attn="eager", seq_len=4096, micro_batch=1)
    saved = layer_saved(spec, setup, 0)
    assert saved.total_bytes == 822_840 * 4096
    assert next(t.bytes for t in saved.terms if t.name == "probs") == 524_416 * 4096


def test_measured_on_the_real_module():
    """The terms against what the real transformers layer saves (saved_tensors_hooks, CPU, pure 16-bit and
    fp32; the experts' grouped_mm runs for real on the CPU)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.measure import measured_layer_saved_bytes

    for prec, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        measured = measured_layer_saved_bytes(GPT_OSS_TINY, attn="eager", dtype=dtype, b=2, s=64)
        est = layer_saved(SPEC, make_setup(precision=prec, attn="eager", seq_len=64, micro_batch=2), 1).total_bytes
        assert est == pytest.approx(measured, rel=0.005), (prec, est, measured)


def test_softmax_dtype():
    """gpt_oss softmaxes in the scores' dtype; Llama-style families in fp32; GPT-2 in the compute dtype."""
    from tests.memory.tiny_configs import TINY
    llama = spec_from_hf_config(TINY["llama-gqa"], name="l")
    gpt2 = spec_from_hf_config(TINY["gpt2"], name="g")
    got = {p: (eager_softmax_bytes(SPEC, make_setup(precision=p, attn="eager")),
               eager_softmax_bytes(llama, make_setup(precision=p, attn="eager")),
               eager_softmax_bytes(gpt2, make_setup(precision=p, attn="eager")))
           for p in ("bf16", "amp-bf16", "fp32")}
    assert got == {"bf16": (2, 4, 2), "amp-bf16": (4, 4, 2), "fp32": (4, 4, 4)}


def test_attention_transients_by_hand():
    """bf16, eager, s = 512, b = 4 (T = 2,048):

    - backward: the incoming gradient 2·2048·256 = 1,048,576 plus the larger of the q/k/v gradients
      2·2048·(256 + 2·64) = 1,572,864 and two (b, a, s, s + 1) 16-bit gradients 2·2·4·8·512·513 = 33,619,968:
      34,668,544;
    - forward peak of the attention: saved by then (2,052 + 512 + 3·512 + 64 + 8,208)·2048 = 25,337,856, the
      masked scores and the max-subtracted logits 2·8·(512 + 513) = 16,400 and the rotary k and v_proj's output
      2·2·64 = 256 per token: 16,656·2048 = 34,111,488; total 59,449,344;
    - the layer's forward peak above what came before it: the layer input and inputs_embeds (16-bit stream:
      2·2·256·2048 = 2,097,152) and the two (4, 1, 512, 512) bf16 masks (2·2,097,152) beside the larger of
      59,449,344 and the whole layer (24,752·2048 = 50,692,096) plus the experts' tail (3·2·256·2·2048 =
      6,291,456): 6,291,456 + 59,449,344 = 65,740,800."""
    setup = make_setup(precision="bf16", attn="eager", seq_len=512, micro_batch=4)
    assert sink_attention_backward_bytes(SPEC, setup) == 34_668_544
    assert sink_attention_forward_peak_bytes(SPEC, setup) == 59_449_344
    assert gpt_oss_forward_peak_bytes(SPEC, setup) == 65_740_800
    flash = make_setup(precision="bf16", attn="flash", seq_len=512, micro_batch=4)
    assert sink_attention_backward_bytes(SPEC, flash) == sink_attention_forward_peak_bytes(SPEC, flash) == 0
    from tests.memory.tiny_configs import TINY
    assert gpt_oss_forward_peak_bytes(spec_from_hf_config(TINY["mixtral"], name="m"), setup) == 0


def test_recompute_frame_by_hand():
    """amp-bf16, eager, full recompute, s = 256, b = 4 (T = 1,024), ce = 4:

    - the gradient that starts the recomputation, 4·256·2·1024 = 2,097,152;
    - the stop: down bias rows and weighted_out (2·4·256) and the arange (8) per pair, 2 pairs: 4,210,688,
      with the fp32 post-attention norm output 4·256·1024 = 1,048,576: 5,259,264;
    - the recomputed attention's peak, (2,052 + 1,536 + 1,536 + 64 + 8,224 + 4,096 + 4·8·513 + 2·2·64
      + 4·(2·256 + 64) + 4·256)·1024 = 38,408,192, is below the layer's saved 39,104·1024 = 40,042,496;
    so layer 0: 2,097,152 + 5,259,264 = 7,356,416; layer 1 (full attention) adds the sliding layers' mask still
    held by layer 0's checkpoint: 4·256·256·4 = 1,048,576. model_wide_saved_bytes: cos and sin (1, 256, 16) in
    fp32, 2·256·16·4 = 32,768, plus layer 0's mask, 1,048,576."""
    setup = make_setup(precision="amp-bf16", attn="eager", seq_len=256, micro_batch=4, recompute="full")
    assert layer_saved(SPEC, setup, 0).total_bytes == 39_104 * 1024
    assert sink_attention_forward_peak_bytes(SPEC, setup) == 38_408_192
    assert gpt_oss_recompute_frame_bytes(SPEC, setup, 0) == 7_356_416
    assert gpt_oss_recompute_frame_bytes(SPEC, setup, 1) == 7_356_416 + 1_048_576
    assert model_wide_saved_bytes(SPEC, setup) == 32_768 + 1_048_576
    no_rc = make_setup(precision="amp-bf16", attn="eager", seq_len=256, micro_batch=4)
    assert gpt_oss_recompute_frame_bytes(SPEC, no_rc, 0) == 0
    assert model_wide_saved_bytes(SPEC, no_rc) == 32_768


def test_lora_freezes_the_experts_and_router():
    """LoRA adapts attention only (PEFT cannot adapt gpt_oss's stacked experts or its router): the frozen
    router and experts keep no inputs for their weights (moe_input, the gathered tokens, the down GEMM's input
    go) and the bias gathers no sorted expert ids; the gate's tensors and the down output (for the routing
    weights' gradient) stay. bf16, s = 256, layer 1, per token: router 88 − 8·2 = 72; gate_up 6·2·256·2 =
    6,144; the down output 2·256·2 = 1,024."""
    got = _per_token(make_setup(precision="bf16", attn="eager", seq_len=256, micro_batch=2, lora_rank=8,
                                lora_targets=("q_proj", "v_proj")))
    moe = {k: v for k, v in got.items() if k in ("moe_input", "router") or k.startswith("expert")}
    assert moe == {"router": 72, "expert_gate_up": 6144, "expert_outputs_weighted": 1024}
