"""torchtitan TOML (``--job.config_file FILE``) → setup fields, torchtitan 0.2.2 (torchtitan/config/job_config.py: the
defaults below are its dataclasses'; torchtitan/train.py for the batch arithmetic).

``[training]`` ``local_batch_size`` (older ``batch_size``; default 8), ``global_batch_size`` (default: local × dp,
else accumulation = global ÷ (local × dp)), ``seq_len`` (2048), ``dtype`` bfloat16 (pure bf16) or
``mixed_precision_param`` (bfloat16: amp-bf16 under FSDP2's MixedPrecisionPolicy; float32: fp32),
``enable_cpu_offload``; ``[parallelism]`` degrees (``data_parallel_shard_degree`` -1 = what the world size leaves,
``data_parallel_replicate_degree`` > 1 = HSDP, not modelled), ``fsdp_reshard_after_forward``
(always/never/default), ``pipeline_parallel_microbatch_size`` (local ÷ it = the pipeline's micro-batches),
``disable_loss_parallel``, ``enable_async_tensor_parallel``; ``[activation_checkpoint]`` mode none/full/selective
(default selective with ``selective_ac_option`` "2": every 2nd layer, which trainmem cannot express; "op" =
op-level SAC = selective, "1" = full); ``[optimizer]`` name, ``implementation`` (fused); ``[model]`` name and
flavor → the catalog (llama3 8B/70B/405B = Llama 3.1), converters float8 → fp8.
"""

from __future__ import annotations

from trainmem.frameworks.readers._base import Reading

__all__ = ["read_torchtitan", "is_torchtitan", "FLAVORS"]

_WHO = "torchtitan 0.2.2"
#: [model] (name, flavor) → catalog name.
FLAVORS = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b", ("llama3", "405B"): "llama-3.1-405b",
           ("deepseek_v3", "671B"): "deepseek-v3", **{("qwen3", f): f"qwen3-{f.lower()}" for f in
                                                       ("0.6B", "1.7B", "4B", "8B", "14B", "32B")}}


def is_torchtitan(cfg: dict) -> bool:
    return any(isinstance(cfg.get(k), dict) for k in ("training", "parallelism", "activation_checkpoint", "job"))


def read_torchtitan(r: Reading) -> None:
    r.set("engine", "fsdp2", "torchtitan (FSDP2 fully_shard)")
    _model(r)
    t, par = "training.", "parallelism."
    degrees = {}
    for key, fld in (("tensor_parallel_degree", "tp"), ("pipeline_parallel_degree", "pp"),
                     ("context_parallel_degree", "cp"), ("expert_parallel_degree", "ep")):
        n = r.int_(par + key)
        degrees[fld] = n or 1
        if n and n > 1:
            r.set(fld, n, par + key)
    replicate = r.int_(par + "data_parallel_replicate_degree")
    if replicate and replicate > 1:
        r.cannot("dp", f"{par}data_parallel_replicate_degree {replicate} (HSDP: FSDP inside replica groups) is not "
                       "modelled")
    shard = r.get(par + "data_parallel_shard_degree", -1)
    if shard != -1:
        if not isinstance(shard, int) or isinstance(shard, bool) or shard < 1:
            raise r.refuse(f"{par}data_parallel_shard_degree must be -1 or a positive integer (got {shard!r})")
        r.set("dp", shard, par + "data_parallel_shard_degree")
        r.set("gpus", shard * degrees["tp"] * degrees["pp"] * degrees["cp"], "dp × tp × pp × cp")
    elif degrees["tp"] * degrees["pp"] * degrees["cp"] > 1:
        r.default("gpus", degrees["tp"] * degrees["pp"] * degrees["cp"],
                  f"{par}data_parallel_shard_degree -1 takes what the world size leaves, which the file does not "
                  "say: dp 1 (give --gpus)")
    local = r.int_(t + "local_batch_size") or r.int_(t + "batch_size")
    src = t + ("local_batch_size" if r.has(t + "local_batch_size") else "batch_size")
    if local is None:
        local, src = 8, f"{_WHO}: local_batch_size=8"
    _batch(r, local, src, degrees["pp"], shard if shard != -1 else None)
    n = r.int_(t + "seq_len")
    (r.set if n else r.default)("seq_len", n or 2048, t + "seq_len" if n else f"{_WHO}: seq_len=2048")
    _precision(r)
    if r.bool_(t + "enable_cpu_offload"):
        r.set("offload", "optimizer+params", t + "enable_cpu_offload")
    reshard = str(r.get(par + "fsdp_reshard_after_forward", "default"))
    if reshard in ("always", "never"):
        r.set("zero", 3 if reshard == "always" else 2, par + "fsdp_reshard_after_forward")
    elif reshard != "default":
        raise r.refuse(f"{par}fsdp_reshard_after_forward {reshard}: one of default, always, never")
    if r.bool_(par + "disable_loss_parallel"):
        r.set("no_loss_parallel", True, par + "disable_loss_parallel")
    if r.bool_(par + "enable_async_tensor_parallel"):
        r.set("async_tp", True, par + "enable_async_tensor_parallel")
    _checkpoint(r)
    _optimizer(r)
    if r.bool_("compile.enable"):
        r.set("compile", True, "compile.enable")
    r.use(par + "pipeline_parallel_microbatch_size", par + "data_parallel_shard_degree",
          t + "global_batch_size")


def _model(r: Reading) -> None:
    name, flavor = r.get("model.name"), r.get("model.flavor")
    if name is None and flavor is None:
        return
    ref = FLAVORS.get((str(name), str(flavor)))
    if ref is None:
        r.out.model_error = f"[model] name {name} flavor {flavor} matches no catalog model"
        return
    r.model(ref, "model.name + model.flavor")


def _batch(r: Reading, local: int, src: str, pp: int, dp: int | None) -> None:
    """torchtitan/train.py: with pp, local_batch_size ÷ pipeline_parallel_microbatch_size micro-batches; gradient
    accumulation = global_batch_size ÷ (local_batch_size × dp) (needs dp when global is set)."""
    par = "parallelism."
    if pp > 1:
        pmb = r.int_(par + "pipeline_parallel_microbatch_size") or 1
        if local % pmb:
            raise r.refuse(f"local_batch_size {local} is not a multiple of {par}pipeline_parallel_microbatch_size {pmb}")
        r.set("micro_batch", pmb, par + "pipeline_parallel_microbatch_size")
        r.set("grad_accum", local // pmb, f"{src} / pipeline_parallel_microbatch_size")
        return
    r.set("micro_batch", local, src)
    gb = r.get("training.global_batch_size", -1)
    if gb in (-1, None):
        return
    if dp is None:
        r.cannot("grad_accum", "training.global_batch_size with data_parallel_shard_degree -1: the accumulation "
                               "depends on the world size")
        return
    if not isinstance(gb, int) or gb % (local * dp):
        raise r.refuse(f"training.global_batch_size {gb} is not a multiple of local_batch_size {local} × dp {dp}")
    r.set("grad_accum", gb // (local * dp), "training.global_batch_size / (local_batch_size × dp)")


def _precision(r: Reading) -> None:
    t = "training."
    converters = r.get("model.converters") or []
    converters = [converters] if isinstance(converters, str) else list(converters)
    if any("float8" in str(c) for c in converters):
        r.set("precision", "fp8", "model.converters float8")
        _float8_all_gather(r)
        return
    if any(str(c) for c in converters):
        raise r.refuse(f"model.converters {', '.join(map(str, converters))}: trainmem models float8 only")
    dtype = str(r.get(t + "dtype", "float32"))
    param = str(r.get(t + "mixed_precision_param", "bfloat16"))
    if dtype == "bfloat16":
        r.set("precision", "bf16", t + "dtype")
    elif param == "float32":
        r.set("precision", "fp32", t + "mixed_precision_param")
    else:
        (r.set if r.has(t + "mixed_precision_param") else r.default)(
            "precision", "amp-bf16",
            t + "mixed_precision_param" if r.has(t + "mixed_precision_param") else f"{_WHO}: mixed_precision_param=bfloat16")


def _float8_all_gather(r: Reading) -> None:
    """``[float8]`` (2024–2025; 0.2.2: ``[quantize.linear.float8]``) ``enable_fsdp_float8_all_gather`` →
    --fp8-allgather: FSDP2 gathers the Float8Linear weights in fp8 (torchtitan 0.2.2
    components/quantization/float8.py: only with data-parallel sharding, which every fsdp2 setup has);
    ``precompute_float8_dynamic_scale_for_fsdp`` (one all-reduce of the weights' scales per step: 0-d tensors) and
    ``force_recompute_fp8_weight_in_bwd`` (no fp8 weight is saved under compile either) change no memory."""
    for sec in ("float8.", "quantize.linear.float8."):
        if r.bool_(sec + "enable_fsdp_float8_all_gather"):
            r.set("fp8_allgather", True, sec + "enable_fsdp_float8_all_gather")
        r.use(sec + "precompute_float8_dynamic_scale_for_fsdp", sec + "force_recompute_fp8_weight_in_bwd")


def _checkpoint(r: Reading) -> None:
    a = "activation_checkpoint."
    mode = str(r.get(a + "mode", "selective"))
    option = str(r.get(a + "selective_ac_option", "2"))
    given = r.has(a + "mode")
    src = a + "mode" if given else f"{_WHO}: mode=selective"
    r.use(a + "selective_ac_option", a + "early_stop", a + "memory_budget")
    if mode in ("none", "full"):
        (r.set if given else r.default)("recompute", mode, src)
    elif mode == "selective" and option == "op":
        (r.set if given else r.default)("recompute", "selective", src + ", selective_ac_option op")
    elif mode == "selective" and option == "1":
        (r.set if given else r.default)("recompute", "full", src + ", selective_ac_option 1 (every layer)")
    elif mode == "selective" and option.isdigit():
        r.cannot("recompute", f"activation_checkpoint selective_ac_option {option} (every {option}-th layer "
                              "checkpointed) is not modelled")
    else:
        raise r.refuse(f"activation_checkpoint mode {mode} (option {option}) is not modelled")


def _optimizer(r: Reading) -> None:
    o = "optimizer."
    name = str(r.get(o + "name", "AdamW"))
    table = {"AdamW": "adamw", "Adam": "adam"}
    if name not in table:
        raise r.refuse(f"optimizer.name {name}: trainmem models AdamW and Adam")
    (r.set if r.has(o + "name") else r.default)("optimizer", table[name],
                                               o + "name" if r.has(o + "name") else f"{_WHO}: optimizer AdamW")
    impl = str(r.get(o + "implementation", "fused"))
    if impl not in ("fused", "foreach"):
        raise r.refuse(f"optimizer.implementation {impl} (the for-loop step) is not modelled; fused or foreach")
    (r.set if r.has(o + "implementation") else r.default)(
        "optimizer_impl", impl, o + "implementation" if r.has(o + "implementation") else f"{_WHO}: implementation=fused")
    if r.bool_(o + "early_step_in_backward"):
        r.cannot("optimizer_in_backward", "optimizer.early_step_in_backward under FSDP is not modelled")
