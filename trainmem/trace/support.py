"""Which setups the tracer can run; everything else raises a one-line ``UnsupportedError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.errors import UnsupportedError

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["check_traceable"]

_HINT = "; use `trainmem estimate`"


def _no(what: str) -> UnsupportedError:
    return UnsupportedError(f"cannot trace {what}{_HINT}")


def check_traceable(spec: "ModelSpec", setup: "TrainingSetup") -> None:
    """Raise :class:`UnsupportedError` (one line) unless ``trace_step`` can run this setup."""
    from trainmem.setup import PAGED_OPTIMIZERS

    s = setup
    if s.engine not in ("torch", "fsdp2"):
        raise _no(f"the {s.engine} engine (only torch and fsdp2 are traced)")
    if s.engine == "torch" and s.dp > 1:
        raise _no(f"the torch engine with dp({s.dp}) > 1 (DDP buckets are not traced yet)")
    for axis in ("tp", "pp", "cp", "ep"):
        if getattr(s, axis) > 1 and not (axis in ("tp", "pp", "cp") and s.engine == "fsdp2"):
            raise _no(f"{axis}({getattr(s, axis)}) > 1")
    if s.pp > 1:  # one pipeline stage's slice and its 1F1B micro-batches (trace/pipeline.py)
        from trainmem.trace.pipeline import unsupported
        why = unsupported(spec, s)
        if why:
            raise _no(why)
    if s.cp > 1:  # torch's ring attention over SDPA, as torchtitan applies it (trace/cp.py)
        from trainmem.trace.cp import unsupported as cp_unsupported
        why = cp_unsupported(spec, s)
        if why:
            raise _no(why)
    if s.tp > 1:  # torchtitan's Llama TP plan on HF module names (trace/tp.py)
        from trainmem.trace.tp import TP_FAMILIES
        if spec.model_type not in TP_FAMILIES or spec.is_moe:
            raise _no(f"tp({s.tp}) with {spec.model_type} (the TP plan is verified for {', '.join(TP_FAMILIES)})")
        if s.loss != "hf":
            raise _no(f"tp({s.tp}) with --loss {s.loss} (TP is traced with transformers' own cross-entropy)")
        if spec.num_kv_heads % s.tp:  # ColwiseParallel k/v_proj split whole heads only (no kv replication)
            raise _no(f"tp({s.tp}) that does not divide num_key_value_heads({spec.num_kv_heads})")
    if s.optimizer == "adamw-8bit":
        raise _no("adamw-8bit (bitsandbytes kernels)")
    if s.loss == "cce":
        raise _no("--loss cce (Cut Cross-Entropy's Triton kernels)")
    if s.optimizer_in_backward:
        raise _no("--optimizer-in-backward (per-parameter optimizers in post-accumulate-grad hooks)")
    if s.optimizer in PAGED_OPTIMIZERS:
        raise _no(f"{s.optimizer} (bitsandbytes paged optimizer: CUDA managed memory)")
    if s.load_in_8bit:
        raise _no("--load-in-8bit (bitsandbytes int8 kernels)")
    if s.qlora:
        raise _no("LoRA/QLoRA fine-tuning (not traced yet)")
    if s.lora_rank and any(t.lower().startswith("qkv.") for t in s.lora_targets):
        raise _no("litgpt's fused-qkv LoRA slices (qkv.q/k/v; the tracer runs PEFT, which adapts whole modules)")
    if s.lora_rank and s.engine != "torch":
        raise _no(f"LoRA with the {s.engine} engine (LoRA is traced on the torch engine)")
    if s.loss != "hf" and (spec.is_encoder or spec.final_logit_softcapping or not spec.architecture.endswith(("ForCausalLM", "LMHeadModel"))):
        raise _no(f"--loss {s.loss} on {spec.architecture} (traced for causal LMs without logit softcapping)")
    if s.offload != "none":
        raise _no(f"offload {s.offload}")
    if s.offload_activations:  # (pinned host copies on a side stream; its packs are checked on real tensors instead)
        raise _no("--offload-activations (saved tensors copied to pinned host memory on a CUDA side stream)")
    if s.attn == "flash":
        raise _no("--attn flash (flash-attention-2 kernels need a GPU; --attn sdpa traces CUDA's flash SDPA kernel)")
    if s.recompute == "selective":
        raise _no("--recompute selective (not traced yet)")
    if s.recompute_layers is not None and s.pp > 1:
        raise _no("--recompute-layers with pp > 1 (traced on one stage: pp 1)")
    if s.device_map:
        raise _no("--device-map auto (one process over several GPUs; the tracer runs one device)")
    if s.flex_attention:
        raise _no("--attn flex (torch 2.13 has no FlexAttention backward on CPU)")
    if s.engine == "fsdp2" and s.fsdp_version == 1:
        raise _no("--fsdp-version 1 (the tracer runs FSDP2's fully_shard; FSDP1's flat parameters are estimated only)")
    if s.engine == "fsdp2" and s.precision == "amp-fp16":
        raise _no("fsdp2 with amp-fp16 (loss scaling of sharded gradients is not traced yet)")
    if spec.vision is not None:  # (trainmem/model/vlm.py: the tracer builds the text model only)
        raise _no(f"{spec.vision.model_type}'s vision tower (the tracer builds causal LMs; the tower is measured by "
                  "the estimate itself: docs/vision.md)")
    if not spec.hf_config:
        raise _no(f"{spec.name}: no Hugging Face config to build the model from")
    if spec.model_type == "opt" and (spec.hf_config.get("layerdrop") or 0) > 0:
        # OPTDecoder.forward: ``if torch.rand([]) < self.layerdrop: continue`` is a data-dependent branch
        raise _no(f"OPT with layerdrop({spec.hf_config['layerdrop']}) > 0 (layers skipped at random: a fake "
                  "tensor has no value to compare); the estimate counts every layer")
    try:
        import transformers
    except ImportError:
        raise UnsupportedError("tracing needs torch and transformers: pip install 'trainmem[trace]'") from None
    if s.lora_rank:
        try:
            import peft  # noqa: F401
        except ImportError:
            raise UnsupportedError("tracing LoRA needs peft: pip install 'trainmem[trace]'") from None
    if not hasattr(transformers, spec.architecture):
        raise _no(f"architecture {spec.architecture} (not in transformers {transformers.__version__})")
