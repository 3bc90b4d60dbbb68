"""torchtune YAML (``tune run RECIPE --config FILE``) → setup fields, torchtune v0.6.1 (recipes/
lora_finetune_single_device.py, lora_finetune_distributed.py, full_finetune_*.py; torchtune/models/*/_model_builders.py;
torchtune/modules/peft/lora.py; torchtune/modules/loss/ce_chunked_output_loss.py).

``_component_`` names: the model builder (``torchtune.models.llama3_1.lora_llama3_1_8b``) names the catalog
model (``llama3_1_8b`` → llama-3.1-8b); ``lora_``/``qlora_`` builders are LoRA, ``qlora_`` (or
``quantize_base: True``) with torchao's NF4 base. LoRA module names map to PEFT's: ``q_proj k_proj v_proj`` as
they are, ``output_proj`` → o_proj, ``apply_lora_to_mlp`` → gate_proj, up_proj, down_proj (w1, w3, w2),
``apply_lora_to_output`` → lm_head. ``dtype: bf16`` trains the whole model in bf16 (no autocast, no fp32
copy); ``loss: CEWithChunkedOutputLoss`` is the chunked loss (8 chunks). The recipe is single-device unless the
file is a distributed recipe's config (its ``fsdp_*`` keys, or the header naming ``*_distributed``), which
shards with FSDP2 (``fsdp_reshard_after_forward`` True: ZeRO-3; ``fsdp_cpu_offload``).
"""

from __future__ import annotations

import re

from trainmem.frameworks.readers._base import Reading

__all__ = ["read_torchtune", "is_torchtune", "torchtune_model_name"]

_WHO = "torchtune 0.6.1"
_LORA_NAMES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
_OPTIMIZERS = {"torch.optim.AdamW": "adamw", "torch.optim.Adam": "adam", "torch.optim.SGD": "sgd",
               "bitsandbytes.optim.PagedAdamW8bit": "paged-adamw-8bit", "bitsandbytes.optim.PagedAdamW": "paged-adamw",
               "bitsandbytes.optim.AdamW8bit": "adamw-8bit", "torch.optim.Adafactor": "adafactor"}
_LOSSES = {"torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked", "torch.nn.CrossEntropyLoss": "hf"}
_FAMILIES = (  # builder stem → catalog name
    (re.compile(r"llama(\d)(?:_(\d))?_(\d+b)"), lambda m: f"llama-{m[1]}{'.' + m[2] if m[2] else ''}-{m[3]}"),
    (re.compile(r"qwen2_5_(\d+(?:_\d+)?b)"), lambda m: f"qwen2.5-{m[1].replace('_', '.')}"),
    (re.compile(r"qwen3_(\d+(?:_\d+)?b)"), lambda m: f"qwen3-{m[1].replace('_', '.')}"),
    (re.compile(r"gemma2_(\d+b)"), lambda m: f"gemma-2-{m[1]}"),
    (re.compile(r"mistral_7b"), lambda m: "mistral-7b"),
    (re.compile(r"phi3_mini"), lambda m: "phi-3-mini-4k"),
    (re.compile(r"phi4(?:_14b)?"), lambda m: "phi-4"),
)


def is_torchtune(cfg: dict) -> bool:
    model = cfg.get("model")
    return isinstance(model, dict) and str(model.get("_component_", "")).startswith("torchtune.")


def torchtune_model_name(component: str) -> tuple[str | None, str]:
    """(catalog name or None, builder kind ``full`` | ``lora`` | ``qlora``) of a model builder's path."""
    stem = component.rsplit(".", 1)[-1]
    kind = "qlora" if stem.startswith("qlora_") else ("lora" if stem.startswith("lora_") else "full")
    stem = re.sub(r"^(q?lora_)", "", stem)
    stem = re.sub(r"_(base|instruct)$", "", stem)
    for pattern, name in _FAMILIES:
        m = pattern.fullmatch(stem)
        if m:
            return name(m), kind
    return None, kind


def read_torchtune(r: Reading, text: str) -> None:
    component = str(r.get("model._component_"))
    name, kind = torchtune_model_name(component)
    if name is None:
        r.out.model_error = f"model._component_ {component} matches no catalog model"
    else:
        r.model(name, "model._component_")
    if kind != "full":
        _lora(r, kind)
    n = r.int_("tokenizer.max_seq_len")
    if n:
        r.set("seq_len", n, "tokenizer.max_seq_len")
    r.use("dataset.packed")
    if r.bool_("dataset.packed"):
        r.out.statements.append("dataset.packed on: every sequence is the full tokenizer.max_seq_len")
    mb = r.int_("batch_size")
    if mb:
        r.set("micro_batch", mb, "batch_size")
    ga = r.int_("gradient_accumulation_steps")
    if ga:
        r.set("grad_accum", ga, "gradient_accumulation_steps")
    dtype = str(r.get("dtype", "bf16"))
    if dtype not in ("bf16", "fp32"):
        raise r.refuse(f"dtype {dtype}: torchtune trains in bf16 or fp32")
    (r.set if r.has("dtype") else r.default)("precision", "bf16" if dtype == "bf16" else "fp32",
                                             "dtype" if r.has("dtype") else f"{_WHO}: dtype=bf16")
    ac = r.bool_("enable_activation_checkpointing")
    if ac is not None:
        r.set("recompute", "full" if ac else "none", "enable_activation_checkpointing")
    if r.bool_("enable_activation_offloading"):
        r.set("offload_activations", True, "enable_activation_offloading")
    _optimizer(r)
    _loss(r)
    if r.bool_("optimizer_in_bwd"):
        r.set("optimizer_in_backward", True, "optimizer_in_bwd")
    if r.bool_("compile"):
        r.set("compile", True, "compile")
    _distributed(r, text)
    _eager_loss_under_compile(r, kind)
    r.use("dtype", "model._component_")


def _eager_loss_under_compile(r: Reading, kind: str) -> None:
    """``compile: True`` with ``torch.nn.CrossEntropyLoss``: torchtune 0.6.1's ``training.compile_loss``
    (training/_compile.py) compiles the chunked loss in place (``loss.compute_cross_entropy = torch.compile(...)``)
    and any other loss by returning ``torch.compile(loss)``; only lora_finetune_single_device.py keeps that return
    (``self._loss_fn = training.compile_loss(...)``), full_finetune_single_device.py, full_finetune_distributed.py
    and lora_finetune_distributed.py call ``training.compile_loss(self._loss_fn)`` and drop it (also at 1814feb17,
    the README's optimization-flags table): their plain loss stays eager."""
    f = r.out.fields
    if f.get("compile") and f.get("loss") == "hf" and not (kind != "full" and f.get("engine") == "torch"):
        r.set("no_compile_loss", True, "compile + loss._component_ torch.nn.CrossEntropyLoss (the recipe drops "
                                       "training.compile_loss's return: the loss stays eager)")


def _lora(r: Reading, kind: str) -> None:
    rank = r.int_("model.lora_rank")
    if not rank:
        raise r.refuse("model.lora_rank is missing (the LoRA builders require it)")
    r.set("lora_rank", rank, "model.lora_rank")
    r.lora_dropout("model.lora_dropout")
    mods = r.get("model.lora_attn_modules") or []
    if not isinstance(mods, list) or not all(isinstance(m, str) for m in mods):
        raise r.refuse(f"model.lora_attn_modules must be a list of names (got {mods!r})")
    bad = [m for m in mods if m not in _LORA_NAMES]
    if bad:
        raise r.refuse(f"model.lora_attn_modules {', '.join(bad)}: torchtune's names are q_proj, k_proj, v_proj, "
                       "output_proj")
    targets = list(dict.fromkeys(_LORA_NAMES[m] for m in mods))
    if r.bool_("model.apply_lora_to_mlp"):
        targets += ["gate_proj", "up_proj", "down_proj"]
    if r.bool_("model.apply_lora_to_output"):
        targets.append("lm_head")
    if not targets:
        raise r.refuse("LoRA on no module: lora_attn_modules is empty and apply_lora_to_mlp is off")
    r.set("lora_targets", ",".join(targets), "model.lora_attn_modules/apply_lora_to_mlp/apply_lora_to_output")
    if kind == "qlora" or r.bool_("model.quantize_base"):
        r.set("qlora", True, "qlora_ builder" if kind == "qlora" else "model.quantize_base")
        r.set("qlora_impl", "torchao", "torchtune's NF4Tensor (torchao)")


def _optimizer(r: Reading) -> None:
    comp = r.get("optimizer._component_")
    r.use("optimizer")
    if comp is None:
        return
    name = _OPTIMIZERS.get(str(comp))
    if name is None:
        raise r.refuse(f"optimizer._component_ {comp} is not modelled ({', '.join(_OPTIMIZERS)})")
    r.set("optimizer", name, "optimizer._component_")
    if name in ("adamw", "adam", "sgd"):
        if r.get("optimizer.momentum") not in (None, 0) and name == "sgd":
            r.set("optimizer", "sgd-momentum", "optimizer.momentum")
        fused, foreach = r.get("optimizer.fused"), r.get("optimizer.foreach")
        impl = "fused" if fused is True else "foreach"
        r.set("optimizer_impl", impl, "optimizer.fused" if fused is True else "torch.optim default (foreach on CUDA)")
        if foreach is False and fused is not True:
            raise r.refuse("optimizer.foreach False (the for-loop step) is not modelled")


def _loss(r: Reading) -> None:
    comp = r.get("loss._component_")
    r.use("loss")
    if comp is None:
        return
    loss = _LOSSES.get(str(comp))
    if loss is None:
        raise r.refuse(f"loss._component_ {comp} is not modelled ({', '.join(_LOSSES)})")
    r.set("loss", loss, "loss._component_")
    chunks = r.int_("loss.num_output_chunks")
    if loss == "chunked" and chunks:
        r.set("loss_chunks", chunks, "loss.num_output_chunks")


def _distributed(r: Reading, text: str) -> None:
    keys = ("fsdp_cpu_offload", "fsdp_reshard_after_forward", "data_parallel_shard_dim", "tensor_parallel_dim", "fsdp")
    header = "\n".join(line for line in text.splitlines()[:20] if line.lstrip().startswith("#"))
    run = re.search(r"tune run(?:\s+--nproc_per_node\s+\d+)?\s+(\w+)", header)  # the recipe the header runs
    named = run[1] if run else (re.search(r"in (\w+)\.py", header) or [None, ""])[1]
    distributed = any(r.get(k) is not None for k in keys) or named.endswith(("_distributed", "_fsdp2"))
    if not distributed:
        r.default("engine", "torch", f"{_WHO}: a single-device recipe (no fsdp_* key, the header names none "
                                     "*_distributed)")
        return
    r.set("engine", "fsdp2", "a *_distributed recipe (FSDP2 fully_shard)")
    n = re.search(r"--nproc_per_node\s+(\d+)", header)
    if n and int(n[1]) > 1:
        r.default("gpus", int(n[1]), f"the header's tune run --nproc_per_node {n[1]}")
    reshard = r.bool_("fsdp_reshard_after_forward", True)
    r.set("zero", 3 if reshard else 2, "fsdp_reshard_after_forward" + ("" if r.has("fsdp_reshard_after_forward")
                                                                        else f" ({_WHO} default True)"))
    if r.bool_("fsdp_cpu_offload"):
        r.set("offload", "optimizer+params", "fsdp_cpu_offload")
    tp = r.int_("tensor_parallel_dim")
    if tp and tp > 1:
        r.set("tp", tp, "tensor_parallel_dim")
