"""What one rank's step is made of, computed once before the timeline walk: per layer the saved
tensors (split the way backward releases them), the autocast weight copies, the gradients it makes,
the transients of each backward sub-step, and which runs of identical layers are walked as one block.

Everything here is a pure function of the model, the setup and the rank's parameters; the walk
(:mod:`trainmem.memory.walk`) turns it into allocations and frees.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainmem.memory.activations import layer_saved
from trainmem.memory.gpt_oss_frames import gpt_oss_forward_peak_bytes, sink_attention_backward_bytes
from trainmem.memory.layers.attention import eager_softmax_bytes, fused_attention_backward_bytes
from trainmem.memory.layers.base import (LayerSaved, compute_bytes, derived_attn, derived_mode, is_amp,
                                         opt_embed_proj_dim, opt_post_ln, residual_bytes, sdpa_math_fallback,
                                         te_fp8_linears, torch_cp)
from trainmem.memory.layers.family import layer_family
from trainmem.memory.layers.mlp import (plain_mlp_act_forward_extra_per_elem, plain_mlp_act_saved_per_elem,
                                        relu2_backward_extra_per_elem)
from trainmem.memory.layers.model_wide import checkpoint_input_elem_bytes, model_wide_saved_bytes
from trainmem.memory.compile import compiled_op_sac_unread_width
from trainmem.memory.megatron_activations import megatron_layer_saved, megatron_te_layer
from trainmem.memory.op_sac import (block_linears, moe_block_linears, moe_fallback_offsets_bytes,
                                     op_sac_saved_mm_width)
from trainmem.memory.states import RankParams, layers_of_stage, lora_param_count
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["StepPlan", "build_plan", "MIN_BULK_RUN"]

#: Runs of at least this many identical layers have their middle simulated as one block.
MIN_BULK_RUN = 6
_ATTN_EARLY = ("o_input", "probs_16bit", "v_repeated", "attn_dropout_out")


@dataclass
class StepPlan:
    """Per-layer sizes (bytes; lists indexed by the position j of a layer on this stage)."""

    layer_ids: list[int]
    layer_params: list[int]
    layer_train: list[int]
    layer_experts: list[int]
    head_train: int
    emb_train: int
    saved: list[int]
    """What each layer saves without recompute."""
    saved_eff: list[int]
    """What it keeps through the forward under the setup's recompute."""
    parts: list[tuple[int, int, int, int]]
    """saved split as (MLP output projection's input, rest of MLP, attention released early, rest)."""
    copies: list[int]
    copy_frac: list[float]
    mlp_frac: list[float]
    norm_part: int
    head_copy: int
    tokens: int
    wide: int = 0
    fwd_tmp: int = 0
    norm_bwd: int = 0
    post_norm_bwd: int = 0
    """A norm after the MLP (derived post-norm families, trainmem/model/derive.py): its backward opens the layer's."""
    final_norm_bwd: int = 0
    mlp_bwd_extra: int = 0
    mlp_width: int = 0
    attn_transient: int = 0
    o_frac: float = 0.0
    gstream: int = 0
    layer_tokens: list[int] = field(default_factory=list)
    """Tokens of each layer where they are not ``tokens`` for all (an encoder–decoder's decoder layers run on
    --target-len: trainmem/model/derive_seq2seq.py); empty otherwise."""
    bulk_of: dict[int, list[int]] = field(default_factory=dict)
    skip: set[int] = field(default_factory=set)
    act_per_layer: int = 0
    emb_grad: int = 0
    """Elements of the embedding gradient the embedding's own backward makes."""
    emb_tied: int | None = None
    """Elements of the first stage's embedding gradients that a tied LM head's backward creates (None: all of
    ``emb_train``); the rest (``emb_train - emb_tied``: OPT's learned positions and project_in) is created by
    their own backward at the very end (:func:`_tied_head_embedding_part`)."""
    emb_backward_transient: int = 0
    """Bytes alive with it (torch TP's full-vocabulary gradient before its reduce-scatter)."""
    vision_saved: int = 0
    """A VLM's vision tower + projector: what they keep from their forward (before layer 0) to their backward
    (after the embedding's), per micro-batch (trainmem/memory/vision.py)."""
    vision_fwd_tmp: int = 0
    """Their forward's transient peak above that."""
    vision_train: int = 0
    """Elements of the gradients their backward makes (0 when frozen)."""
    mlp_gated: bool = True
    compute_bytes: int = 2

    def kept_parts(self, j: int, recompute: str) -> tuple[int, int, int, int]:
        """What layer j keeps through the forward, split like ``parts``: everything without recompute;
        under selective recompute, the kept share of each part."""
        if recompute == "none" or not self.saved[j]:
            return self.parts[j]
        ratio = self.saved_eff[j] / self.saved[j]
        p_, m_, e_, _ = (int(x * ratio) for x in self.parts[j])
        return p_, m_, e_, self.saved_eff[j] - p_ - m_ - e_

    def per_layer(self, j: int, n: int) -> int:
        """A per-token transient ``n`` (sized for ``tokens``) as layer j's tokens make it."""
        return n * self.layer_tokens[j] // self.tokens if self.layer_tokens else n

    def copy_pieces(self, j: int) -> tuple[int, int, int]:
        """Layer j's autocast weight copies: MLP output projection, rest of the MLP, attention."""
        cm = int(self.copies[j] * self.copy_frac[j])
        down = cm // 3 if self.mlp_gated else cm // 2
        return down, cm - down, self.copies[j] - cm

    def grad_pieces(self, j: int) -> tuple[int, int, int, int]:
        """Layer j's parameter gradients in the order backward makes them: MLP output projection, rest
        of the MLP, attention output projection, the rest of attention and the norms."""
        n_mlp = int(self.layer_train[j] * self.mlp_frac[j])
        n_down = n_mlp // 3 if self.mlp_gated else n_mlp // 2
        n_attn = self.layer_train[j] - n_mlp
        n_o = int(n_attn * self.o_frac)
        return n_down, n_mlp - n_down, n_o, n_attn - n_o


def build_plan(spec: ModelSpec, s: TrainingSetup, rp: RankParams, amp_copy: bool, bulk: bool,
               fp8: bool = False) -> StepPlan:
    """The step plan of pipeline stage ``rp.stage``; ``amp_copy``: matmuls save 16-bit copies of fp32
    weights (autocast without FSDP2's param_dtype); ``bulk``: walk runs of identical layers as blocks;
    ``fp8``: the run is an fp8 one whose ``s`` carries its 16-bit base recipe (estimate.py), so the
    megatron engine's TE linears save fp8 inputs (activations.layer_saved)."""
    first, last = rp.stage == 0, rp.stage == s.pp - 1
    layer_ids = list(layers_of_stage(spec, s, rp.stage))
    layer_params = list(rp.layers)
    layer_train = list(layer_params)  # (full fine-tuning: every layer trained; LoRA below)
    head_train = rp.lm_head if last else 0
    if s.is_lora:  # adapters of each layer; BERT/RoBERTa's MLM-transform adapter with the head
        layer_train = [lora_param_count(spec, s, range(i, i + 1), False) for i in layer_ids]
        head_train = rp.trainable - sum(layer_train)
    # (routed experts run in their weights' dtype, fp32 under autocast: no copies for them)
    copies = [2 * max(mm - (spec.params.layers[i].experts // s.ep) // s.tp, 0) if amp_copy and not s.is_lora else 0
              for i, mm in zip(layer_ids, rp.layer_matmul)]
    head_copy = 2 * (spec.params.lm_head or spec.params.embedding) // s.tp if (
        amp_copy and last and not spec.is_encoder and not s.is_lora) else 0
    if head_copy and opt_embed_proj_dim(spec):  # OPT's project_out: its 16-bit weight copy, kept by its matmul
        head_copy += 2 * opt_embed_proj_dim(spec) * spec.hidden_size // s.tp
    layer_kind = _layer_kinds(spec, s, layer_ids, fp8)
    saved = [ls.total_bytes for ls in layer_kind]
    plan = StepPlan(
        layer_ids=layer_ids, layer_params=layer_params, layer_train=layer_train,
        layer_experts=[0 if s.is_lora else spec.params.layers[i].experts // s.ep // s.tp for i in layer_ids],
        head_train=head_train, emb_train=0 if s.is_lora else (rp.embedding if first else 0),
        saved=saved, saved_eff=_saved_under_recompute(spec, s, layer_kind, saved, layer_ids, fp8),
        parts=[_layer_parts(spec, s, ls, fp8) for ls in layer_kind], copies=copies,
        copy_frac=[_mlp_copy_fraction(spec, i) for i in layer_ids],
        mlp_frac=[_mlp_param_fraction(spec, i) for i in layer_ids],
        norm_part=next((t.bytes for t in layer_kind[-1].terms if t.name == "input_norm"), 0) if layer_ids else 0,
        head_copy=head_copy, tokens=s.micro_batch * s.seq_len // s.cp, act_per_layer=saved[0] if saved else 0,
        mlp_gated=spec.mlp_gated)
    _set_transients(spec, s, plan)
    n_enc = getattr(spec.derived, "encoder_layers", None)
    if n_enc is not None and s.for_target() is not s:  # (encoder–decoder: the decoder on --target-len)
        plan.layer_tokens = [s.micro_batch * (s.target_len if i >= n_enc else s.seq_len) for i in layer_ids]
        plan.final_norm_bwd = plan.final_norm_bwd * s.target_len // s.seq_len  # (the decoder's final norm)
    if first and spec.vision is not None:  # (trainmem/memory/vision.py)
        from trainmem.memory.vision import vision_forward_transient_bytes, vision_saved_bytes, vision_trainable_params
        plan.vision_saved, plan.vision_fwd_tmp = vision_saved_bytes(spec, s), vision_forward_transient_bytes(spec, s)
        plan.vision_train = vision_trainable_params(spec, s)
    plan.emb_grad, plan.emb_backward_transient = _embedding_backward(spec, s, plan.emb_train)
    plan.emb_tied = _tied_head_embedding_part(spec, s, plan.emb_train)
    if bulk:
        plan.bulk_of, plan.skip = _bulk_runs(plan)
    return plan


def kept_per_layer(spec: ModelSpec, s: TrainingSetup) -> list[int]:
    """What each layer of the model keeps through the forward under ``s.recompute`` (bytes of one
    micro-batch): ``StepPlan.saved_eff`` without building the rest of the plan (the planner's bound)."""
    out: list[int] = []
    for stage in range(s.pp):  # (positions within each stage: the block method counts per stage)
        ids = list(layers_of_stage(spec, s, stage))
        kinds = _layer_kinds(spec, s, ids)
        out += _saved_under_recompute(spec, s, kinds, [ls.total_bytes for ls in kinds], ids)
    return out


def _layer_kinds(spec: ModelSpec, s: TrainingSetup, layer_ids: list[int], fp8: bool = False) -> list[LayerSaved]:
    """Layers of one kind (dense / MoE) save the same: one layer_saved per kind. (LoRA without
    checkpointing: layer 0 saves less, nothing before its first adapter, activations.py)"""
    view = getattr(spec.derived, "for_layer", None)  # (an encoder–decoder's stacks: trainmem/model/derive_seq2seq.py)

    def kind_of(i: int) -> tuple[bool, bool, str]:
        return i in spec.moe_layer_indices, s.is_lora and i == 0, spec.derived.kind_of(i) if view else ""

    kinds: dict[tuple[bool, bool, str], LayerSaved] = {}
    for i in layer_ids:
        if kind_of(i) not in kinds:
            kinds[kind_of(i)] = layer_saved(replace(spec, derived=view(i, s)) if view else spec, s, i, fp8=fp8)
    return [kinds[kind_of(i)] for i in layer_ids]


def _saved_under_recompute(spec: ModelSpec, s: TrainingSetup, kinds: list[LayerSaved], saved: list[int],
                           layer_ids: list[int], fp8: bool = False) -> list[int]:
    if s.recompute == "selective":
        if s.engine in ("torch", "fsdp2"):
            return [_torchtitan_op_sac(spec, s, i) or _selective(s, ls) for ls, i in zip(kinds, layer_ids)]
        if s.engine == "megatron" and megatron_te_layer(spec):
            # core attention checkpointed: its inputs kept instead of what the kernel saves
            # (megatron_activations.core_attention_checkpoint_inputs_bytes_per_token)
            fp8 = fp8 or s.precision == "fp8"
            per_kind: dict[bool, int] = {}
            for i in layer_ids:
                moe = i in spec.moe_layer_indices
                if moe not in per_kind:
                    per_kind[moe] = megatron_layer_saved(spec, s, i, fp8=fp8, core_attention_recomputed=True).total_bytes
            return [per_kind[i in spec.moe_layer_indices] for i in layer_ids]
        return [_selective(s, ls) for ls in kinds]
    if s.recompute == "full":
        # (block method: the first recompute_layers of the stage keep their checkpointed input only)
        n_enc = getattr(spec.derived, "encoder_layers", None)  # (encoder–decoder: decoder layers on --target-len)
        tokens = [t.micro_batch * t.seq_len // s.cp for t in (s, s.for_target())]
        return [checkpoint_input_elem_bytes(spec, s, i) * tokens[n_enc is not None and i >= n_enc] * spec.hidden_size
                // (s.tp if s.sp else 1) if s.recomputes(j) == "full" else n
                for j, (i, n) in enumerate(zip(layer_ids, saved))]
    return saved


def _set_transients(spec: ModelSpec, s: TrainingSetup, plan: StepPlan) -> None:
    """Transients of the forward and of each backward sub-step (bytes)."""
    c, r, T, h = compute_bytes(s), residual_bytes(s), plan.tokens, spec.hidden_size
    plan.compute_bytes = c
    sp_div = s.tp if s.sp else 1
    plan.wide = model_wide_saved_bytes(spec, s)
    plan.fwd_tmp = 2 * r * T * h
    if not spec.mlp_gated and spec.hidden_act in ("relu", "relu2"):  # (nemotron, opt: traced, activations.py)
        plan.fwd_tmp = max(plan.fwd_tmp, plain_mlp_act_forward_extra_per_elem(s, spec) * T * spec.intermediate_size
                           // s.tp)
    if s.recompute != "full":  # gpt_oss: its eager attention's and experts' forward peaks (0 for other families)
        plan.fwd_tmp = max(plan.fwd_tmp, gpt_oss_forward_peak_bytes(spec, s))
    if s.qlora:
        # bitsandbytes dequantises each NF4 weight to a 16-bit temporary for its matmul: the largest
        # (an MLP projection, h × i) is alive with the layer's working tensors
        plan.fwd_tmp += 2 * h * max(spec.intermediate_size, spec.moe_intermediate_size) // s.tp
    if s.load_in_8bit:  # LLM.int8's igemmlt temporaries at its widest linear (memory/int8.py)
        from trainmem.memory.int8 import int8_forward_transient_bytes
        plan.fwd_tmp += int8_forward_transient_bytes(spec, T)
    plan.gstream = r * T * h // sp_div
    # The input norm's backward: RMSNorm differentiates its fp32 arithmetic (three fp32 tensors of width h
    # alive together, traced); nn.LayerNorm's fused backward makes one input gradient. The final norm's
    # backward also upcasts the LM head's input gradient (four fp32 tensors, traced).
    plan.norm_bwd = (12 if spec.norm == "rmsnorm" else r) * T * h // sp_div
    plan.final_norm_bwd = (16 if spec.norm == "rmsnorm" else r) * T * h // sp_div
    if spec.derived is not None and spec.derived.post_mlp_norm(derived_mode(s), derived_attn(s), s.seq_len):
        plan.post_norm_bwd = plan.norm_bwd
    # Bytes per (token × MLP width) alive together in the MLP's backward beyond d(product): gated MLPs
    # hold d(act) and d(up) (2c), a plain MLP d(act) only; GPT-2's gelu_new under autocast
    # differentiates its fp32 formula (three fp32 gradients of width i and a 16-bit one, traced).
    plan.mlp_bwd_extra = 2 * c if spec.mlp_gated else c
    if spec.hidden_act == "gelu_new" and is_amp(s):
        plan.mlp_bwd_extra = 14 - c
    if spec.hidden_act == "relu2" and not spec.mlp_gated:  # (nemotron: pow's backward, activations.py)
        plan.mlp_bwd_extra = relu2_backward_extra_per_elem(s)
    plan.mlp_width = max(spec.intermediate_size, spec.num_experts_per_tok * spec.moe_intermediate_size) // s.tp
    a, kv, d, dv = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    plan.o_frac = a * dv / (a * d + kv * d + kv * dv + a * dv)  # o_proj's share of the attention weights
    plan.attn_transient = c * T * (h + a * d + 2 * kv * d) // s.tp
    if s.attn == "eager" or sdpa_math_fallback(spec, s):
        # eager attention's backward: the probabilities' gradient upcast to fp32 and softmax's input
        # gradient (fp32), both b·a·s² (compute dtype for families whose softmax is not upcast)
        sm = eager_softmax_bytes(spec, s)
        plan.attn_transient += 2 * sm * s.micro_batch * a * (s.seq_len // s.cp) * s.seq_len // s.tp
    if s.attn == "sdpa" and layer_family(spec).attention_backward_v_grad_only and not sdpa_math_fallback(spec, s) \
            and not torch_cp(s):
        plan.attn_transient = fused_attention_backward_bytes(spec, s)
    if s.attn == "eager" and layer_family(spec).attention_backward_v_grad_only:
        # (nemotron, opt: traced) the s² pair peaks beside the P·V matmul's v gradient alone: o_proj's input
        # gradient is spent by then, dq and dk come after the s² gradients are gone
        sm = eager_softmax_bytes(spec, s)
        plan.attn_transient = (c * T * a * dv + 2 * sm * s.micro_batch * a * (s.seq_len // s.cp) * s.seq_len) // s.tp
    if sink_attention_backward_bytes(spec, s):  # gpt_oss, eager: its sink softmax's backward (activations.py)
        plan.attn_transient = sink_attention_backward_bytes(spec, s)
    if torch_cp(s) and s.attn == "sdpa":  # torch's ring attention (memory/context_parallel.py)
        from trainmem.memory.context_parallel import ring_transients
        ls = layer_saved(spec, s, plan.layer_ids[0] if plan.layer_ids else 0)
        pre = sum(t.bytes for t in ls.terms if t.name in ("input_norm", "qkv_input", "qk_norm", "q", "k", "v"))
        fwd, plan.attn_transient = ring_transients(spec, s, pre)
        if s.recompute == "full":  # (the walk adds the layer's whole saved set to a checkpointed forward's spike)
            fwd -= ls.total_bytes
        plan.fwd_tmp = max(plan.fwd_tmp, fwd)


def _tied_head_embedding_part(spec: ModelSpec, s: TrainingSetup, emb_train: int) -> int | None:
    """OPT: of the first stage's embedding-side parameters (``rank_params`` counts the learned positions and
    project_in with the token embedding), only ``embed_tokens`` is the LM head's tied weight, whose gradient the
    head's backward creates; ``embed_positions`` (and project_in) get theirs at their own backward, the last
    of the step (traced). None for the other families (unchanged: all at the head's backward)."""
    if not layer_family(spec).tied_head_grad_token_embedding_only or not spec.tie_word_embeddings or not emb_train \
            or s.tp > 1:
        return None
    return min(spec.params.embedding, emb_train)


def _embedding_backward(spec: ModelSpec, s: TrainingSetup, emb_train: int) -> tuple[int, int]:
    """(elements of the embedding's gradient, bytes of the transient alive with it). Torch TP (fsdp2 +
    tp): DTensor has no vocab-sharded strategy for embedding_dense_backward
    (torch/distributed/tensor/_ops/_embedding_ops.py, torch 2.13): RowwiseParallel's embedding gradient is
    computed for the whole vocabulary (Partial) and reduce-scattered into the local Shard(0) gradient,
    alive together (traced: tests/trace/test_tp_trace.py); tied to the LM head, that shard and its sum
    with the head's gradient are both new (one is the engine's "new" grad). TP alone, untied: nothing
    redistributes it (FSDP2 would, before its reduce-scatter): the Partial full-vocabulary gradient
    itself becomes the embedding's .grad until the optimizer step."""
    if not (s.engine == "fsdp2" and s.tp > 1 and emb_train > 0):
        return emb_train, 0
    c, tied = compute_bytes(s), spec.tie_word_embeddings
    if s.fsdp_applied or tied:
        return emb_train, c * spec.params.embedding + (c * emb_train if tied else 0)
    return spec.params.embedding, 0


def _bulk_runs(plan: StepPlan) -> tuple[dict[int, list[int]], set[int]]:
    """Identical consecutive layers change memory by the same amount each, so within a run the peak is
    at one of its ends: the two layers at each end of a run are walked one by one and the middle of the
    run as one block (same peak, a fraction of the work for 80-126-layer models)."""
    bulk_of: dict[int, list[int]] = {}
    skip: set[int] = set()
    n, j = len(plan.layer_ids), 0

    def same(a: int, b: int) -> bool:
        return (plan.layer_params[a], plan.saved[a], plan.copies[a], plan.saved_eff[a]) == \
            (plan.layer_params[b], plan.saved[b], plan.copies[b], plan.saved_eff[b])

    while j < n:
        k = j
        while k + 1 < n and same(k + 1, j):
            k += 1
        if k - j + 1 >= MIN_BULK_RUN:
            mid = list(range(j + 2, k - 1))
            bulk_of[mid[0]] = mid
            skip.update(mid[1:])
        j = k + 1
    return bulk_of, skip


def _layer_parts(spec: ModelSpec, s: TrainingSetup, ls: LayerSaved, fp8: bool = False) -> tuple[int, int, int, int]:
    """A layer's saved bytes as (MLP output projection's input, rest of the MLP block, attention
    tensors released before the attention core's backward (o_proj input; eager: probabilities'
    16-bit copy and v), the rest of attention and norms). Backward runs the MLP first: once down_proj's
    backward is done, its saved input (the product, width i) and its weight copy are released."""
    total = ls.total_bytes
    mlp = sum(t.bytes for t in ls.terms if t.component in ("mlp", "experts", "router"))
    fam = layer_family(spec)
    if (torch_cp(s) and s.attn == "sdpa") or fam.post_attention_norm_released_with_mlp:
        # the post-attention norm's saved tensors die at its backward, before attention's: counted with the
        # MLP block, as the ring's backward spike can be the step's peak (traced, tests/trace/test_cp_trace.py),
        # and gpt_oss's eager attention backward (tests/trace/test_gpt_oss_trace.py); nemotron and opt alike
        # (tests/trace/test_nemotron_opt_trace.py)
        mlp += sum(t.bytes for t in ls.terms if t.name == "post_attention_norm")
        mlp += sum(t.bytes for t in ls.terms if t.name == "norm_weight_plus_one") // 2  # (its half: LayerNorm1P's)
    early = sum(t.bytes for t in ls.terms if t.name in _ATTN_EARLY)
    prod = 0
    for t in ls.terms:
        if s.is_lora:  # frozen output projection: only its adapter's input and rank activation (activations.py)
            prod += t.bytes if t.name == "lora_down_input" else 0
        elif t.name == "mlp_intermediate" and not spec.mlp_gated and spec.hidden_act in ("relu", "relu2"):
            kept, down_only = plain_mlp_act_saved_per_elem(spec, s, te_fp8_linears(s, fp8))
            prod = int(t.bytes * down_only / kept)  # (relu: fc2 reads relu's own saved output: nothing alone)
        elif t.name == "mlp_intermediate":
            prod = t.bytes // (4 if spec.mlp_gated else (5 if spec.hidden_act == "gelu_new" else 2))
            if spec.hidden_act == "gelu_new" and is_amp(s):
                prod = t.bytes // 8  # the 2-byte cast out of 16 B per element
        elif t.name == "expert_intermediate":
            prod = t.bytes // 4
        elif t.name in ("mlp_down_input", "expert_down_input"):  # megatron: linear_fc2's saved input
            prod = t.bytes
    if fam.dropout_masks_released_per_block:
        # OPTDecoderLayer's two dropout masks die at the start of their blocks' backward (traced): the one after
        # fc2 with the MLP's first release, the one after out_proj before the attention core's backward
        masks = sum(t.bytes for t in ls.terms if t.name == "dropout_masks")
        prod, mlp, early = prod + masks // 2, mlp + masks // 2, early + masks - masks // 2
    if opt_post_ln(spec):
        # post-LN (opt-350m): each layer's backward starts with final_layer_norm (its input, the
        # "post_attention_norm" term, goes first) and runs self_attn_layer_norm (the "input_norm" term) between
        # the MLP's backward and the attention's (traced)
        post = sum(t.bytes for t in ls.terms if t.name == "post_attention_norm")
        first = sum(t.bytes for t in ls.terms if t.name == "input_norm")
        prod += post
        early += first
    return prod, mlp - prod, early, total - mlp - early


def _mlp_param_fraction(spec: ModelSpec, idx: int) -> float:
    lp = spec.params.layers[idx]
    tot = lp.total
    return (lp.mlp + lp.experts + lp.shared_experts + lp.router) / tot if tot else 0.0


def _mlp_copy_fraction(spec: ModelSpec, idx: int) -> float:
    """Share of a layer's autocast weight copies that belong to the MLP block (routed experts excluded)."""
    lp = spec.params.layers[idx]
    mlp = lp.mlp + lp.shared_experts + lp.router
    return mlp / (mlp + lp.attention) if (mlp + lp.attention) else 0.0


def _torchtitan_op_sac(spec: ModelSpec, s: TrainingSetup, idx: int) -> int:
    """torch/fsdp2 ``--recompute selective``: torchtitan's op-level selective checkpointing
    (torchtitan/models/llama3/infra/parallelize.py ``_apply_ac_to_transformer_block``, mode "selective",
    option "op"; torch.utils.checkpoint ``create_selective_checkpoint_contexts``). Per layer it keeps the
    checkpoint input, the outputs of the fused attention kernel (output + logsumexp) and of every other
    ``aten.mm`` (the counter restarts in each layer; even-numbered ones are recomputed); everything else
    is recomputed, biased linears too: they run ``aten.addmm``, which the save list does not name and the
    counter does not count (memory/op_sac.py: Qwen2's q/k/v, all four of GPT-2's Conv1D; traced,
    tests/trace/test_op_sac_trace.py). MoE layers of Mixtral / Qwen2-MoE / Qwen3-MoE: the router's and the shared
    expert's ``aten.mm`` counted, the grouped-GEMM experts recomputed (memory/op_sac.py ``moe_block_linears``).
    Bytes per layer on this rank; 0 where the layer is not modelled this way (MLA, other MoE blocks, and MoE
    under --compile: the partitioner's choice for them is not traced)."""
    if spec.kv_lora_rank is not None:
        return 0
    moe = idx in spec.moe_layer_indices
    linears = moe_block_linears(spec) if moe else block_linears(spec)
    if linears is None or (moe and s.compile):
        return 0
    c, r, tp = compute_bytes(s), residual_bytes(s), s.tp
    h, a, dv = spec.hidden_size, spec.num_attention_heads, spec.v_head_dim
    kept_mm = op_sac_saved_mm_width(linears, tp)
    if s.compile and linears[-1].mm:  # (compiled, the partitioner keeps only the saved outputs backward reads)
        kept_mm -= compiled_op_sac_unread_width([ln.width / (tp if ln.column else 1) for ln in linears if ln.mm])
    fused_attn = s.attn != "eager" and not sdpa_math_fallback(spec, s)
    attn_out = (c * a * dv + 4 * a) / tp if fused_attn else 0.0
    T = s.micro_batch * s.seq_len // s.cp
    offs = moe_fallback_offsets_bytes(spec.num_experts, s.precision) if moe else 0
    return int(T * (r * h / (tp if s.sp else 1) + c * kept_mm + attn_out)) + offs


def _selective(s: TrainingSetup, ls: LayerSaved) -> int:
    """Selective recomputation. Megatron (--recompute-granularity selective): the core attention
    (the s² softmax/dropout terms) is recomputed; with flash/sdpa nothing else changes.
    torch/fsdp2: torchtitan's op-level policy keeps matmul and attention outputs and recomputes the
    rest (norms, activations, products), modelled as dropping the norm copies and half the MLP terms."""
    out = 0
    for t in ls.terms:
        if t.name in ("softmax_fp32", "probs_16bit", "attn_dropout_mask", "attn_dropout_out", "softcap_tanh"):
            continue
        if s.engine in ("torch", "fsdp2"):
            if t.component == "norm":
                continue
            if t.name == "mlp_intermediate":
                out += t.bytes // 2
                continue
        out += t.bytes
    return out
