"""``trainmem estimate`` and ``trainmem explain``: thin shells over :func:`trainmem.memory.estimate`.

In a module of their own (as ``plan_cli``, ``doctor_cli``), so that the web API parses its requests with these
very commands without importing the whole command line (``trainmem.cli``, which registers ``serve``, which
imports the web app: a circle).
"""

from __future__ import annotations

import json

import typer

from trainmem import cli_options as opt
from trainmem.report.i18n import check_lang

__all__ = ["estimate", "explain_cmd", "register"]


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

    check_lang(lang)
    spec, ts = build(model, **opt.setup_fields(setup))
    if max_micro_batch:
        from trainmem.memory.search import max_micro_batch as search
        best, est = search(spec, ts)
        if as_json:
            from trainmem.python_api import max_micro_batch_json
            print(json.dumps(max_micro_batch_json(ts, best, est)))
        else:
            from trainmem.report.table import print_max_micro_batch
            print_max_micro_batch(best, est, ts, lang)
        return
    est = run_estimate(spec, ts)
    if as_json:  # the library's builder, which trainmem.estimate() returns too
        from trainmem.python_api import estimate_json
        print(json.dumps(estimate_json(spec, ts, est, explain=explain)))
        return
    from trainmem.report.table import print_estimate, print_fix
    print_estimate(spec, ts, est, lang)
    if explain:
        from trainmem.report.explain import print_explain
        print_explain(spec, ts, est, lang)
    if not est.fits:  # the output ends with the command that makes the run fit
        from trainmem.plan.compare import cheapest_fix
        given = opt.setup_fields(setup)
        print_fix(cheapest_fix(spec, ts, given, est), model, given, lang)


@opt.with_setup_options
def explain_cmd(model: opt.Model, lang: opt.Lang = "en", **setup: object) -> None:
    """Show every line's formula and source, and how the seed/ZeRO-paper/DeepSpeed accountings differ."""
    from trainmem.api import build
    from trainmem.memory import estimate as run_estimate
    from trainmem.report.explain import print_explain

    check_lang(lang)
    spec, ts = build(model, **opt.setup_fields(setup))
    print_explain(spec, ts, run_estimate(spec, ts), lang)
    if ts.stack:  # each value --stack chose, with its source (the estimate's assumptions list them too)
        from trainmem.report.i18n import t, tr
        print(f"{t('assumptions', lang)}{'：' if lang == 'zh' else ':'}")
        for note in ts.notes:
            print(f"  - {tr(note, lang)}")


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate)
    app.command("explain")(explain_cmd)
