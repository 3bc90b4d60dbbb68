"""Ground truth for ``--compile``: run a small transformers model on the CPU with decoder layers under
``torch.compile`` and record every tensor autograd keeps for backward (``saved_tensors_hooks``: a compiled
region's ``CompiledFunction`` saves its partitioned forward's outputs with ``ctx.save_for_backward``, which the
hooks see), by storage.

``backend="aot_eager_decomp_partition"`` (torch/_dynamo/backends/debugging.py) runs AOTAutograd with inductor's
decompositions and the min-cut partitioner, as inductor does, without generating kernels (seconds instead of
a minute on two cores); tests/trace/test_compile_trace.py runs ``backend="inductor"`` itself.
"""

from __future__ import annotations

import torch

from tests.memory.measure import _build, layer_tracker

PARTITION_BACKEND = "aot_eager_decomp_partition"


def _layers(model) -> torch.nn.ModuleList:
    best = None  # (the decoder's blocks: the longest ModuleList)
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and (best is None or len(mod) > len(best)):
            best = mod
    assert best is not None
    return best


def _compile_layer(layer: torch.nn.Module, backend: str, checkpointed: bool) -> None:
    """Compile one layer's forward (its module hooks stay eager, outside the compiled region), optionally with
    a non-reentrant checkpoint inside it, as torchtitan's apply_ac then apply_compile do."""
    fwd = layer.forward
    if checkpointed:
        from torch.utils.checkpoint import checkpoint

        def fwd(*args, _f=layer.forward, **kwargs):  # noqa: F811
            return checkpoint(_f, *args, use_reentrant=False, **kwargs)
    layer.forward = torch.compile(fwd, backend=backend)


def host_rng_state(t: torch.Tensor) -> bool:
    """The CPU generator's state a compiled checkpoint saves (``torch.get_rng_state()``, 5056 uint8): host
    memory on a GPU run, not allocated on the device."""
    return t.dtype == torch.uint8 and t.dim() == 1 and t.numel() == torch.get_rng_state().numel()


def compiled_layer_saved_bytes(cfg: dict, *, dtype=torch.bfloat16, autocast: bool = False, b: int = 2, s: int = 64,
                               layer: int = 1, checkpointed: bool = False,
                               backend: str = PARTITION_BACKEND) -> tuple[int, int]:
    """(bytes the compiled ``layer`` keeps for backward, bytes of its 16-bit weight copies among them — autocast's
    casts of fp32 weights, which the estimator counts apart as weight copies)."""
    torch._dynamo.reset()
    model = _build(cfg, "sdpa", dtype)
    layers = _layers(model)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    weight_shapes = {tuple(p.shape) for p in layers[layer].parameters() if p.dim() == 2}
    _compile_layer(layers[layer], backend, checkpointed)
    per_layer: list[dict[int, tuple[int, bool]]] = [dict() for _ in layers]
    current, hooks = layer_tracker(layers)

    def pack(t):
        if current["i"] is not None and not host_rng_state(t):
            st = t.untyped_storage()
            copy = autocast and t.dtype == torch.bfloat16 and (tuple(t.shape) in weight_shapes
                                                               or tuple(t.shape[::-1]) in weight_shapes)
            per_layer[current["i"]][st.data_ptr()] = (st.nbytes(), copy)
        return t

    ids = torch.randint(0, model.config.vocab_size, (b, s))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
    finally:
        for h in hooks:
            h.remove()
    mine = per_layer[layer]
    shared = set(per_layer[layer - 1]) | set(per_layer[layer + 1] if layer + 1 < len(per_layer) else {})
    kept = {ptr: v for ptr, v in mine.items() if ptr not in params and ptr not in shared}
    return sum(n for n, _ in kept.values()), sum(n for n, copy in kept.values() if copy)
