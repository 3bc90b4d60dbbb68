"""HF ``from_pretrained(..., device_map="auto")``: the decoder split over the GPUs of one process.

transformers 5.24 ``integrations/accelerate.py`` ``_get_device_map`` computes ``max_memory`` with its own
``get_balanced_memory`` and places modules with ``infer_auto_device_map`` (the greedy walk of accelerate 1.15
``utils/modeling.py``); ``dispatch_model`` (accelerate ``big_modeling.py``) then puts an ``AlignDevicesHook`` on
every placed module, which moves its inputs to its device (``hooks.py`` ``pre_forward``), and on the root
module with ``io_same_device=True``, which sends the model output back to the input device (GPU 0,
``post_forward``). HF ``Trainer`` sees ``hf_device_map`` over more than one device, sets
``is_parallelizable``/``model_parallel`` and neither moves the model nor wraps it in DataParallel/DDP
(transformers ``trainer.py``): naive model parallelism, one GPU busy at a time.

Each GPU is then a pipeline stage run without overlap: its layers' parameters (a frozen 16-bit base for
LoRA), their adapters' gradients and optimizer states, the saved activations of the one micro-batch in
flight, the hidden state received from the GPU before (and its gradient sent back); the embedding on GPU 0,
the final norm, the head and the loss on the GPU the walk reaches last, and the logits' copy on GPU 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.errors import ConfigError
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["DeviceSplit", "balanced_max_memory_bytes", "device_map_note", "device_split", "infer_device_split",
           "load_elem_bytes", "per_gpu_report", "split_setup"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceSplit:
    """Where accelerate puts the modules of a decoder model, GPU by GPU."""

    layers_per_gpu: tuple[int, ...]
    """Decoder layers on each used GPU, first to last (GPUs left empty are dropped)."""
    head_gpu: int
    """The GPU of ``lm_head`` (and so of the logits and the loss)."""
    max_memory_bytes: tuple[int, ...]
    """``get_balanced_memory``'s budget per GPU (the last keeps all its free memory)."""
    module_bytes: int
    """``compute_module_sizes(model)[""]``: the loaded model's bytes."""


def load_elem_bytes(s: TrainingSetup) -> int:
    """Bytes per weight as ``from_pretrained`` loads it: the 16-bit base of LoRA (``torch_dtype`` bf16/fp16),
    fp32 for fp32 and for full fine-tuning under autocast (fp32 parameters)."""
    if s.precision == "fp32":
        return 4
    if s.is_lora:
        return 2
    return 4 if s.precision in ("amp-bf16", "amp-fp16") else 2


def _layer_bytes(spec: ModelSpec, elem: int, qlora: bool) -> list[int]:
    """Bytes of each decoder layer as loaded. ``qlora``: bitsandbytes' ``Linear4bit`` weights count 0.5 B each
    (transformers 5.24 ``quantizers/quantizer_bnb_4bit.py`` ``quantized_element_size``), the rest ``elem``."""
    out = []
    for lp in spec.params.layers:
        n = lp.attention + lp.mlp + lp.experts + lp.shared_experts + lp.router + lp.norms
        out.append(elem * (n - lp.matmul) + lp.matmul // 2 if qlora else elem * n)
    return out


def _biggest_leaf_bytes(spec: ModelSpec, elem: int, qlora: bool) -> int:
    """The largest module holding parameters directly (transformers ``compute_module_sizes``' leaves): the
    embedding, the head, or a layer's largest linear (an MLP projection h·i, q_proj h·heads·head_dim; 4-bit
    with ``qlora``: 0.5 B per weight)."""
    h = spec.hidden_size
    pc = spec.params
    linear = max(h * spec.intermediate_size, h * spec.num_attention_heads * spec.head_dim)
    return max(elem * pc.embedding, elem * pc.lm_head, linear // 2 if qlora else elem * linear)


def balanced_max_memory_bytes(total_bytes: int, biggest_block_bytes: int, biggest_leaf_bytes: int,
                              free_bytes: list[int]) -> list[int]:
    """transformers 5.24 ``integrations/accelerate.py`` ``get_balanced_memory`` (``low_zero=False``): every GPU
    but the last gets ``total // n + int(1.25 · max(biggest no-split block, biggest leaf))``, capped at its free
    memory; the last keeps its free memory "in case the buffer is not enough". (accelerate 1.15's own
    ``get_balanced_memory`` uses the mean of the leaf modules instead of the largest.) One GPU: 90 %."""
    n = len(free_bytes)
    if n == 1:
        return [int(free_bytes[0] * 0.9)]
    per_gpu = total_bytes // n + int(1.25 * max(biggest_block_bytes, biggest_leaf_bytes))
    return [min(per_gpu, f) for f in free_bytes[:-1]] + [free_bytes[-1]]


def _max_module(mods: list[tuple[str, int, list | None]]) -> tuple[int, list[str]]:
    """accelerate ``get_max_layer_size``: the largest leaf or no-split block among ``mods`` (and their children)."""
    size, names, todo = 0, [], list(mods)
    while todo:
        name, n, children = todo.pop(0)
        if children:
            todo = children + todo
        elif n > size:
            size, names = n, [name]
        elif n == size:
            names.append(name)
    return size, names


def infer_device_split(mods: list[tuple[str, int, list | None]], max_memory: list[int]) -> dict[str, int]:
    """accelerate 1.15 ``utils/modeling.py`` ``infer_auto_device_map`` (no tied weights, no fallback): walk the
    modules in order, put each on the current GPU if it fits (GPU 0, the main device, keeps room for the largest
    layer still to place), else split it into its children (``None``: a leaf or a ``_no_split_modules`` block)
    or move to the next GPU. ``mods``: (name, bytes, children). Returns name → GPU index; past the last GPU
    accelerate offloads to the CPU, which is refused."""
    todo, out = list(mods), {}
    used = [0] * len(max_memory)
    cur = 0
    max_size, max_names = _max_module(todo)
    while todo:
        name, size, children = todo.pop(0)
        max_names = [n for n in max_names if n != name and not n.startswith(name + ".")]
        if not max_names:
            max_size, max_names = _max_module(todo)
        if cur >= len(max_memory):
            raise ConfigError(f"--device-map auto: the model does not fit on {len(max_memory)} GPUs; accelerate "
                              "would offload layers to the CPU, which is not modelled")
        cap, reserved = max_memory[cur], 0
        if cur == 0:
            cap, reserved = cap - max_size, max_size
        if used[cur] + size <= cap:
            used[cur] += size
            out[name] = cur
            continue
        if children:
            todo = children + todo
            max_size, max_names = _max_module(todo)
            continue
        used[cur] += reserved
        cur += 1
        todo.insert(0, (name, size, children))
    return out


def device_split(spec: ModelSpec, s: TrainingSetup, free_bytes: int) -> DeviceSplit:
    """The split of a ``*ForCausalLM`` (``model`` = embed_tokens, layers, norm; ``lm_head``) over ``s.gpus``
    GPUs with ``free_bytes`` free on each at load time (``torch.cuda.mem_get_info``). QLoRA (bitsandbytes 4-bit:
    the layers' linears quantised, embedding and head 16-bit): 4-bit sizes, and every GPU's budget × 0.9
    (``Bnb4BitHfQuantizer.adjust_max_memory``)."""
    if spec.tie_word_embeddings:
        raise ConfigError("--device-map auto with tied word embeddings is not modelled (accelerate keeps the tied "
                          "head on the embedding's GPU)")
    elem, pc = load_elem_bytes(s), spec.params
    layers = _layer_bytes(spec, elem, s.qlora)
    emb, norm, head = elem * (pc.embedding + pc.position_embedding), elem * (pc.final_norm + pc.other), elem * pc.lm_head
    blocks = [(f"model.layers.{i}", b, None) for i, b in enumerate(layers)]
    model = [("model.embed_tokens", emb, None), ("model.layers", sum(layers), blocks), ("model.norm", norm, None)]
    total = emb + sum(layers) + norm + head
    mods = [("model", emb + sum(layers) + norm, model), ("lm_head", head, None)]
    budget = balanced_max_memory_bytes(total, max(layers), _biggest_leaf_bytes(spec, elem, s.qlora), [free_bytes] * s.gpus)
    if s.qlora:  # bitsandbytes' adjust_max_memory: "need more space for buffers created during quantization"
        budget = [int(b * 0.9) for b in budget]
    where = infer_device_split(mods, budget)
    gpu_of = [where.get(f"model.layers.{i}", where.get("model.layers", where.get("model", 0)))
              for i in range(len(layers))]
    head_gpu = where.get("lm_head", 0)
    if where.get("model.embed_tokens", where.get("model", 0)) != 0:
        raise ConfigError("--device-map auto: the embedding is not on GPU 0; not modelled")
    used = sorted(set(gpu_of) | {head_gpu})
    if head_gpu != used[-1] or any(b < a for a, b in zip(gpu_of, gpu_of[1:])):
        raise ConfigError("--device-map auto: the head is not on the last GPU the layers reach; not modelled")
    counts = tuple(sum(1 for g in gpu_of if g == u) for u in used)
    return DeviceSplit(layers_per_gpu=counts, head_gpu=head_gpu, max_memory_bytes=tuple(budget), module_bytes=total)


def split_setup(s: TrainingSetup, split: DeviceSplit) -> TrainingSetup:
    """The setup the step walk runs for one GPU of the split: a pipeline of the used GPUs with the split's layer
    counts (``stage_layers``), walked micro-batch after micro-batch (``device_map``: no 1F1B, one in flight)."""
    return s.model_copy(update={"pp": len(split.layers_per_gpu), "stage_layers": split.layers_per_gpu, "dp": 1})


def per_gpu_report(split: DeviceSplit, peaks: list[tuple[int, int]], cuda_only: int) -> dict:
    """The JSON ``device_map`` object: the split and each GPU's peak allocated and reserved bytes
    (``peaks``: (walk peak, bytes left at the step's end) per GPU, without ``cuda_only``)."""
    from trainmem.memory.overhead import reserved_bytes

    gpus = [{"gpu": i, "layers": n, "peak_allocated_bytes": p + cuda_only,
             "peak_reserved_bytes": reserved_bytes(p + cuda_only, end + cuda_only, cuda_only)}
            for i, (n, (p, end)) in enumerate(zip(split.layers_per_gpu, peaks))]
    return {"layers_per_gpu": list(split.layers_per_gpu), "head_gpu": split.head_gpu,
            "max_memory_bytes": list(split.max_memory_bytes), "model_bytes": split.module_bytes,
            "most_loaded_gpu": max(range(len(gpus)), key=lambda i: gpus[i]["peak_allocated_bytes"]), "per_gpu": gpus}


def device_map_note(split: DeviceSplit, most_loaded: int) -> str:
    """The assumption line of a ``--device-map auto`` estimate."""
    layers = "+".join(str(n) for n in split.layers_per_gpu)
    return (f"device_map auto: layers {layers} over GPUs 0..{len(split.layers_per_gpu) - 1} (transformers "
            f"get_balanced_memory + accelerate infer_auto_device_map), embedding on GPU 0, head and loss on GPU "
            f"{split.head_gpu}, logits copied back to GPU 0 (AlignDevicesHook io_same_device); one GPU busy at a "
            f"time, no DDP; the figures are GPU {most_loaded}'s, the most loaded")
