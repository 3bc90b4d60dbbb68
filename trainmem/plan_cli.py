"""``trainmem plan`` and ``trainmem compare``: thin shells over :mod:`trainmem.plan`."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from trainmem import cli_options as opt

__all__ = ["register"]

_Opt = typer.Option
#: The vision-language setup fields plan takes as flags and from a --from file (as estimate's: cli_options.py).
_VISION_KEYS = ("image_tokens", "train_vision", "freeze_vision", "train_projector")


def _request(model: str, cluster: str, global_batch: int, seq_len: int, precision: str, margin: float, top: int,
             fix: str | None, extra: dict, engines: tuple[str, ...] | None = None):  # noqa: ANN202
    from trainmem.python_api import plan_request  # the library's, which trainmem.plan() uses too
    return plan_request(model, cluster, global_batch, seq_len, precision, margin, top, fix, extra, engines)


def plan_cmd(
    model: Annotated[Optional[str], typer.Argument(help="catalog name, config.json path or size [the --from file's "
                                                        "model]", show_default=False)] = None,
    cluster: Annotated[Optional[str], _Opt("--cluster", help="64xH100-SXM-80G, 8xA100-SXM-80G,4xRTX-3090-24G, or a .toml/.yaml file")] = None,
    global_batch: Annotated[int, _Opt("--global-batch", help="sequences per optimizer step")] = 0,
    seq_len: Annotated[Optional[int], _Opt("--seq-len", help="tokens per sequence [4096]", show_default=False)] = None,
    precision: Annotated[str, _Opt("--precision", help="bf16|fp16|fp32|fp8 (each engine's own recipe), or a recipe: "
                                                       "amp-bf16|amp-fp16 (torch, fsdp2), mixed-bf16|mixed-fp16 "
                                                       "(deepspeed, megatron) [bf16]", show_default=False)] = None,
    margin: Annotated[float, _Opt("--margin", help="safety margin on reserved memory, percent")] = 5.0,
    top: Annotated[int, _Opt("--top", help="plans to show")] = 5,
    fix: Annotated[Optional[str], _Opt("--fix", help="k=v,... pins knobs, any value the estimator accepts: engine, dp, "
                                                      "tp, pp, vpp, cp, ep, zero, recompute (none|selective|full|block-N), "
                                                      "recompute_layers, offload, micro_batch, grad_accum, and setup "
                                                      "fields: sp, megatron_deepspeed, stage_layers (15/16/16/15), "
                                                      "optimizer, attn, loss and the rest")] = None,
    min_gpus: Annotated[bool, _Opt("--min-gpus", help="fewest GPUs of --gpu on which the model trains")] = False,
    gpu: Annotated[Optional[str], _Opt("--gpu", help="GPU type for --min-gpus / --tokens --days")] = None,
    tokens: Annotated[Optional[float], _Opt("--tokens", help="tokens to train (with --days and --gpu)")] = None,
    days: Annotated[Optional[float], _Opt("--days", help="deadline in days (with --tokens and --gpu)")] = None,
    export: Annotated[Optional[str], _Opt("--export", help="deepspeed|megatron|torchtitan|accelerate")] = None,
    out_dir: Annotated[Optional[str], _Opt("-o", "--output", help="directory for --export")] = None,
    report: Annotated[Optional[str], _Opt("--report", help="also write the plans as a self-contained HTML FILE")] = None,
    optimizer: Annotated[Optional[str], _Opt("--optimizer", help="adamw|adam|sgd|sgd-momentum|adamw-8bit|adafactor|lion [adamw]")] = None,
    attn: Annotated[Optional[str], _Opt("--attn", help="sdpa|flash|eager")] = None,
    lora_rank: Annotated[int, _Opt("--lora-rank", help="LoRA rank; 0 = full fine-tuning")] = 0,
    lora_targets: Annotated[Optional[str], _Opt("--lora-targets", help="PEFT module names or all-linear")] = None,
    qlora: Annotated[bool, _Opt("--qlora", help="NF4 base weights")] = False,
    attn_kernel: Annotated[Optional[str], _Opt("--attn-kernel", help="step time: fa2|fa3|triton [engine default]")] = None,
    grad_reduce_16bit: Annotated[bool, _Opt("--grad-reduce-16bit", help="Megatron plans: 16-bit main-grad buffer")] = False,
    fp8_params: Annotated[bool, _Opt("--fp8-params", help="Megatron fp8 plans: fp8 weights (--fp8-param-gather)")] = False,
    host_memory: Annotated[Optional[str], _Opt("--host-memory", help="host RAM per node, e.g. 512GiB: plans that "
                                                                    "offload more there are refused")] = None,
    async_tp: Annotated[bool, _Opt("--async-tp", help="fsdp2 plans with TP: torchtitan's async TP (step time)")] = False,
    stack: Annotated[Optional[str], _Opt("--stack", help="plans the framework runs (its engines), with its defaults for "
                                                        "optimizer, attn, loss, loop, LoRA targets (docs/stacks.md)")] = None,
    offload_activations: Annotated[bool, _Opt("--offload-activations", help="torch/fsdp2 plans without pp: saved "
                                              "activations in pinned host memory (torchtune/TRL OffloadActivations)")] = False,
    compile_: Annotated[bool, _Opt("--compile", help="torch/fsdp2 plans: each decoder layer torch.compile'd "
                                                    "(trainmem/memory/compile.py)")] = False,
    image_tokens: Annotated[int, _Opt("--image-tokens", help="vision-language models: visual tokens per sample, "
                                                             "counted in --seq-len (as estimate's) [0]")] = 0,
    train_vision: Annotated[bool, _Opt("--train-vision", help="VLMs: train the vision tower and projector [frozen]")] = False,
    freeze_vision: Annotated[bool, _Opt("--freeze-vision", help="VLMs: vision tower and projector frozen (the "
                                                                "default)")] = False,
    train_projector: Annotated[bool, _Opt("--train-projector", help="VLMs: train the projector only, the tower "
                                                                    "frozen")] = False,
    from_file: Annotated[Optional[str], _Opt("--from", help="read the model, sequence length, precision, global batch "
                                                            "and recipe (optimizer, LoRA, ...) from a training config "
                                                            "(flags given win)")] = None,
    as_json: opt.Json = False, lang: opt.Lang = "en",
) -> None:
    """The fastest training configurations that fit a GPU pool (or how many GPUs a model needs)."""
    from trainmem.report.i18n import check_lang
    from trainmem.errors import ConfigError
    from trainmem.python_api import plan_checks, plan_json, plan_sizing

    check_lang(lang)
    file_extra: dict = {}
    file_notes: list[str] = []
    if from_file:  # trainmem.frameworks.readers: the flags given win over the file
        from trainmem.frameworks.readers import plan_inputs
        from trainmem.python_api import PLAN_EXTRA_KEYS
        model, seq_len, precision, global_batch, file_extra, file_notes = plan_inputs(
            from_file, model, seq_len, precision, global_batch, PLAN_EXTRA_KEYS + _VISION_KEYS,
            cli={"lora_targets": lora_targets, "lora_rank": lora_rank or None, "optimizer": optimizer, "attn": attn})
    if model is None:
        raise ConfigError("missing the MODEL argument (a catalog name, a config.json path or a size like 7B), "
                          "or give --from FILE")
    seq_len, precision = seq_len or 4096, precision or "bf16"
    sizing = plan_checks(global_batch, cluster, gpu, min_gpus, tokens, days)
    if export and not out_dir:
        raise ConfigError("--export needs -o DIR")
    extra = {"optimizer": optimizer, "attn": attn, "lora_rank": lora_rank, "qlora": qlora or None,
             "lora_targets": lora_targets, "attn_kernel": attn_kernel, "grad_reduce_16bit": grad_reduce_16bit or None,
             "fp8_params": fp8_params or None, "async_tp": async_tp or None,
             "offload_activations": offload_activations or None, "compile": compile_ or None,
             "image_tokens": image_tokens or None, "train_vision": train_vision or None,
             "freeze_vision": freeze_vision or None, "train_projector": train_projector or None}
    stack = stack or file_extra.pop("stack", None)  # --from: the file's framework unless --stack is given
    extra.update({k: v for k, v in file_extra.items() if not extra.get(k)})
    engines = _export_engines(export) if export else None
    if stack:  # the framework's engines, and its defaults for what the planner does not search
        from trainmem.frameworks import plan_stack
        from trainmem.hardware import parse_cluster
        extra, engines = plan_stack(stack, extra, seq_len, parse_cluster(cluster or f"1x{gpu}").total_gpus, engines)
    req = _request(model, cluster or f"1x{gpu}", global_batch, seq_len, precision, margin, top, fix, extra, engines)
    if host_memory:
        req = _with_host_memory(req, host_memory)
    out: dict = plan_sizing(req, gpu, min_gpus, tokens, days) if sizing else {}
    result = None
    if cluster:
        from trainmem.plan.search import plan
        result = plan(req)
    if export and result is not None:
        out["export"] = _export(req, result, export, out_dir)
    if report:
        from trainmem.report.html import plan_report_html, write_report
        write_report(report, plan_report_html(req, result, lang))
    if file_notes:
        out["from"] = {"file": from_file, "assumptions": file_notes}
    if as_json:
        print(json.dumps(plan_json(result, out)))
        return
    from trainmem.report.plan_table import print_plans
    print_plans(req, result, out, lang)
    if file_notes:
        from trainmem.report.i18n import tr
        print(tr(f"read from {from_file}:", lang))
        for line in file_notes:
            print("  - " + tr(line, lang))


def _with_host_memory(req, text: str):  # noqa: ANN001, ANN202
    from dataclasses import replace

    from trainmem.errors import ConfigError
    from trainmem.units import parse_size_bytes
    try:
        n = parse_size_bytes(text)
    except ValueError as err:
        raise ConfigError(f"--host-memory: {err}") from None
    if n < 1:
        raise ConfigError(f"--host-memory must be > 0, got {text!r}")
    return replace(req, host_memory_bytes=n)


def _export_engines(target: str) -> tuple[str, ...]:
    from trainmem.errors import ConfigError
    engines = {"deepspeed": ("deepspeed",), "megatron": ("megatron",), "torchtitan": ("fsdp2",),
               "accelerate": ("fsdp2", "deepspeed", "torch")}
    if target not in engines:
        raise ConfigError(f"--export {target!r} is not one of deepspeed, megatron, torchtitan, accelerate")
    return engines[target]


def _export(req, result, target: str, out_dir: str) -> dict:  # noqa: ANN001
    from pathlib import Path

    from trainmem.errors import ConfigError
    from trainmem.export import export_files, write_export

    for p in result.plans:
        got = _export_target(req, p, target)
        if got is not None:
            setup, tgt, placement = got
            files = _with_placement(export_files(req.spec, setup, tgt, target), placement)
            paths = write_export(files, Path(out_dir))
            return {"engine": target, "files": [str(x) for x in paths], "plan": p.to_dict()}
    raise ConfigError(f"--export {target}: none of the plans found is one {target} can run")


def _export_target(req, p, target: str):  # noqa: ANN001, ANN202 - (setup, ExportTarget, placement lines) | None
    """What ``target`` needs to run plan ``p`` (one GPU type, or one pipeline over types with its layer
    split), or None if it cannot."""
    import math

    from trainmem.export import ExportTarget, can_export

    groups = {g.gpu.name: g for g in req.cluster.groups}
    if len(p.shares) == 1:
        share = p.shares[0]
        if can_export(share.setup, target, req.spec) is not None:
            return None
        group = groups[share.gpu]
        return share.setup, ExportTarget(model_ref=_model_ref(req.spec), nodes=-(-share.gpus // group.gpus_per_node),
                                         gpus_per_node=min(group.gpus_per_node, share.gpus)), []
    if p.layout is None:
        return None
    setup, split = p.shares[0].setup, p.layout.layers_per_stage
    if can_export(setup, target, req.spec, split) is not None:
        return None
    per = math.gcd(*(min(groups[s.gpu].gpus_per_node, s.gpus) for s in p.shares))
    tgt = ExportTarget(model_ref=_model_ref(req.spec), nodes=setup.gpus // per, gpus_per_node=per, layers_per_stage=split)
    return setup, tgt, _placement_lines(p, per)


def _placement_lines(p, per: int) -> list[str]:  # noqa: ANN001
    """Comment lines saying which GPUs run which pipeline stages, and in which order to start them."""
    lo, w = p.layout, p.shares[0].setup.dp * p.shares[0].setup.tp * p.shares[0].setup.cp
    lines = ["pipeline stages on different GPU types (trainmem plan; pp is the outermost rank dimension of",
             "Megatron-LM and torchtitan, so ranks [j*w, (j+1)*w) run stage j, w = dp*tp*cp = " + f"{w}):"]
    for i, t in enumerate(lo.types):
        r = lo.stages_of(i)
        ranks = range(r.start * w, r.stop * w)
        a, b = ranks.start // per, (ranks.stop - 1) // per
        lines.append(f"  ranks {ranks.start}-{ranks.stop - 1} (stage{'s' if len(r) > 1 else ''} {r.start}"
                     f"{'-' + str(r.stop - 1) if len(r) > 1 else ''}): {t}, {lo.layers[i]} layers per stage, "
                     + (f"launch group (NODE_RANK) {a}" if a == b else f"launch groups (NODE_RANK) {a}-{b}"))
    lines.append(f"each launch group runs {per} processes (--nproc-per-node); start them on the GPUs of that type")
    return lines


def _with_placement(files: dict[str, str], lines: list[str]) -> dict[str, str]:
    """The files with ``lines`` as a comment block after the first line of each script / config."""
    if not lines:
        return files
    block = "".join(f"# {ln}\n" for ln in lines)
    out = {}
    for name, text in files.items():
        if not name.endswith((".sh", ".toml", ".yaml", ".py")):
            out[name] = text
        elif text.startswith("#!"):
            first, _, rest = text.partition("\n")
            out[name] = f"{first}\n{block}{rest}"
        else:
            out[name] = block + text
    return out


def _model_ref(spec) -> str:  # noqa: ANN001
    """The hub id of a catalog model (what the engines' tokenizer and model loaders take), else its name."""
    from trainmem.model.catalog import find_entry
    entry = find_entry(spec.name)
    return entry.hf_id if entry is not None else spec.name


def compare_cmd(model: opt.Model, as_json: opt.Json = False, lang: opt.Lang = "en", **setup: object) -> None:
    """What each technique (accumulation, precision, recompute, ZeRO/FSDP, offload, TP, PP) saves and costs."""
    from trainmem.api import build
    from trainmem.report.i18n import check_lang
    from trainmem.plan.compare import compare

    check_lang(lang)
    spec, ts = build(model, **opt.setup_fields(setup))
    out = compare(spec, ts)
    if as_json:
        print(json.dumps(out))
        return
    from trainmem.report.plan_table import print_compare
    print_compare(spec, ts, out, lang)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
    app.command("compare")(opt.with_setup_options(compare_cmd))
