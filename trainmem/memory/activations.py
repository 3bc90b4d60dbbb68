"""What one decoder layer saves for backward, per micro-batch, derived from what the real modules save.

Each term is the bytes autograd keeps alive from a layer's forward until that layer's backward,
for ``T = micro_batch * seq_len / cp`` tokens on this rank. The terms were derived by reading the
``transformers`` modules (5.24) op by op and checked against ``saved_tensors_hooks`` / traces
(tests/memory/test_activations_measured.py). Notation: ``c`` = bytes of the compute dtype (2 for 16-bit
and autocast, 4 for fp32); ``r`` = bytes of the residual stream (4 under autocast and fp32, 2 for pure
16-bit); ``h`` hidden, ``a``/``kv`` heads, ``d``/``dv`` head dims, ``i`` MLP width.

Where the saving differs from Korthikanti et al. 2022 (34·s·b·h + 5·a·s²·b): HF blocks keep an fp32 copy
of the norm input and the normalised value (RMSNorm), gated MLPs keep 4 tensors of width ``i``, and
rotary/q/k/v/out are kept separately; HF Llama with sdpa keeps about 46·s·b·h, not 34.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["Term", "LayerSaved", "layer_saved", "sdpa_math_fallback", "compute_bytes", "residual_bytes", "is_amp",
           "head_saved", "embedding_saved", "model_wide_saved_bytes"]

_GEMMA_NORM_MODELS = ("gemma", "gemma2", "gemma3_text", "gemma3")


@dataclass(frozen=True, slots=True)
class Term:
    """One saved tensor (or group) of a layer: bytes for T tokens on this rank."""

    name: str
    component: str
    """attention | mlp | norm | experts | router | dropout | lora | weight_copies"""
    bytes: int
    tp_split: bool = True
    """Divided by tensor parallelism (inside the column/row-parallel region)."""


@dataclass(frozen=True, slots=True)
class LayerSaved:
    terms: tuple[Term, ...]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    def by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            out[t.component] = out.get(t.component, 0) + t.bytes
        return out


def _fsdp2_mixed(setup: TrainingSetup) -> bool:
    """FSDP2's MixedPrecisionPolicy(param_dtype=16-bit) gathers 16-bit parameters and runs the module
    in 16 bits without autocast: activations are those of a pure 16-bit model."""
    return setup.engine == "fsdp2" and setup.precision in ("amp-bf16", "amp-fp16")


def is_amp(setup: TrainingSetup) -> bool:
    """torch.autocast over fp32 parameters (casts at every matmul)."""
    return setup.precision in ("amp-bf16", "amp-fp16") and not _fsdp2_mixed(setup)


def compute_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of matmul inputs/outputs: 4 for fp32, else 2."""
    return 4 if setup.precision == "fp32" else 2


def residual_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of the residual stream: fp32 params under autocast keep it fp32
    (embedding output and residual adds are not autocast ops); pure 16-bit models (and FSDP2 with a
    16-bit param_dtype) keep it 16-bit."""
    if _fsdp2_mixed(setup):
        return 2
    return 4 if setup.precision in ("fp32", "amp-bf16", "amp-fp16") else 2


def _norm_saved_per_elem(spec: ModelSpec, setup: TrainingSetup) -> float:
    """Bytes per normalised element a norm keeps for backward.

    - LlamaRMSNorm (modeling_llama.py): ``x.to(fp32)`` kept by ``pow`` (4 B; the input itself when
      already fp32) and ``x*rsqrt`` cast back to the input dtype, kept by ``weight *`` (r B): 4 + r.
    - GemmaRMSNorm: ``x.float()`` (4) and the fp32 normalised value kept by ``* (1 + w)`` (4): 8.
    - nn.LayerNorm (native_layer_norm): its input (r B; fp32 under CUDA autocast, where layer_norm
      is an fp32 op, and the residual is fp32 already) plus mean/rstd (8 B per row, negligible).
    """
    r = residual_bytes(setup)
    if spec.norm == "layernorm":
        return float(r) + 8.0 / spec.hidden_size
    rows = 4.0 / spec.hidden_size  # rsqrt(variance + eps): one fp32 value per row, kept by the multiply
    if spec.model_type in _GEMMA_NORM_MODELS:
        return 8.0 + rows
    return 4.0 + r + rows


def _linear_inputs_saved(setup: TrainingSetup, n_consumers: int, width: int) -> float:
    """Bytes per token kept by the linears that read one norm output of ``width`` features.
    Pure/fp32: the one shared input tensor (r or c B). Autocast: each linear casts its input to
    16 bits itself (no cache for non-leaf tensors, aten/src/ATen/autocast_mode.h cached_cast), so
    every consumer keeps its own 2-byte copy."""
    if is_amp(setup):
        return 2.0 * n_consumers * width
    return float(residual_bytes(setup) if setup.precision != "fp32" else 4) * width


def layer_saved(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> LayerSaved:
    """Bytes one layer keeps for backward for one micro-batch on this rank, by term (no recompute).

    Tensor/sequence/context parallelism are applied here: tp-split terms ÷ tp; with sp every term ÷ tp;
    tokens ÷ cp.
    """
    T = setup.micro_batch * setup.seq_len // setup.cp
    s = setup.seq_len // setup.cp
    b = setup.micro_batch
    h, a, kv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads
    d, dv = spec.head_dim, spec.v_head_dim
    c = compute_bytes(setup)
    r = residual_bytes(setup)
    amp = is_amp(setup)
    mt = spec.model_type
    terms: list[Term] = []

    def add(name: str, component: str, per_token: float, tp_split: bool = True) -> None:
        terms.append(Term(name, component, int(round(per_token * T)), tp_split))

    norm_elem = _norm_saved_per_elem(spec, setup)
    fused_qkv = mt in ("phi3", "gpt2", "gpt_neox", "falcon")
    # --- attention block -----------------------------------------------------------------------
    add("input_norm", "norm", norm_elem * h, tp_split=False)
    if spec.q_lora_rank is not None or spec.kv_lora_rank is not None:
        _mla_terms(spec, setup, add)
    else:
        add("qkv_input", "attention", _linear_inputs_saved(setup, 1 if fused_qkv else 3, h), tp_split=False)
        if mt == "qwen3" or mt == "gemma3_text" or mt == "gemma3" or mt == "qwen3_moe":
            # q_norm/k_norm (RMSNorm over head_dim) on q and k: each keeps 4 + r B per element
            # the q/k projections' outputs are in the compute dtype (16-bit under autocast too): the
            # RMSNorm keeps an fp32 copy (4) and the normalised value cast back to it (c) per element
            add("qk_norm", "attention", ((4.0 + c if mt.startswith("qwen3") else 8.0) * d + 4.0) * (a + kv))
        _core_attention_terms(spec, setup, add, s=s, b=b)
    # --- mlp block ----------------------------------------------------------------------------
    if spec.parallel_residual and mt == "gpt_neox":
        # both norms read the same residual tensor: the second keeps only its mean/rstd rows
        add("post_attention_norm", "norm", 8.0, tp_split=False)
    elif not spec.parallel_residual:
        add("post_attention_norm", "norm", norm_elem * h, tp_split=False)
    if mt in ("gemma2", "gemma3_text", "gemma3"):
        # post_attention_layernorm + post_feedforward_layernorm outputs feed residual adds: each keeps
        # its fp32 input copy and normalised value (8 B) on the attention and MLP outputs.
        add("post_sublayer_norms", "norm", 2 * 8.0 * h, tp_split=False)
    moe = layer_idx in spec.moe_layer_indices
    if moe:
        _moe_terms(spec, setup, add)
    else:
        _mlp_terms(spec, setup, add, spec.intermediate_size)
    _dropout_terms(spec, setup, add, s=s)
    if setup.is_lora:
        _lora_terms(spec, setup, add)
    out: list[Term] = []
    for t in terms:
        div = setup.tp if (setup.sp or t.tp_split) else 1
        out.append(Term(t.name, t.component, t.bytes // div, t.tp_split))
    return LayerSaved(tuple(out))


def _core_attention_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int, b: int) -> None:
    """q/k/v/output of the attention core, by how each family's module builds them.

    - llama-style (separate q/k/v projections, full rotary): rotary makes new q and k; v is a view of
      v_proj's output; the kernel keeps q, k, v, out (+ fp32 logsumexp); o_proj reads the kernel output,
      which flash/efficient kernels already lay out as (b, s, a, d): no extra copy.
    - gpt2 (fused c_attn; training loop with use_cache=False): q, k, v are views of the fused output, so
      sdpa keeps the whole fused (b, s, 3h) tensor alive; eager reshapes them for bmm (copies) instead.
    - gpt_neox, phi3 (fused qkv, rotary): q and k are new (rotary cat), v a view of the fused output,
      which stays alive; dense reads a fresh contiguous copy of the attention output.
    Eager attention keeps the softmax output: fp32 (4 B per b·a·s² element) plus its 16-bit cast (2 B) in
    the llama-style ``softmax(..., dtype=float32).to(dtype)``; gpt2 and bert take softmax in the compute
    dtype (c B only).
    """
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    c = compute_bytes(setup)
    mt = spec.model_type
    # Fused CUDA kernels allocate their output as (b, s, a, d): HF's transpose(1, 2).contiguous() is
    # free for every family under sdpa (a CPU run differs: its kernel follows q's strides). Eager
    # attention's matmul output is (b, a, s, d), so the transpose makes a real copy.
    if setup.attn in ("sdpa", "flash"):
        # transformers passes enable_gqa when there is no mask (causal, no padding) and head dims are
        # equal and <= 256 (integrations/sdpa_attention.py use_gqa_in_sdpa); otherwise repeat_kv expands k/v.
        gqa_native = setup.attn == "flash" or (d == dv and d <= 256 and not spec.is_encoder
                                               and not sliding_window_mask(spec, setup))
        kv_eff = kv if gqa_native else a
        if mt == "falcon" and spec.hf_config.get("new_decoder_architecture"):
            kv_eff = a  # _split_heads: torch.broadcast_to(key, query.shape).flatten() copies k/v per head
        if sdpa_math_fallback(spec, setup):
            # fp32 with enable_gqa: CUDA has no fused kernel for it and runs the math composite
            # (_scaled_dot_product_attention_math): it keeps q, k and v expanded to every head, the
            # fp32 probabilities (4 B per b·a·s² element) and the output.
            add("q", "attention", c * a * d)
            add("k_repeated", "attention", c * a * d)
            add("v_repeated", "attention", c * a * dv)
            add("softmax_fp32", "attention", 4.0 * a * s)
            add("attn_out", "attention", c * a * dv)
            return
        if mt == "gpt2":
            # q, k and v are all views of c_attn's output: sdpa keeps the fused (b, s, 3h) tensor
            add("qkv_fused_out", "attention", c * (a * d + 2 * kv * d))
        elif mt in ("gpt_neox", "phi3"):
            # rotary makes new q and k; v stays a view of the fused output, which stays alive whole
            add("q", "attention", c * a * d)
            add("k", "attention", c * kv * d)
            add("qkv_fused_out", "attention", c * (a * d + 2 * kv * d))
        else:
            add("q", "attention", c * a * d)
            add("k", "attention", c * kv_eff * d)
            add("v", "attention", c * kv_eff * dv)
        add("attn_out", "attention", c * a * dv)
        add("logsumexp", "attention", 4.0 * a)  # (b, a, s) fp32
        return
    add("q", "attention", c * a * d)
    add("k_repeated", "attention", c * a * d)
    add("v_repeated", "attention", c * a * dv)
    fp32_softmax = mt not in ("gpt2", "bert", "roberta", "falcon")
    if fp32_softmax:
        add("softmax_fp32", "attention", 4.0 * a * s)
        if c == 2:
            add("probs_16bit", "attention", 2.0 * a * s)
    else:
        add("probs", "attention", float(c) * a * s)
    if spec.attn_logit_softcapping:
        add("softcap_tanh", "attention", float(c) * a * s)
    if spec.attention_dropout > 0:
        add("attn_dropout_mask", "attention", 1.0 * a * s)
        add("attn_dropout_out", "attention", float(c) * a * s)
    add("o_input", "attention", c * a * dv)


def sliding_window_mask(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Mistral-style sliding-window attention (mistral, mixtral, phi3; qwen2 with use_sliding_window):
    once the window does not cover the sequence, transformers builds an explicit (1, 1, s, s) boolean
    mask, so sdpa cannot use is_causal/enable_gqa: k and v are expanded to every head (repeat_kv) and
    CUDA runs the memory-efficient kernel, which keeps the mask."""
    sw = spec.sliding_window
    return (sw is not None and sw <= setup.seq_len // setup.cp and setup.attn == "sdpa"
            and spec.model_type in ("mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"))


def sdpa_math_fallback(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """CUDA SDPA falls back to the math kernel for fp32 inputs with native GQA (flash needs 16-bit,
    the memory-efficient kernel has no enable_gqa): trace/sdpa.py ``cuda_backend``."""
    return (setup.attn == "sdpa" and compute_bytes(setup) == 4 and spec.num_kv_heads < spec.num_attention_heads
            and spec.head_dim == spec.v_head_dim <= 256 and not spec.is_encoder
            and spec.q_lora_rank is None and spec.kv_lora_rank is None)


def _mlp_terms(spec: ModelSpec, setup: TrainingSetup, add, width: int) -> None:
    h = spec.hidden_size
    c = compute_bytes(setup)
    mt = spec.model_type
    if spec.mlp_gated:
        n_in = 1 if mt == "phi3" else 2
        add("mlp_input", "mlp", _linear_inputs_saved(setup, n_in, h), tp_split=False)
        # gate output (kept by the activation), act output and up output (kept by the product),
        # product (kept by down_proj): 4 tensors of width i.
        add("mlp_intermediate", "mlp", 4.0 * c * width)
        return
    falcon_two_ln = mt == "falcon" and spec.hf_config.get("new_decoder_architecture") and \
        (spec.hf_config.get("num_ln_in_parallel_attn") or 2) == 2
    if falcon_two_ln:
        # ln_mlp reads the same residual as ln_attn (only its mean/rstd rows are new); its output feeds the MLP
        add("ln_mlp_stats", "norm", 8.0, tp_split=False)
    if not (spec.parallel_residual and mt == "falcon") or falcon_two_ln:
        add("mlp_input", "mlp", _linear_inputs_saved(setup, 1, h), tp_split=False)
    elif is_amp(setup):
        # one LayerNorm feeds attention and MLP: shared in 16-bit, but under autocast the MLP's first
        # linear casts its own 16-bit copy of the fp32 norm output
        add("mlp_input", "mlp", 2.0 * h, tp_split=False)
    if spec.hidden_act in ("gelu_new",):
        if is_amp(setup):
            # Under CUDA autocast ``pow`` is an fp32 op: it keeps an fp32 copy of x (4), the rest of the
            # formula runs in fp32 (tanh output 4, 1+tanh 4), 0.5*x stays 16-bit (2), and fc2 keeps its
            # own 16-bit cast of the fp32 result (2): 16 B per element of width i.
            add("mlp_intermediate", "mlp", 16.0 * width)
        else:
            # NewGELUActivation (activations.py): 0.5*x*(1+tanh(√(2/π)(x+0.044715x³))) keeps x, tanh(.),
            # 0.5*x and 1+tanh(.), then fc2 keeps the result: 5 tensors of width i.
            add("mlp_intermediate", "mlp", 5.0 * c * width)
    else:
        # native gelu/relu keeps its input; fc2 keeps the activation output: 2 tensors.
        add("mlp_intermediate", "mlp", 2.0 * c * width)


def _moe_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """Router, top-k dispatch and experts (transformers 5.24 grouped_mm experts).

    Expert MLPs see T·k tokens in total on this rank (÷ ep does not change the tokens this rank
    processes: all-to-all brings as many in as it sends out). The experts run in the dtype of their
    weights (transformers casts the gathered tokens to it): fp32 under autocast with fp32 parameters."""
    h = spec.hidden_size
    c = compute_bytes(setup)
    ce = 4 if is_amp(setup) else c
    k = spec.num_experts_per_tok
    E = spec.num_experts
    mi = spec.moe_intermediate_size
    add("moe_input", "experts", _linear_inputs_saved(setup, 1, h), tp_split=False)
    # router: fp32 softmax (4E), top-k indices (int64, 8k), the renormalising sum and its result
    # (4 + 4k), and the int64 permutations that sort tokens by expert and back, plus the per-slot
    # weights (3·8k + 4k).
    add("router", "router", 4.0 * E + 8.0 * k + 4.0 + 4.0 * k + 24.0 * k + 4.0 * k, tp_split=False)
    add("expert_inputs", "experts", ce * k * h)                  # tokens gathered per expert
    add("expert_intermediate", "experts", 4.0 * ce * k * mi)     # gate_up (2·mi), act, product
    add("expert_outputs_weighted", "experts", ce * k * h)        # down output kept by the weighting
    if spec.num_shared_experts and spec.shared_expert_intermediate_size:
        si = spec.shared_expert_intermediate_size
        gated = spec.model_type == "qwen2_moe"  # sigmoid(shared_expert_gate(x)) * shared_expert(x)
        n_in = 3 if gated else 2
        inputs = 2.0 * n_in * h if is_amp(setup) else 0.0   # pure: the MoE input tensor is shared
        add("shared_expert", "experts", 4.0 * c * si + inputs + (c * h + 4.0 if gated else 0.0))


def _mla_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """DeepSeek-V2/V3 multi-head latent attention (modeling_deepseek_v3.py)."""
    h, a = spec.hidden_size, spec.num_attention_heads
    c = compute_bytes(setup)
    r = residual_bytes(setup)
    qr, kvr = spec.q_lora_rank, spec.kv_lora_rank or 0
    rope, nope, dv = spec.qk_rope_head_dim or 0, spec.qk_nope_head_dim or 0, spec.v_head_dim
    n_in = 2 if qr else 2
    add("qkv_input", "attention", _linear_inputs_saved(setup, n_in, h), tp_split=False)
    if qr:
        add("q_a", "attention", (4.0 + r) * qr + c * qr, tp_split=False)
    add("kv_a", "attention", c * (kvr + rope) + (4.0 + r) * kvr + c * kvr, tp_split=False)
    add("q_k_v", "attention", c * a * (2 * (nope + rope) + dv))
    add("attn_out", "attention", c * a * dv + 4.0 * a)


def _dropout_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int) -> None:
    """nn.Dropout in training keeps a bool mask (1 B per element) per site (native_dropout)."""
    p = spec.hidden_dropout
    if p <= 0:
        return
    h = spec.hidden_size
    n_sites = 2  # after attention output projection and after the MLP
    add("dropout_masks", "dropout", 1.0 * n_sites * h, tp_split=False)


_LORA_SHAPES = {
    "q_proj": lambda s: (s.hidden_size, s.num_attention_heads * s.head_dim),
    "k_proj": lambda s: (s.hidden_size, s.num_kv_heads * s.head_dim),
    "v_proj": lambda s: (s.hidden_size, s.num_kv_heads * s.v_head_dim),
    "o_proj": lambda s: (s.num_attention_heads * s.v_head_dim, s.hidden_size),
    "gate_proj": lambda s: (s.hidden_size, s.intermediate_size),
    "up_proj": lambda s: (s.hidden_size, s.intermediate_size),
    "down_proj": lambda s: (s.intermediate_size, s.hidden_size),
}


def lora_shapes(spec: ModelSpec, targets: tuple[str, ...]) -> list[tuple[int, int]]:
    """(in_features, out_features) of each targeted linear in one layer."""
    names = list(_LORA_SHAPES) if "all-linear" in targets else [t for t in targets if t in _LORA_SHAPES]
    return [_LORA_SHAPES[n](spec) for n in names]


def _lora_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """PEFT LoRA (peft/tuners/lora/layer.py Linear.forward): the input is cast to the adapter dtype
    (fp32 adapters: a 4-byte copy; under autocast the adapter matmul casts it to 2 bytes) and kept by
    lora_A; lora_A's output (rank wide) is kept by lora_B."""
    in_bytes = 2.0 if is_amp(setup) else 4.0
    for fin, _fout in lora_shapes(spec, setup.lora_targets):
        add("lora_input", "lora", in_bytes * fin, tp_split=False)
        add("lora_a_out", "lora", in_bytes * setup.lora_rank, tp_split=False)


def embedding_saved(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes kept by the embedding stage per micro-batch: token ids are int64 (8 B/token, kept by the
    embedding backward), learned positions similarly, plus an embedding dropout mask."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    b = 8 * T
    if spec.position == "learned":
        b += 8 * T
    if spec.hidden_dropout > 0 and spec.model_type in ("gpt2", "bert", "roberta"):
        b += T * spec.hidden_size
    return b


def model_wide_saved_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Tensors created once per forward and kept by every layer: rotary cos/sin (1, s, d) in the
    residual dtype (2 tensors). (Eager attention's additive causal mask (b, 1, s, s) is added, never
    saved: it lives only during the forward.)"""
    s = setup.seq_len // setup.cp
    out = 0
    if spec.position == "rope":
        # position_ids default to arange(s)[None]: cos/sin are (1, s, d), broadcast over the batch
        rope_dim = spec.qk_rope_head_dim or spec.head_dim
        out += 2 * s * rope_dim * residual_bytes(setup)
    if sliding_window_mask(spec, setup):
        out += s * setup.seq_len  # the (1, 1, s, s) bool mask, kept by every layer's kernel
    return out


def head_saved(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Final norm + LM-head input kept for backward (the logits and loss are in :mod:`loss`)."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    h = spec.hidden_size
    norm = _norm_saved_per_elem(spec, setup) * h
    lm_in = (2.0 if is_amp(setup) else float(residual_bytes(setup))) * h
    if spec.is_encoder:
        # MLM head: transform dense (input kept), gelu (input kept), LayerNorm (input kept), decoder input
        c = compute_bytes(setup)
        return int(T * (lm_in + 2 * c * h + _norm_saved_per_elem(spec, setup) * h + lm_in))
    return int(T * (norm + lm_in))
