"""torch.compile's memory effect: what a compiled decoder layer keeps for backward (``--compile``).

Under ``torch.compile`` AOTAutograd traces each compiled region's forward and backward as one joint graph and
splits it with the min-cut partitioner (torch 2.13 ``torch/_functorch/partitioners.py``
``min_cut_rematerialization_partition``, inductor's default ``partition_fn``). Its rules decide what is saved:

- ``get_default_op_list``: ``aten.mm``/``addmm``/``bmm`` and the SDPA/flash kernels are *compute intensive*
  (never recomputed); pointwise ops, casts (``_to_copy``, ``convert_element_type``), ``clone``, views and
  reductions are *recomputable*. ``native_dropout``/``rand_like`` are *random* (never recomputed).
- ``should_ban_recomputation``: a node whose backward user is not fusible (an ``mm`` that takes it, the flash
  backward) is "materialized in backward" and saved; a reduction whose output is 4× smaller than its input
  (RMSNorm's ``rsqrt`` of the mean of squares, LayerNorm's mean/rstd) is saved rather than recomputed.
- the min cut then saves, of each recomputable chain, its cheapest frontier: the layer's input (``primals``)
  and the matmul outputs, from which the backward recomputes the rest fused into its kernels.
- ``torch/_functorch/config.py`` ``activation_memory_budget = 1.0`` (the default, runtime-optimised cut:
  modelled here; a lower budget recomputes more and is not modelled); ``treat_parameters_as_free_to_save``.

So a llama-style block saves, per token (``c`` compute dtype bytes, ``r`` residual bytes, 16-bit linear inputs
under autocast): its input (r·h), each RMSNorm's rsqrt (4 B) and output as the next matmul's input (c·h — one
16-bit cast under autocast, shared by q/k/v_proj: AOTAutograd's CSE merges autocast's three ``_to_copy``),
q, k, v, the attention output and its logsumexp as eager (the kernel's output, laid out (b, s, a, d), is o_proj's
input: HF's ``transpose(1, 2).contiguous()`` traces to no copy), o_proj's output (to recompute the residual sum under the second norm), and the gated MLP's gate, up and product
(c·i each; SiLU's output and the norms' fp32 upcasts are recomputed). Eager keeps, in addition, each norm's
fp32 input copy and normalised value and SiLU's output. GPT-2-style blocks: LayerNorm mean/rstd in the input
dtype (after inductor's decomposition), c_fc's output and the GELU output (gelu_new's tanh formula is all
pointwise: its four intermediates are recomputed), dropout's bool masks (``rand_like(x) > p``: 1 B).

Measured, not assumed: tests/memory/test_compile.py partitions tiny models of each family with the same
partitioner (``aot_eager_decomp_partition``: inductor's decompositions + min-cut) and checks these terms to the
byte; tests/trace/test_compile_trace.py runs a whole step with ``backend="inductor"`` on the CPU.

Under torchtitan's op-level selective checkpointing (``--recompute selective``: ``apply_ac`` wraps each block in a
checkpoint whose ``context_fn`` tags every op MUST_SAVE — the outputs of ``aten.mm`` except every second one, of the
SDPA/flash kernels, of ``reduce_scatter_tensor`` and ``max`` — or PREFER_RECOMPUTE, then ``apply_compile`` compiles
the wrapped block) the partitioner honours the tags: PREFER_RECOMPUTE nodes are ``must_recompute`` (an infinite
edge to the sink: always recomputed in backward), MUST_SAVE ones are banned from recompute. The min cut then keeps
the block's input and those MUST_SAVE outputs that backward reads, directly or to recompute a tagged node — all of
eager SAC's saved set (trainmem/memory/plan.py ``_torchtitan_op_sac``) except a saved output no backward node reads:
the block's last matmul when the policy saves it (a llama-style block's seventh, ``down_proj``: its output only
feeds the residual sum, the block's output), which eager SAC's cache stores anyway
(:func:`compiled_op_sac_unread_width`). Traced with the torchtitan policy on the CPU
(trainmem/trace/compiled.py ``torchtitan_op_sac_context``; tests/trace/test_compile_sac_trace.py). torchtitan's
per-layer selective AC (``selective_ac_option`` "2": every second block fully checkpointed, the others not) is a
compiled block with and without its checkpoint: ``--recompute full --recompute-layers`` with half the layers.

Scope (``compile_refusal`` says so for the rest): decoder layers compiled one by one, as torchtitan's
``apply_compile`` (each TransformerBlock, after ``apply_ac``: a checkpointed block is compiled with its
checkpoint, so it saves its input only) and torchtune's ``compile: True`` (each layer) do. HF Trainer's
``torch_compile=True`` compiles the whole model: its layers save the same and its loss is compiled as the others'
(:func:`compiled_loss_buffers`: all three frameworks compile the loss), but under Dynamo transformers takes its
tracing branch and builds an explicit (b, 1, s, s) mask for SDPA (saved once; on CUDA it moves SDPA from the flash
to the memory-efficient kernel), which is not modelled. Eager kernels' transients (norm and MLP backward temporaries) are kept as eager (an upper
bound: inductor fuses them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import replace

from trainmem.memory.activations import layer_saved
from trainmem.memory.fp8_compile import FP8_COMPILE_FAMILIES, compiled_fp8_terms, torchao_compiled_fp8
from trainmem.memory.layers.base import LAYER_MODELS, LayerModel, LayerSaved, Term, compute_bytes, is_amp, residual_bytes
from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with this module)
    from trainmem.memory.loss import LossBuffers
    from trainmem.setup import TrainingSetup

__all__ = ["COMPILE_FAMILIES", "compile_refusal", "compiled_layer_saved", "compiled_checkpoint_input_bytes",
           "compiled_loss_buffers", "compile_assumptions", "compiled_op_sac_unread_width"]

#: Families whose compiled layer is described here (each measured: tests/memory/test_compile.py).
COMPILE_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi3", "gpt2")
#: The eager attention-core terms a compiled layer keeps unchanged (the SDPA/flash kernel's own saved set).
_KERNEL_TERMS = ("q", "k", "v", "qkv_fused_out", "attn_out", "logsumexp")


def compile_refusal(spec: ModelSpec, setup: TrainingSetup) -> str | None:
    """Why ``--compile`` is not modelled for this model and setup (one line), or None."""
    if setup.engine in ("megatron", "deepspeed"):
        return (f"--compile is modelled for --engine torch or fsdp2 (torchtitan, torchtune, HF Trainer); {setup.engine}'s "
                f"compiled step is not")
    for bad, why in ((setup.tp > 1 or setup.cp > 1, "tensor or context parallelism"),
                     (setup.is_lora and setup.recompute != "full", "LoRA without --recompute full"),
                     (setup.precision == "fp8" and setup.fp8_backend == "te", "fp8 te.Linear (--fp8-backend te)"),
                     (setup.precision == "fp8" and spec.model_type not in FP8_COMPILE_FAMILIES,
                      f"fp8 linears on {spec.model_type} (the compiled torchao fp8 block is traced for "
                      f"{', '.join(FP8_COMPILE_FAMILIES)})"),
                     (setup.recompute == "selective" and spec.moe_layer_indices, "--recompute selective on MoE layers")):
        if bad:
            return f"--compile with {why} is not modelled; use --compile with full fine-tuning, --recompute none or full"
    if spec.model_type not in COMPILE_FAMILIES:
        return (f"--compile is modelled for {', '.join(COMPILE_FAMILIES)} (their compiled layers measured); "
                f"not for {spec.model_type}")
    if setup.attn == "eager":
        return "--compile is modelled with --attn sdpa or flash (a compiled eager softmax is not measured)"
    from trainmem.memory.layers.base import sdpa_math_fallback, sliding_window_mask
    if sliding_window_mask(spec, setup) or sdpa_math_fallback(spec, setup):
        return ("--compile with a masked or math-kernel attention (sliding window, fp32 with GQA) is not modelled; "
                "use a 16-bit recipe without a window")
    return None


def compiled_layer_saved(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, fp8: bool = False) -> LayerSaved:
    """Bytes one compiled decoder layer keeps for backward for one micro-batch on this rank, by term: what the
    min-cut partitioner saves (module docstring); the attention kernel's own tensors as eager
    (:func:`trainmem.memory.activations.layer_saved`). No recompute (checkpointing: the walk keeps the input).
    ``fp8`` with torchao's Float8Linear: its linears' inputs recomputed, o_proj's fp8 input kept
    (:mod:`trainmem.memory.fp8_compile`)."""
    eager = layer_saved(spec, setup.model_copy(update={"compile": False}), layer_idx)
    T = setup.micro_batch * setup.seq_len
    h, a = spec.hidden_size, spec.num_attention_heads
    c, r = compute_bytes(setup), residual_bytes(setup)
    lin = 2 if is_amp(setup) else c  # a matmul's input: autocast's one 16-bit cast, else the compute dtype
    rows = 4.0 if spec.norm == "rmsnorm" else 2.0 * norm_stat_bytes(setup)
    terms: list[Term] = []

    def add(name: str, component: str, per_token: float) -> None:
        terms.append(Term(name, component, int(round(per_token * T)), False))

    add("layer_input", "norm", r * h)  # the block's input: the first norm's recompute starts from it
    add("input_norm", "norm", rows)
    add("qkv_input", "attention", lin * h)
    if layer_family(spec).qk_norm != "none":  # q_norm/k_norm (Qwen3): q_proj's and k_proj's outputs, their rsqrt rows
        add("qk_norm", "attention", (c * spec.head_dim + 4.0) * (a + spec.num_kv_heads))
    terms += [t for t in eager.terms if t.name in _KERNEL_TERMS]
    add("o_output", "attention", c * h)  # o_proj's output: the residual sum under the second norm is recomputed
    add("post_attention_norm", "norm", rows)
    add("mlp_input", "mlp", lin * h)
    i = spec.intermediate_size
    if spec.mlp_gated:
        add("mlp_gate_up", "mlp", 2.0 * c * i)   # gate and up projections' outputs (phi3: one fused output)
    else:
        add("mlp_fc_output", "mlp", c * i)      # c_fc's output, the GELU's input
    add("mlp_down_input", "mlp", lin * i)       # the product / the GELU's output, down_proj's input
    if spec.hidden_dropout > 0:
        add("dropout_masks", "dropout", 2.0 * h)  # bool masks after attention and after the MLP
    if torchao_compiled_fp8(setup, fp8):
        terms = compiled_fp8_terms(spec, terms, T)
    return LayerSaved(tuple(terms))


def norm_stat_bytes(setup: TrainingSetup) -> int:
    """Bytes of each of LayerNorm's mean and rstd per row in a compiled layer: inductor's decomposition
    (torch/_refs ``native_layer_norm``) computes them in fp32 and returns them in the input dtype; under CUDA
    autocast layer_norm is an fp32 op (4 B)."""
    return 4 if (setup.precision == "fp32" or is_amp(setup)) else compute_bytes(setup)


def compiled_op_sac_unread_width(mm_widths: list[float]) -> float:
    """Of the matmul outputs torchtitan's op-level SAC policy saves in a compiled block (mm widths per token in call
    order; the 1st, 3rd, … are MUST_SAVE), the width the partitioner does not keep because no backward node reads
    it: the block's last matmul when it is an odd-numbered one (its output only enters the residual sum that
    leaves the block; torch 2.13 ``partitioners.py``: a MUST_SAVE node is saved only where the cut crosses it, and
    a node with no path to the backward is never on the cut). Every earlier saved output is read: q and v by the
    attention backward, the gate (or c_fc / gate_up) by the activation's backward, o_proj's by the recompute of
    the residual under the second norm. 0 for an even count (fused qkv with Phi-3's gate_up_proj; Qwen2's four
    mm after its q/k/v addmm). Only for a block whose last linear runs ``aten.mm`` (plan.py ``_torchtitan_op_sac``:
    a biased one runs ``aten.addmm``, neither saved nor counted, memory/op_sac.py; GPT-2 has no mm at all);
    traced with biased blocks too (tests/trace/test_op_sac_trace.py)."""
    return mm_widths[-1] if len(mm_widths) % 2 == 1 else 0.0


def compiled_checkpoint_input_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """A compiled, checkpointed layer's recomputation (inside its compiled backward) saves its input again, which
    the checkpoint holds already: r·h per token, not allocated twice."""
    if setup.recompute != "full":
        return 0
    return residual_bytes(setup) * spec.hidden_size * setup.micro_batch * setup.seq_len


def compiled_loss_buffers(eager: LossBuffers, setup: TrainingSetup, tokens: int, vocab: int) -> LossBuffers:
    """The loss under compile: torchtitan compiles its ``cross_entropy_loss`` (torchtitan/components/loss.py
    ``build_cross_entropy_loss``: ``pred.float()`` + cross_entropy), torchtune ``compile_loss`` compiles the whole
    loss or, for ``CEWithChunkedOutputLoss``, each chunk's ``compute_cross_entropy`` (upcast + cross_entropy), HF
    Trainer's whole-model compile ``ForCausalLMLoss``. Inductor's kernels (traced on the CPU, TORCH_LOGS=output_code)
    compute the log-softmax from the 16-bit logits in registers: the forward allocates and saves two fp32 values per
    token (the row max and the log-sum-exp) and saves the logits themselves; the backward allocates one fp32 value
    per token and writes the gradient in the logits' dtype. No fp32 b·s·V tensor exists (eager: the upcast, the
    saved log-softmax and two fp32 gradients). The rest (logits, the LM head's backward) as eager.

    Chunked (torchtune compiles ``compute_cross_entropy``, one compiled node per chunk): the autograd engine runs
    every chunk's node before the LM head matmuls (newer nodes first), and each node releases its saved 16-bit
    chunk once it has written that chunk's gradient (traced on the CPU with inductor, saved_tensors_hooks:
    each node saves its chunk, the labels and two fp32 values per token, and releases them as it runs, before any
    chunk's gradient reaches the head): the logits and their gradient overlap by one chunk (``logits_overlap_bytes``)."""
    n = tokens * vocab
    c = eager.logits_bytes // n if n else compute_bytes(setup)
    per = -(-tokens // (setup.loss_chunks or 8)) if setup.loss == "chunked" else tokens
    overlap = c * per * vocab if setup.loss == "chunked" else 0
    return replace(eager, kept_bytes=8 * tokens, forward_transient_bytes=0, backward_transient_bytes=4 * per,
                   grad_logits_bytes=c * n, logits_saved=True, logits_overlap_bytes=overlap)


def compile_assumptions(setup: TrainingSetup) -> list[str]:
    """The assumption lines an estimate under ``--compile`` lists."""
    out = ["torch.compile: each decoder layer and the loss compiled (torchtitan apply_compile and its compiled loss, "
           "torchtune compile): saved tensors as the min-cut partitioner keeps them (torch/_functorch/partitioners.py, "
           "torch 2.13), the loss keeps the 16-bit logits and two fp32 values per token; embeddings, final norm and head "
           "eager (HF Trainer's whole-model compile also makes transformers build an explicit b·s² attention mask: not "
           "modelled); eager kernels' temporaries; step time unchanged (no cited compile speed-up factor)"]
    if setup.no_compile_loss:
        out.append("--no-compile-loss: the loss stays eager, its buffers as without --compile (torchtitan between "
                   "e8977b0, 2024-12-18, and its 2025 compile.components)")
    if setup.is_lora:
        out.append("torch.compile with LoRA (torchtune's LoRA recipes with compile: True), modelled with --recompute full "
                   "only: each block keeps its checkpointed input, as eager; the one block recomputed at a time in "
                   "backward is counted with its eager saved tensors (a compiled LoRA block is not measured: an upper "
                   "bound of that one layer); the loss compiled")
    if setup.recompute == "selective":
        out.append("torch.compile with --recompute selective: torchtitan's op-level SAC tags honoured by the partitioner "
                   "(PREFER_RECOMPUTE recomputed, MUST_SAVE kept where backward reads it): eager SAC's saved set less "
                   "the block's last matmul output when the policy saves it (trainmem/memory/compile.py)")
    out.append("compile on a GPU, one published measurement (torchtune, Llama-3.2-3B bf16, layers compiled, the loss "
               "eager as its full_finetune_single_device recipe runs it; benchmarks/published_points.json): compile saved "
               "9 GiB, this model 8.75 GiB; the compiled loss has no GPU measurement")
    if setup.recompute == "full":
        out.append("torch.compile with --recompute full: each checkpointed block is compiled with its checkpoint "
                   "(torchtitan apply_ac, then apply_compile): it keeps its input; its recompute is the compiled saved set")
    return out


def _layer(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, fp8: bool) -> LayerSaved | None:
    # (LoRA, checkpointed: the layer as eager, see compile_assumptions)
    return compiled_layer_saved(spec, setup, layer_idx, fp8) if setup.compile and not setup.is_lora else None


def _checkpoint_input(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    return compiled_checkpoint_input_bytes(spec, setup) if setup.compile and not setup.is_lora else None


LAYER_MODELS.append(LayerModel(layer_saved=_layer, checkpoint_input_bytes=_checkpoint_input))
