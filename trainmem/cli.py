"""``trainmem`` command line: a thin shell over the library.

It catches only :class:`trainmem.errors.TrainmemError` (and click's usage errors), prints one line on
stderr and exits with code 2; nothing is written to stdout on error.
"""

from __future__ import annotations

import json
import os
import sys

# The CLI process does not need pydantic's plugin discovery (an entry-point scan on every start).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import typer

from trainmem import cli_options as opt
from trainmem.errors import TrainmemError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Per-GPU memory of one training step: estimate, trace, explain.")

@app.command()
@opt.with_setup_options
def estimate(
    model: opt.Model, as_json: opt.Json = False,
    explain: bool = typer.Option(False, "--explain", help="show the formula and source behind every line"),
    max_micro_batch: bool = typer.Option(False, "--max-micro-batch", help="largest micro-batch that fits on --gpu"),
    lang: opt.Lang = "en", **setup: object,
) -> None:
    """Estimate the peak GPU memory of one training step on the most loaded rank."""
    from trainmem.api import build
    from trainmem.memory import estimate as run_estimate

    _check_lang(lang)
    spec, ts = build(model, **opt.setup_fields(setup))
    if max_micro_batch:
        from trainmem.memory.search import max_micro_batch as search
        best, est = search(spec, ts)
        if as_json:
            print(json.dumps({"max_micro_batch": best, "gpu": ts.gpu,
                              "estimate": est.to_dict() if est else None}))
        else:
            from trainmem.report.table import print_max_micro_batch
            print_max_micro_batch(best, est, ts, lang)
        return
    est = run_estimate(spec, ts)
    if as_json:
        print(json.dumps(est.to_dict()))
        return
    from trainmem.report.table import print_estimate
    print_estimate(spec, ts, est, lang)
    if explain:
        from trainmem.report.explain import print_explain
        print_explain(spec, ts, est, lang)


@app.command("explain")
@opt.with_setup_options
def explain_cmd(model: opt.Model, lang: opt.Lang = "en", **setup: object) -> None:
    """Show every line's formula and source, and how the seed/ZeRO-paper/DeepSpeed accountings differ."""
    from trainmem.api import build
    from trainmem.memory import estimate as run_estimate
    from trainmem.report.explain import print_explain

    _check_lang(lang)
    spec, ts = build(model, **opt.setup_fields(setup))
    print_explain(spec, ts, run_estimate(spec, ts), lang)


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
        tab.add_row(g.name, f"{g.memory_bytes / GiB:.1f}", "n/a" if g.bf16_tflops is None else f"{g.bf16_tflops:g}", g.source)
    Console().print(tab)


def _check_lang(lang: str) -> None:
    from trainmem.errors import ConfigError
    from trainmem.report.i18n import LANGS
    if lang not in LANGS:
        raise ConfigError(f"lang: {lang!r} is not one of {', '.join(LANGS)}")


# `trainmem trace` lives beside the tracer's CLI glue; torch is imported only when a trace runs.
from trainmem.trace_cli import register as _register_trace  # noqa: E402

_register_trace(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and exit code 2 for any bad input."""
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
