"""Logits and the loss: often the largest single buffer (b·s·V elements).

``transformers`` (loss/loss_utils.py ``ForCausalLMLoss``) upcasts the logits to fp32 (``logits.float()``)
and runs ``cross_entropy``: log_softmax keeps its fp32 output; the 16-bit logits stay alive while the
caller holds the model output. At the loss backward, nll_loss's gradient (fp32) and log_softmax's input
gradient (fp32) are alive together: 2 + 4 + 4 + 4 = 14 B per b·s·V element (16 with fp32 logits).
Megatron's fused vocab-parallel cross entropy keeps one fp32 softmax buffer and computes the gradient in
place (megatron/core/tensor_parallel/cross_entropy.py): about 2 + 4 (+2 for the bf16 gradient).
flash-attn's Triton cross-entropy (``--loss fused-ce``) reads the 16-bit logits as they are and saves them:
2 + 2 (the gradient) and nothing in fp32 but a log-sum-exp per token.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory.layers.base import compute_bytes, is_amp, residual_bytes
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["LossBuffers", "loss_buffers", "accelerate_logits_fp32_copy_bytes", "unshifted_autocast_ce_buffers", "liger_chunk_rows", "fused_ce_buffers", "unshifted_16bit_ce_buffers",
           "cut_cross_entropy_buffers", "unsloth_ce_buffers"]


@dataclass(frozen=True, slots=True)
class LossBuffers:
    logits_bytes: int
    """Logits in the compute dtype, alive from the LM head until the step drops the model output."""
    kept_bytes: int
    """Other loss tensors kept from the loss forward to its backward (log-softmax output, softcap tanh)."""
    forward_transient_bytes: int
    """The fp32 upcast of the logits, alive only during the loss forward."""
    backward_transient_bytes: int
    """Gradients alive together at the loss backward (on top of logits and kept)."""
    grad_logits_bytes: int
    """The logits' gradient in the compute dtype, alive through the LM head backward."""
    head_grad_in_forward_bytes: int = 0
    """Fused linear cross-entropy: the LM head's weight gradient, computed in the loss forward."""
    head_backward_transient_bytes: int = 0
    """Alive with the LM head's gradient at its backward, beyond it and the logits' gradient (chunked: the
    next chunk's weight-gradient contribution before it is added in place)."""
    logits_saved: bool = False
    """The loss saves the logits themselves for its backward (a fused cross-entropy kernel): they outlive a
    dropped model output until the loss backward has run."""
    backward_transient_tensors: int = 1
    """How many equal tensors ``backward_transient_bytes`` is (2: nll_loss's gradient and log_softmax's input
    gradient, alive together); only the run replay's segments read it (trainmem/memory/run_reserve.py)."""
    logits_overlap_bytes: int = 0
    """With ``logits_saved``: the logits are saved chunk by chunk, one autograd node per chunk (torchtune's
    ``CEWithChunkedOutputLoss`` with ``compute_cross_entropy`` compiled: one compiled node per chunk), and each
    node releases its saved chunk once it has made that chunk's gradient, so the logits and their gradient overlap
    by one chunk (these bytes), not the whole b·s·V. 0: the whole logits outlive the gradient's allocation."""
    grad_in_place: bool = False
    """The loss backward writes the logits' gradient into the saved logits (unsloth's fast_cross_entropy_loss,
    memory/unsloth.py): the logits' storage becomes the gradient, no second b·s·V buffer."""
    output_fp32_copy_bytes: int = 0
    """accelerate's ``convert_outputs_to_fp32`` (``--accelerate-autocast``): the fp32 copy of the 16-bit logits made
    when the wrapped forward returns, the 16-bit logits then dropped with the inner output
    (:func:`accelerate_logits_fp32_copy_bytes`)."""


def loss_buffers(spec: ModelSpec, setup: TrainingSetup) -> LossBuffers:
    """Bytes of the logits/loss buffers for one micro-batch on the last stage."""
    lb = _loss_buffers(spec, setup)
    if not setup.accelerate_autocast:
        return lb
    from dataclasses import replace
    T = setup.micro_batch * setup.seq_len // setup.cp
    return replace(lb, output_fp32_copy_bytes=accelerate_logits_fp32_copy_bytes(T * spec.output_size,
                                                                               compute_bytes(setup)))


def accelerate_logits_fp32_copy_bytes(n: int, logit_bytes: int) -> int:
    """The fp32 copy of n 16-bit logits that accelerate makes of the model's output: ``Accelerator.prepare_model``
    with native AMP sets ``model.forward = convert_outputs_to_fp32(autocast_context(forward))`` (accelerate v0.25.0
    src/accelerate/accelerator.py; HF Trainer ``bf16=True`` prepares the model so), and ``convert_to_fp32``
    (utils/operations.py) calls ``tensor.float()`` on every fp16/bf16 tensor of the output (the logits; the loss is
    already fp32 under autocast: nll_loss is an fp32-list op). 4 B per element beside the 16-bit logits while it
    copies; 0 for logits already in fp32."""
    return 4 * n if logit_bytes == 2 else 0


def unshifted_autocast_ce_buffers(n: int, c: int) -> LossBuffers:
    """Qwen1's own loss (as :func:`unshifted_16bit_ce_buffers`: ``shift_logits = lm_logits[..., :-1,
    :].contiguous()``, ``CrossEntropyLoss()``) under autocast over 16-bit weights (``--accelerate-autocast``):
    log_softmax is an fp32-list op (torch aten/src/ATen/autocast_mode.cpp, fp32 list; nll_loss too), so its input
    is cast to fp32 (4·n, alive only in the loss forward, on top of the 16-bit shifted copy c·n, a local of the
    forward), its fp32 output is kept (4·n), and at the backward nll_loss's and log_softmax's gradients are fp32
    (4·n each, alive together); the cast's backward then the slice's give the 16-bit gradient of the logits (c·n)."""
    return LossBuffers(logits_bytes=c * n, kept_bytes=4 * n, forward_transient_bytes=c * n + 4 * n,
                       backward_transient_bytes=8 * n, grad_logits_bytes=c * n, backward_transient_tensors=2)


def _loss_buffers(spec: ModelSpec, setup: TrainingSetup) -> LossBuffers:
    T = setup.micro_batch * setup.seq_len // setup.cp
    # (a classification head: num_labels logits per position, computed on every position and pooled)
    V = spec.output_size // setup.tp if setup.loss_parallel else spec.output_size
    c = compute_bytes(setup)
    n = T * V
    if setup.engine == "megatron":
        return LossBuffers(logits_bytes=c * n, kept_bytes=4 * n, forward_transient_bytes=0,
                           backward_transient_bytes=0, grad_logits_bytes=c * n if c == 2 else 0)
    if spec.is_encoder and c == 2 and not is_amp(setup) and not setup.accelerate_autocast:
        # *ForMaskedLM calls CrossEntropyLoss on the logits as they are (no fp32 upcast): in pure
        # 16-bit, log_softmax keeps a 16-bit output and its backward makes 16-bit gradients
        return LossBuffers(logits_bytes=c * n, kept_bytes=c * n, forward_transient_bytes=0,
                           backward_transient_bytes=2 * c * n, grad_logits_bytes=0, backward_transient_tensors=2)
    if not spec.logits_upcast and setup.loss == "hf" and c == 2 and setup.accelerate_autocast and not setup.loss_parallel:
        return unshifted_autocast_ce_buffers(n, c)
    if not spec.logits_upcast and setup.loss == "hf" and c == 2 and not is_amp(setup) and not setup.loss_parallel:
        return unshifted_16bit_ce_buffers(n, c)
    if setup.loss_parallel:
        return _sp_final_norm_shard(spec, setup, _dtensor_loss_parallel(spec, setup, n, c))
    if setup.compile and not setup.no_compile_loss and setup.loss in ("hf", "chunked"):  # (memory/compile.py)
        from trainmem.memory.compile import compiled_loss_buffers
        eager = _chunked(spec, setup, n, c) if setup.loss == "chunked" else _loss_buffers(
            spec, setup.model_copy(update={"compile": False}))
        return compiled_loss_buffers(eager, setup, T, V)
    if setup.loss == "chunked":
        return _chunked(spec, setup, n, c)
    if setup.loss == "fused-linear":
        return _fused_linear(spec, setup, T, V, c)
    if setup.loss == "fused-ce":
        return _sp_final_norm_shard(spec, setup, fused_ce_buffers(T, V, c))
    if setup.loss == "cce":
        return cut_cross_entropy_buffers(T, V)
    if setup.loss == "unsloth":
        return unsloth_ce_buffers(T, V, c)
    kept = 4 * n
    if spec.final_logit_softcapping and spec.head == "lm":
        kept += c * n  # tanh output kept for backward; division by the cap keeps nothing
    fwd = 4 * n if c == 2 else 0
    return _sp_final_norm_shard(spec, setup, LossBuffers(
        logits_bytes=c * n, kept_bytes=kept, forward_transient_bytes=fwd, backward_transient_bytes=8 * n,
        grad_logits_bytes=c * n if c == 2 else 0, backward_transient_tensors=2))


def unshifted_16bit_ce_buffers(n: int, c: int) -> LossBuffers:
    """A model whose own forward runs ``CrossEntropyLoss`` on its 16-bit logits (``spec.logits_upcast`` False),
    for n = b·s·V elements: Qwen1's ``QWenLMHeadModel.forward`` (modeling_qwen.py of the Qwen/Qwen-7B hub repo)
    does ``shift_logits = lm_logits[..., :-1, :].contiguous()`` and ``CrossEntropyLoss()(shift_logits.view(-1,
    V), ...)``. In pure 16-bit nothing is upcast: the contiguous shifted copy (c·n, a local of the forward,
    freed when it returns: not saved, log_softmax keeps its output instead) exists with the logits during the
    loss forward; log_softmax keeps its 16-bit output (c·n); at the backward nll_loss's gradient and
    log_softmax's input gradient (c·n each) are alive together, then the slice's backward writes a zero-padded
    full-size gradient of ``lm_logits`` (c·n) for the LM head. (Under autocast log_softmax is an fp32 op:
    the upcast path applies.)"""
    return LossBuffers(logits_bytes=c * n, kept_bytes=c * n, forward_transient_bytes=c * n,
                       backward_transient_bytes=2 * c * n, grad_logits_bytes=c * n, backward_transient_tensors=2)


def unsloth_ce_buffers(tokens: int, vocab: int, logit_bytes: int) -> LossBuffers:
    """``Fast_CrossEntropyLoss`` (unsloth ef70177a24 kernels/cross_entropy_loss.py) over ``tokens`` rows of
    ``vocab`` logits of ``logit_bytes`` each: the forward allocates ``losses`` and ``logsumexp`` (fp32, one per
    row) and saves ``(logits, logsumexp, labels)``; the labels are ``torch.hstack((labels[..., 1:],
    extra_ignored_labels))``, a new int64 tensor (llama.py ``LlamaForCausalLM_fast_forward``); ``losses`` dies
    after ``loss.sum()``. The backward's Triton kernel writes the gradient into ``logits`` and returns
    ``logits``: no second b·s·V buffer — the logits' storage is the gradient the LM head's backward reads."""
    n = tokens * vocab
    return LossBuffers(logits_bytes=logit_bytes * n, kept_bytes=(4 + 8) * tokens, forward_transient_bytes=4 * tokens,
                       backward_transient_bytes=0, grad_logits_bytes=logit_bytes * n, logits_saved=True,
                       grad_in_place=True)


def cut_cross_entropy_buffers(tokens: int, vocab: int) -> LossBuffers:
    """Apple's Cut Cross-Entropy (``cut_cross_entropy.linear_cross_entropy``, impl ``cce``; apple/ml-cross-entropy
    @ d42911f cut_cross_entropy/cce.py ``LinearCrossEntropyFunction``, cce_backward.py ``cce_backward_kernel``;
    axolotl's ``cut_cross_entropy`` plugin patches the model's forward with it). The logits are never
    materialised: the forward's Triton kernel computes the log-sum-exp per token (fp32) and, with the default
    ``filter_eps="auto"``, the mean logit per vocabulary entry (fp32, V); ``indexed_neg_dot`` gives the target
    logit per token (fp32, freed with the forward). It saves ``(e, c, bias, lse, targets, valids, logit_avg)``:
    the final hidden state and the head weight (already alive: the LM head's saved input and parameter, which the
    walk counts as for the model's own head), the lse (4 B a token), the valid-token indices (int64, 8 B a
    token, ``_build_flat_valids``) and logit_avg (4·V). The backward sorts the vocabulary by logit_avg (int32,
    4·V) and writes ``de = zeros_like(e)`` (the gradient stream the walk allocates) and ``dc = zeros_like(c)``
    only when the head trains (the head's .grad, allocated by the walk at the loss backward); no b·s·V tensor
    exists at any time."""
    return LossBuffers(logits_bytes=0, kept_bytes=12 * tokens + 4 * vocab, forward_transient_bytes=4 * tokens,
                       backward_transient_bytes=4 * vocab, grad_logits_bytes=0)


def fused_ce_buffers(tokens: int, vocab: int, logit_bytes: int) -> LossBuffers:
    """flash-attn's cross-entropy (flash_attn/ops/triton/cross_entropy.py ``CrossEntropyLoss``, v2.x; the
    ``flash_attn.losses.cross_entropy.CrossEntropyLoss`` module that llm-foundry's ``loss_fn:
    fused_crossentropy`` builds with ``inplace_backward`` left False, llmfoundry/models/mpt/modeling_mpt.py
    @ b2a43a1477a4). Its kernels read the logits in their own dtype and compute in fp32 registers: the
    forward allocates ``losses``, ``lse`` and ``z_losses`` (fp32, one per token) and saves ``(logits, lse,
    labels)``; the backward allocates ``dlogits = torch.empty_like(logits)`` and writes the gradient there.
    So no fp32 b·s·V buffer exists at any time; the logits stay alive (saved) until the loss backward."""
    n = tokens * vocab
    return LossBuffers(logits_bytes=logit_bytes * n, kept_bytes=4 * tokens, forward_transient_bytes=8 * tokens,
                       backward_transient_bytes=0, grad_logits_bytes=logit_bytes * n, logits_saved=True)


def _sp_final_norm_shard(spec: ModelSpec, setup: TrainingSetup, lb: LossBuffers) -> LossBuffers:
    """fsdp2 + tp with SequenceParallel: the final norm's output is a sequence shard that the LM head
    all-gathers (and keeps gathered); the shard itself stays referenced by ``*ForCausalLM.forward``
    (``hidden_states``) until the loss inside it returns: r·b·s·h/tp more during the loss forward (traced)."""
    if not (setup.sp and setup.engine == "fsdp2"):
        return lb
    from dataclasses import replace

    from trainmem.memory.layers.base import residual_bytes
    tokens = setup.micro_batch * setup.seq_len // setup.cp
    shard = residual_bytes(setup) * tokens * spec.hidden_size // setup.tp
    return replace(lb, forward_transient_bytes=lb.forward_transient_bytes + shard)


def _dtensor_loss_parallel(spec: ModelSpec, setup: TrainingSetup, n: int, c: int) -> LossBuffers:
    """torchtitan's loss parallel (fsdp2 + tp): the output projection keeps logits vocab-sharded
    (``Shard(-1)``) and ``F.cross_entropy`` runs on the DTensor inside ``loss_parallel()``
    (torch/distributed/tensor/parallel/loss.py ``_log_softmax``/``_nll_loss_forward`` handlers, torch 2.13):
    the fp32 upcast (``pred.float()``), the shifted logits and their ``exp`` exist together in forward; the
    log-softmax (fp32) is kept; ``_log_softmax_backward_data`` makes ``exp(output)`` and the input gradient
    on top of the nll gradient: three fp32 V/t buffers at the loss backward (traced with MemTracker)."""
    kept = 4 * n + (c * n if spec.final_logit_softcapping and spec.head == "lm" else 0)
    # per token (not per vocabulary entry): the nll handler keeps the int64 target for backward (8 B), and
    # its backward's masked/offset targets (3 × int64), per-token fp32 values (2 × 4) and the ignore mask
    # (bool) are alive with the three V/t buffers: 33 B (traced; visible only on toy vocabularies)
    # (forward: the nll handler's safe/offset targets and per-token results, 20 B a token, with the V/t buffers)
    tokens = setup.micro_batch * setup.seq_len // setup.cp
    kept += 8 * tokens
    return LossBuffers(logits_bytes=c * n, kept_bytes=kept, forward_transient_bytes=(8 if c == 2 else 4) * n + 20 * tokens,
                       backward_transient_bytes=12 * n + 33 * tokens, grad_logits_bytes=c * n if c == 2 else 0)


def _chunked(spec: ModelSpec, setup: TrainingSetup, n: int, c: int) -> LossBuffers:
    """torchtune ``CEWithChunkedOutputLoss`` (torchtune/modules/loss/ce_chunked_output_loss.py): the model
    returns its logits as ``k`` chunks along the sequence (all materialised, compute dtype), each upcast to
    fp32 inside the loss, one chunk at a time. Every chunk's log-softmax (fp32) is kept for backward (4 B per
    b·s·V element, as unchunked); the fp32 upcast and the backward's nll/log-softmax gradients exist for one
    chunk at a time (n/k), and the 16-bit gradients of all chunks meet at the LM head backward.

    The LM head runs once per chunk, so its weight gets k gradient contributions. The autograd engine runs
    every chunk's loss backward first (their nodes are newer than the k head matmuls) and then the matmuls'
    backward, each freeing its chunk's logits gradient; autograd's InputBuffer adds each contribution into
    the first in place (torch/csrc/autograd/input_buffer.cpp ``can_accumulate_inplace``; trace/step.py
    ``_HeadGradInPlace``). So at the second chunk's head backward the first contribution and the new one
    (the weight gradient's dtype: the compute dtype without autocast) are alive with k - 1 of the k chunk
    logits' gradients: c·V·h − c·n/k beyond the walk's gradient + logits gradient. (Under autocast the
    contributions are the 16-bit cast's, 2 B each, which the engine's 16-bit-gradient term already covers.)"""
    k = setup.loss_chunks or 8
    per = -(-n // k)
    kept = 4 * n + (c * n if spec.final_logit_softcapping and spec.head == "lm" else 0)
    V = n // max(1, setup.micro_batch * setup.seq_len // setup.cp)
    second = c * V * spec.hidden_size - c * per if (k > 1 and not is_amp(setup) and not setup.is_lora) else 0
    return LossBuffers(logits_bytes=c * n, kept_bytes=kept, forward_transient_bytes=4 * per if c == 2 else 0,
                       backward_transient_bytes=8 * per, grad_logits_bytes=c * n if c == 2 else 0,
                       head_backward_transient_bytes=max(0, second))


def liger_chunk_rows(tokens: int, vocab: int, hidden: int, chunks: int | None = None) -> int:
    """Rows of one chunk of Liger-Kernel's fused linear cross-entropy:
    ``next_power_of_2(cdiv(BT, cdiv(V, H)))`` (liger_kernel/ops/fused_linear_cross_entropy.py), or
    ``cdiv(BT, chunks)`` when the number of chunks is given."""
    if chunks:
        return -(-tokens // chunks)
    inc = -(-vocab // hidden)
    rows = -(-tokens // inc)
    return 1 << max(0, (rows - 1).bit_length())


def _fused_linear(spec: ModelSpec, setup: TrainingSetup, T: int, V: int, c: int) -> LossBuffers:
    """Liger-Kernel ``LigerFusedLinearCrossEntropyFunction`` (Liger-Kernel v0.8.2,
    src/liger_kernel/ops/fused_linear_cross_entropy.py ``fused_linear_cross_entropy_forward``; traced by its
    twin in trainmem/trace/losses.py): the logits are never materialised. The forward allocates
    ``grad_input = zeros_like(_input)`` (the final hidden state's dtype, fp32 under autocast; kept for
    backward and handed to the final norm's backward as the gradient stream) and ``grad_weight =
    zeros_like(weight)`` (the weight's dtype; it becomes the LM head's .grad — tied: the embedding's, which
    the walk allocates at the loss forward), then loops over chunks of ``next_power_of_2(cdiv(BT, cdiv(V,
    H)))`` rows. Alive with a chunk's logits (compute dtype, turned into their gradient in place), besides
    the final hidden state itself (held by the model's forward while the loss runs, r·T·h):

    - under autocast over fp32 weights: ``_input_chunk @ weight.t()`` casts the weight's transposed *view*
      (not cached: a new 16-bit V·h copy per chunk) and the chunk, while the 16-bit cast of ``weight`` made
      by the previous chunk's ``grad_logits @ weight`` is cached (a leaf parameter) until autocast exits:
      2·c·V·h from the second chunk on; ``grad_weight`` (fp32) is accumulated by ``torch.addmm(...,
      out_dtype=torch.float32, out=grad_weight)`` with no V·h temporary (torch >= 2.8, CUDA sm >= 8.0);
    - otherwise (16-bit or fp32 weights, no autocast): ``grad_weight += torch.mm(grad_logits.t(),
      _input_chunk).float()``, a V·h product in the compute dtype and, when 16-bit, its fp32 copy.

    With LoRA the LM head is frozen and 16-bit (trace/lora.py): ``grad_weight`` is None (no accumulation)
    and nothing is cast; the final hidden state held by the forward is the walk's LoRA head frame.

    Backward only rescales the two buffers in place."""
    h = spec.hidden_size
    rows = min(liger_chunk_rows(T, V, h, setup.loss_chunks), T)
    chunks = -(-T // rows)
    r = residual_bytes(setup)
    lora = setup.is_lora
    w = 0 if lora else (4 if (c == 4 or is_amp(setup)) else 2)
    logits = c * rows * V
    if lora:
        chunk = logits + c * rows * h
    elif is_amp(setup):
        chunk = logits + (2 if chunks > 1 else 1) * c * V * h + c * rows * h
    else:
        chunk = logits + c * V * h + (4 * V * h if c == 2 else 0)
    # per token: the shifted labels made contiguous (int64), loss_1d (fp32), the ignore mask (bool)
    small = 13 * T
    held = 0 if lora else r * T * h
    return LossBuffers(logits_bytes=0, kept_bytes=r * T * h, forward_transient_bytes=held + chunk + small,
                       backward_transient_bytes=0, grad_logits_bytes=0, head_grad_in_forward_bytes=w * V * h)
