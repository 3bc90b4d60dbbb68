"""``trainmem trace --compile``: what one compiled decoder layer keeps for backward at the run's real size,
decided by torch's own partitioner, against ``estimate --compile``.

The fake-tensor step tracer cannot run ``torch.compile`` (Dynamo does not trace under the tracer's
``TorchDispatchMode`` stack and falls back to eager), so this traces the compiled layer alone: a two-layer copy of
the model is built on fake tensors (no memory, any size), its first decoder layer is compiled with
``backend="aot_eager_decomp_partition"`` (torch/_dynamo/backends/debugging.py, torch 2.13: AOTAutograd with
inductor's decompositions and ``min_cut_rematerialization_partition``, the partition inductor itself makes,
without generating kernels), checkpointed inside the compiled region under ``--recompute full`` (torchtitan's
apply_ac then apply_compile) and under ``--recompute selective`` with torchtitan's op-level SAC policy as its
``context_fn`` (:func:`torchtitan_op_sac_context`), and one forward records what autograd keeps (``saved_tensors_hooks``, by storage;
parameters and what the eager second layer also keeps — rotary cos/sin — left out, as the CPU generator state a
compiled checkpoint saves, host memory on a GPU). Attention dropout is set to 0 in the copy: CUDA's flash
kernel keeps no mask for it, where the CPU's SDPA would fall back to its math kernel. Autocast recipes run CPU
autocast, standing in for CUDA's (whose lists need CUDA): the saved matmul inputs and outputs are 16-bit under
both; not checked against CUDA.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["CompiledLayerTrace", "trace_compiled_layer"]

_BACKEND = "aot_eager_decomp_partition"


def _op_sac_save_list() -> set:
    """torchtitan's op-level SAC save list (torchtitan 0.2.2 ``models/llama3/infra/parallelize.py``
    ``_op_sac_save_list``; at 9dec370, 2024-12, ``_save_list`` also had ``aten.abs``), the ops that exist in torch
    2.13 and matter for a dense decoder layer, plus the CPU's SDPA flash kernel
    (``_scaled_dot_product_flash_attention_for_cpu``, what ``is_causal`` SDPA runs on the CPU) standing in for
    CUDA's ``_scaled_dot_product_flash_attention``, which the list names. (Copied, not imported: importing
    torchtitan's llama3 package needs triton.)"""
    import torch
    aten = torch.ops.aten
    return {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_cudnn_attention.default,
            aten._scaled_dot_product_flash_attention_for_cpu.default,
            torch.ops._c10d_functional.reduce_scatter_tensor.default, aten.max.default}


def torchtitan_op_sac_context():  # noqa: ANN201 - torch.utils.checkpoint's context_fn
    """torchtitan's op-level selective checkpointing policy as a ``context_fn`` (torchtitan 0.2.2
    ``distributed/activation_checkpoint.py`` ``_apply_op_sac._get_custom_policy``, unchanged in substance since
    9dec370's ``parallelize_llama.py``): MUST_SAVE the outputs of the save-list ops except every second
    ``aten.mm`` (the count restarts per checkpointed call, separately for forward and recompute); PREFER_RECOMPUTE
    the rest. Under ``torch.compile`` the partitioner honours these tags (torch 2.13
    ``torch/_functorch/partitioners.py``: ``must_recompute`` for PREFER_RECOMPUTE, ``should_ban_recomputation``
    "marked MUST_SAVE")."""
    from collections import defaultdict

    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save, meta = _op_sac_save_list(), defaultdict(int)

    def policy(ctx, func, *args, **kwargs):  # noqa: ANN001, ANN202
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == torch.ops.aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


@dataclass(frozen=True)
class CompiledLayerTrace:
    model: str
    tokens: int
    saved_bytes: int
    """What the compiled layer keeps for backward, as the partitioner decided (autocast: its 16-bit weight casts)."""
    estimate_bytes: int
    """``estimate --compile``'s layer (:func:`trainmem.memory.compile.compiled_layer_saved`, the checkpointed input
    under full recompute), plus autocast's 16-bit weight copies (2 B per matmul weight, as the estimate counts)."""
    tensors: list[tuple[tuple[int, ...], str, int]] = field(default_factory=list)
    method: str = _BACKEND

    def to_dict(self) -> dict:
        err = (self.estimate_bytes - self.saved_bytes) / self.saved_bytes if self.saved_bytes else 0.0
        return {"model": self.model, "tokens": self.tokens, "compiled_layer_saved_bytes": self.saved_bytes,
                "estimate_layer_bytes": self.estimate_bytes, "relative_error": err, "method": self.method,
                "saved_tensors": [{"shape": list(s), "dtype": d, "bytes": n} for s, d, n in self.tensors]}


def _two_layer_model(spec: "ModelSpec", setup: "TrainingSetup"):  # noqa: ANN202
    import torch
    import transformers

    cfg = copy.deepcopy(spec.hf_config)
    model_type = cfg.pop("model_type", spec.model_type)
    for k in ("architectures", "transformers_version", "_name_or_path", "torch_dtype", "dtype", "auto_map"):
        cfg.pop(k, None)
    cfg["n_layer" if model_type == "gpt2" else "num_hidden_layers"] = 2
    if isinstance(cfg.get("layer_types"), list):
        cfg["layer_types"] = cfg["layer_types"][:2]
    for key in ("attn_pdrop", "attention_dropout"):  # (CUDA's flash kernel keeps no dropout mask; the CPU's
        if key in cfg:                                 # SDPA would take its math kernel and keep s² tensors)
            cfg[key] = 0.0
    config = transformers.AutoConfig.for_model(model_type, **cfg)
    config.use_cache = False
    from trainmem.memory.layers.base import is_amp
    dtype = torch.float32 if (setup.precision == "fp32" or is_amp(setup)) else (
        torch.float16 if setup.precision in ("fp16", "amp-fp16") else torch.bfloat16)
    model = getattr(transformers, spec.architecture)._from_config(config, attn_implementation=setup.attn, dtype=dtype)
    model.train()
    if setup.precision == "fp8":  # torchao Float8Linear in every decoder linear (torchtitan's converter; head left out)
        _float8_layers(model)
    base = model.base_model  # (GPT-2 / Falcon: transformer.h; GPT-NeoX: gpt_neox.layers; OPT: model.decoder.layers)
    layers = getattr(base, "layers", None) or getattr(base, "h", None) or base.decoder.layers
    return model, layers, config


def _float8_layers(model) -> None:  # noqa: ANN001
    """torchao's ``convert_to_float8_training`` (tensorwise dynamic scaling, its default config) on every linear but
    the LM head (torchtitan's float8 converter filters ``output``). Needs torchao (not a trainmem dependency;
    traced with 0.7.0 and 0.11.0 on torch 2.13 CPU: trainmem/memory/fp8_compile.py)."""
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as e:
        from trainmem.errors import ConfigError
        raise ConfigError("trace --compile --precision fp8 needs torchao (pip install torchao)") from e
    head = model.get_output_embeddings()
    convert_to_float8_training(model, module_filter_fn=lambda mod, fqn: mod is not head)


def trace_compiled_layer(spec: "ModelSpec", setup: "TrainingSetup") -> CompiledLayerTrace:
    """Partition and run one compiled decoder layer of ``spec`` at ``setup``'s micro-batch on fake tensors."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.multiprocessing.reductions import StorageWeakRef

    from trainmem.memory.layers.base import is_amp
    from trainmem.memory.compile import compiled_layer_saved

    torch._dynamo.reset()
    state = {"inside": False}
    inner: dict[StorageWeakRef, tuple[tuple[int, ...], str, int]] = {}
    outer: set[StorageWeakRef] = set()
    rng_numel = torch.get_rng_state().numel()

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dtype == torch.uint8 and t.dim() == 1 and t.numel() == rng_numel:
            return t  # (the CPU generator's state a compiled checkpoint keeps: host memory)
        key = StorageWeakRef(t.untyped_storage())
        if state["inside"]:
            inner[key] = (tuple(t.shape), str(t.dtype).removeprefix("torch."), t.untyped_storage().nbytes())
        else:
            outer.add(key)
        return t

    from trainmem.trace.hf_eager import eager_branches

    with FakeTensorMode(), eager_branches():  # (no packed-sequence mask: SDPA's is_causal path, as on CUDA)
        model, layers, config = _two_layer_model(spec, setup)
        params = {StorageWeakRef(p.untyped_storage()) for p in model.parameters()}
        layer = layers[0]
        weights = sum(p.numel() for p in layer.parameters() if p.dim() == 2)
        fwd = layer.forward
        if setup.recompute in ("full", "selective"):
            from torch.utils.checkpoint import checkpoint
            extra = {"context_fn": torchtitan_op_sac_context} if setup.recompute == "selective" else {}

            def fwd(*args, _f=layer.forward, **kwargs):  # noqa: ANN001, ANN202, F811
                return checkpoint(_f, *args, use_reentrant=False, **extra, **kwargs)
        compiled = torch.compile(fwd, backend=_BACKEND)

        def marked(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            state["inside"] = True
            try:
                return compiled(*args, **kwargs)
            finally:
                state["inside"] = False
        layer.forward = marked
        ids = torch.randint(0, int(config.vocab_size), (setup.micro_batch, setup.seq_len))
        amp_dtype = torch.float16 if setup.precision == "amp-fp16" else torch.bfloat16
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=amp_dtype, enabled=is_amp(setup)):
            model(input_ids=ids, use_cache=False)
    kept = {k: v for k, v in inner.items() if k not in params and k not in outer}
    est = compiled_layer_saved(spec, setup, 0)
    est_bytes = est.total_bytes if setup.recompute != "full" else \
        next(t.bytes for t in est.terms if t.name == "layer_input")
    if setup.recompute == "selective":  # (the op-SAC policy's kept set, compiled: memory/compile.py, plan.py)
        from trainmem.memory.plan import kept_per_layer
        est_bytes = kept_per_layer(spec, setup)[0]
    if is_amp(setup) and setup.recompute == "none":
        est_bytes += 2 * weights  # autocast's 16-bit weight copies, kept by the matmuls (the estimate's copies)
    return CompiledLayerTrace(model=spec.name, tokens=setup.micro_batch * setup.seq_len,
                              saved_bytes=sum(n for _, _, n in kept.values()), estimate_bytes=est_bytes,
                              tensors=sorted(kept.values(), key=lambda v: -v[2]))


def print_compiled_trace(spec: "ModelSpec", setup: "TrainingSetup", as_json: bool, lang: str = "en") -> None:
    """``trainmem trace --compile``: the traced compiled layer against the estimate (JSON or a few lines)."""
    import json

    res = trace_compiled_layer(spec, setup)
    if as_json:
        print(json.dumps(res.to_dict()))
        return
    from rich.console import Console

    from trainmem.report.i18n import tr

    d = res.to_dict()
    mib = 2 ** 20
    lines = [f"compiled decoder layer of {spec.name}, {res.tokens:,} tokens (torch's min-cut partitioner on fake "
             f"tensors): {res.saved_bytes / mib:,.1f} MiB kept for backward",
             f"estimate --compile: {res.estimate_bytes / mib:,.1f} MiB per layer ({100 * d['relative_error']:+.2f} %)"]
    console = Console()
    for line in lines:
        console.print(tr(line, lang), markup=False)
    for shape, dtype, n in res.tensors[:12]:
        console.print(f"  {'x'.join(map(str, shape))} {dtype} {n / mib:,.1f} MiB", markup=False)
