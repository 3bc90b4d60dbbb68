"""Ground truth for per-layer activations: run one real decoder layer of a small transformers model on
the CPU and record every tensor autograd saves for backward (``saved_tensors_hooks``), by storage.

Shared per-forward tensors (rotary cos/sin, masks: saved by every layer) and parameters are excluded;
they are modelled separately (``model_wide_saved_bytes``).
"""

from __future__ import annotations

import torch



def layer_tracker(layers) -> tuple[dict, list]:
    """Forward hooks on each of ``layers`` that keep ``current["i"]`` the index of the layer running (None between
    layers); returns (current, the hook handles to remove)."""
    current: dict[str, int | None] = {"i": None}

    def pre(i):
        def f(_m, _a, _k=None):
            current["i"] = i
        return f

    def post(_m, _a, _o, *rest):
        current["i"] = None

    hooks = []
    for i, mod in enumerate(layers):
        hooks.append(mod.register_forward_pre_hook(pre(i), with_kwargs=True))
        hooks.append(mod.register_forward_hook(post, with_kwargs=True))
    return current, hooks

def _build(cfg: dict, attn: str, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(cfg)
    mt = cfg.pop("model_type")
    conf = AutoConfig.for_model(mt, **cfg)
    conf._attn_implementation = attn
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(conf, attn_implementation=attn).to(dtype)
    model.train()
    return model


def measured_layer_saved_bytes(cfg: dict, *, attn: str = "sdpa", dtype=torch.bfloat16, b: int = 2, s: int = 64,
                               layer: int = 1, autocast: bool = False) -> int:
    model = _build(cfg, attn, dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    layers = None
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == cfg.get("num_hidden_layers", cfg.get("n_layer")):
            layers = mod
            break
    assert layers is not None
    per_layer: list[dict[int, int]] = [dict() for _ in layers]
    current, hooks = layer_tracker(layers)
    keep = []

    def pack(t):
        keep.append(t)
        if current["i"] is not None:
            st = t.untyped_storage()
            per_layer[current["i"]][st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, cfg["vocab_size"], (b, s))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=ids, labels=ids, use_cache=False)
    for h in hooks:
        h.remove()
    mine = per_layer[layer]
    shared = set(per_layer[layer - 1]) | set(per_layer[layer + 1] if layer + 1 < len(per_layer) else {})
    total = sum(n for ptr, n in mine.items() if ptr not in params and ptr not in shared)
    del out
    return total
