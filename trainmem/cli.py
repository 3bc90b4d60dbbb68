"""``trainmem`` command line: a thin shell over the library.

It catches only :class:`trainmem.errors.TrainmemError` (and click's usage errors), prints one line on
stderr and exits with code 2; nothing is written to stdout on error.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

# The CLI process does not need pydantic's plugin discovery (an entry-point scan on every start).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer

from trainmem.errors import TrainmemError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Per-GPU memory of one training step: estimate, trace, explain.")

@app.command()
def estimate(
    model: str = typer.Argument(..., help="catalog name (trainmem models), path to config.json, or a size like 7B"),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="tokens per sequence [2048]"),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch", help="sequences per micro-batch per rank [1]"),
    grad_accum: Optional[int] = typer.Option(None, "--grad-accum", help="micro-batches per optimizer step [1]"),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32|bf16|fp16|amp-bf16|amp-fp16|mixed-bf16|mixed-fp16"),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="adamw|adam|sgd|sgd-momentum|adamw-8bit|adafactor|lion"),
    recompute: Optional[str] = typer.Option(None, "--recompute", help="none|selective|full"),
    attn: Optional[str] = typer.Option(None, "--attn", help="sdpa|flash|eager"),
    engine: Optional[str] = typer.Option(None, "--engine", help="torch|fsdp2|deepspeed|megatron"),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="world size [1]"),
    dp: Optional[int] = typer.Option(None, "--dp"), tp: Optional[int] = typer.Option(None, "--tp"),
    pp: Optional[int] = typer.Option(None, "--pp"), cp: Optional[int] = typer.Option(None, "--cp"),
    ep: Optional[int] = typer.Option(None, "--ep"), vpp: Optional[int] = typer.Option(None, "--vpp"),
    sp: bool = typer.Option(False, "--sp", help="Megatron sequence parallelism"),
    zero: Optional[int] = typer.Option(None, "--zero", help="0-3 (deepspeed), 2|3 (fsdp2), 1 = distributed optimizer (megatron)"),
    offload: Optional[str] = typer.Option(None, "--offload", help="none|optimizer|optimizer+params"),
    lora_rank: Optional[int] = typer.Option(None, "--lora-rank"),
    lora_targets: Optional[str] = typer.Option(None, "--lora-targets", help="comma list, or all-linear"),
    qlora: bool = typer.Option(False, "--qlora"),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU name [H100-SXM-80G] (trainmem gpus)"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    explain: bool = typer.Option(False, "--explain", help="show the formula and source behind every line"),
    max_micro_batch: bool = typer.Option(False, "--max-micro-batch", help="largest micro-batch that fits on --gpu"),
    lang: str = typer.Option("en", "--lang", help="en|zh"),
) -> None:
    """Estimate the peak GPU memory of one training step on the most loaded rank."""
    from trainmem.api import build
    from trainmem.memory import estimate as run_estimate

    spec, setup = build(model, seq_len=seq_len, micro_batch=micro_batch, grad_accum=grad_accum,
                        precision=precision, optimizer=optimizer, recompute=recompute, attn=attn,
                        engine=engine, gpus=gpus, dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, sp=sp or None,
                        zero=zero, offload=offload, lora_rank=lora_rank, lora_targets=lora_targets,
                        qlora=qlora or None, gpu=gpu)
    _check_lang(lang)
    if max_micro_batch:
        from trainmem.memory.search import max_micro_batch as search
        best, est = search(spec, setup)
        if as_json:
            print(json.dumps({"max_micro_batch": best, "gpu": setup.gpu,
                              "estimate": est.to_dict() if est else None}))
        else:
            from trainmem.report.table import print_max_micro_batch
            print_max_micro_batch(best, est, setup, lang)
        return
    est = run_estimate(spec, setup)
    if as_json:
        print(json.dumps(est.to_dict()))
        return
    from trainmem.report.table import print_estimate
    print_estimate(spec, setup, est, lang)
    if explain:
        from trainmem.report.explain import print_explain
        print_explain(spec, setup, est, lang)


@app.command("explain")
def explain_cmd(
    model: str = typer.Argument(...),
    seq_len: Optional[int] = typer.Option(None, "--seq-len"),
    micro_batch: Optional[int] = typer.Option(None, "--micro-batch"),
    precision: Optional[str] = typer.Option(None, "--precision"),
    engine: Optional[str] = typer.Option(None, "--engine"),
    gpus: Optional[int] = typer.Option(None, "--gpus"),
    zero: Optional[int] = typer.Option(None, "--zero"),
    attn: Optional[str] = typer.Option(None, "--attn"),
    recompute: Optional[str] = typer.Option(None, "--recompute"),
    gpu: Optional[str] = typer.Option(None, "--gpu"),
    lang: str = typer.Option("en", "--lang"),
) -> None:
    """Show every line's formula and source, and how the seed/ZeRO-paper/DeepSpeed accountings differ."""
    from trainmem.api import build
    from trainmem.memory import estimate as run_estimate
    from trainmem.report.explain import print_explain

    _check_lang(lang)
    spec, setup = build(model, seq_len=seq_len, micro_batch=micro_batch, precision=precision, engine=engine,
                        gpus=gpus, zero=zero, attn=attn, recompute=recompute, gpu=gpu)
    print_explain(spec, setup, run_estimate(spec, setup), lang)


@app.command("models")
def models_cmd(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the bundled model catalog."""
    from trainmem.model.catalog import list_models, load_catalog_spec

    rows = [(m.name, load_catalog_spec(m.name)) for m in list_models()]
    if as_json:
        print(json.dumps([{"name": n, "model_type": s.model_type, "n_params": s.n_params, "source": s.source}
                          for n, s in rows]))
        return
    from rich.console import Console
    from rich.table import Table
    tab = Table(title="trainmem model catalog")
    for col in ("name", "type", "parameters", "source"):
        tab.add_column(col)
    for n, s in rows:
        tab.add_row(n, s.model_type, f"{s.n_params:,}", s.source)
    Console().print(tab)


@app.command("gpus")
def gpus_cmd() -> None:
    """List the GPU catalog."""
    from rich.console import Console
    from rich.table import Table
    from trainmem.hardware import list_gpus
    from trainmem.units import GiB

    tab = Table(title="trainmem GPU catalog")
    for col in ("name", "memory (GiB)", "bf16 TFLOP/s", "source"):
        tab.add_column(col)
    for g in list_gpus():
        tab.add_row(g.name, f"{g.memory_bytes / GiB:.1f}", f"{g.bf16_tflops:g}", g.source)
    Console().print(tab)


def _check_lang(lang: str) -> None:
    from trainmem.errors import ConfigError
    from trainmem.report.i18n import LANGS
    if lang not in LANGS:
        raise ConfigError(f"lang: {lang!r} is not one of {', '.join(LANGS)}")


def _register_trace() -> None:
    from trainmem.trace_cli import register
    register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and exit code 2 for any bad input."""
    try:
        _register_trace()
    except ImportError:  # pragma: no cover - trace_cli ships with the package
        pass
    try:
        app(args=argv, standalone_mode=False)
    except TrainmemError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # click's own (typer vendors click; match by shape, not by import path)
        names = {c.__name__ for c in type(e).__mro__}
        if "Exit" in names:
            return int(getattr(e, "exit_code", 0))
        if "Abort" in names:
            print("error: aborted", file=sys.stderr)
            return 2
        if "ClickException" in names:
            print(f"error: {e.format_message()}", file=sys.stderr)  # type: ignore[attr-defined]
            return 2
        raise
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
