"""``trainmem report`` (one self-contained HTML file) and ``trainmem serve`` (the local web calculator).

Registered on the CLI by :func:`register`; plotly (report) and fastapi/uvicorn (serve) are imported
only when the command runs.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from trainmem import cli_options as opt

__all__ = ["register", "report_cmd", "serve_cmd", "build_report"]

_Opt = typer.Option


def _precision_family(precision: str) -> str:
    """The planner's precision family of a setup's recipe (``mixed-bf16`` → ``bf16``)."""
    if precision == "fp8":
        return "fp8"
    return precision.split("-")[-1] if precision != "fp32" else "fp32"


def _plan_for(model: str, spec, ts) -> tuple[dict | None, str]:  # noqa: ANN001
    """The planner's top plans for the same GPUs, global batch and sequence length, or why there are none."""
    from trainmem.errors import TrainmemError
    from trainmem.plan.search import plan
    from trainmem.plan_cli import _request

    if ts.gpu_memory:
        return None, "plans: not searched with --gpu-memory (the planner takes catalog GPUs)"
    extra = {"optimizer": ts.optimizer, "attn": ts.attn, "lora_rank": ts.lora_rank, "qlora": ts.qlora or None,
             "lora_targets": ",".join(ts.lora_targets) if ts.is_lora else None}
    try:
        req = _request(model, f"{ts.gpus}x{ts.gpu}", ts.global_batch, ts.seq_len, _precision_family(ts.precision),
                       5.0, 5, None, extra)
        return plan(req).to_dict(), ""
    except TrainmemError as exc:
        return None, f"plans: {exc}"


def build_report(model: str, lang: str = "en", trace: bool = False, with_plan: bool = True, **setup: object) -> str:
    """The ``trainmem report`` document for a model and the estimate flags."""
    from trainmem.api import build
    from trainmem.errors import TrainmemError
    from trainmem.memory import estimate
    from trainmem.plan.compare import compare
    from trainmem.report.html import estimate_report_html
    from trainmem.python_api import explain_json

    spec, ts = build(model, **opt.setup_fields(setup))
    est = estimate(spec, ts)
    try:
        cmp = compare(spec, ts)
    except TrainmemError as exc:  # pragma: no cover - compare refuses what estimate accepted
        cmp = {"baseline": {}, "options": [], "not_applicable": [{"technique": "compare", "reason": str(exc)}]}
    plan, plan_note = _plan_for(model, spec, ts) if with_plan else (None, "")
    traced = _trace(spec, ts) if trace else None
    return estimate_report_html(est.to_dict(), lang, explain=explain_json(spec, ts, est), compare=cmp, plan=plan,
                                plan_note=plan_note, trace=traced)


def _trace(spec, ts) -> dict:  # noqa: ANN001
    from trainmem.api import check_trace_size
    from trainmem.errors import ConfigError
    try:
        from trainmem.trace import trace_step
        from trainmem.trace.support import check_traceable
    except ImportError:
        raise ConfigError("--trace needs torch and transformers: pip install 'trainmem[trace]'") from None
    check_trace_size(spec, ts)
    check_traceable(spec, ts)
    return trace_step(spec, ts).to_dict()


def report_cmd(
    model: opt.Model,
    output: Annotated[Optional[str], _Opt("-o", "--output", help="the HTML file to write")] = None,
    trace: Annotated[bool, _Opt("--trace", help="also trace the step (torch; minutes on big models) and chart it")] = False,
    no_plan: Annotated[bool, _Opt("--no-plan", help="leave out the planner's plans for the same GPUs")] = False,
    lang: opt.Lang = "en", **setup: object,
) -> None:
    """Write one self-contained HTML report: setup, estimate, every chart, what-ifs, plans, formulas."""
    from trainmem.report.i18n import check_lang
    from trainmem.errors import ConfigError
    from trainmem.report.html import write_report
    from trainmem.report.i18n import tr

    check_lang(lang)
    if not output:
        raise ConfigError("-o FILE.html is required (the report to write)")
    text = build_report(model, lang, trace=trace, with_plan=not no_plan, **setup)
    path = write_report(output, text)
    print(tr(f"wrote {path} ({len(text.encode()) / 1e6:.1f} MB)", lang))


def serve_cmd(
    host: Annotated[str, _Opt("--host", help="address to listen on (127.0.0.1: this machine only)")] = "127.0.0.1",
    port: Annotated[int, _Opt("--port", help="port to listen on")] = 8000,
    lang: opt.Lang = "en",
    allow_paths: Annotated[bool, _Opt("--allow-paths", help="let requests name local files (a model's config.json, "
                                                            "a cluster file); off, the API reads none")] = False,
) -> None:
    """Run the local web calculator (estimate, compare, plan, doctor) and its JSON API."""
    from trainmem.report.i18n import check_lang
    from trainmem.errors import ConfigError
    from trainmem.report.i18n import tr

    check_lang(lang)
    if not 0 < port < 65536:
        raise ConfigError(f"--port {port}: not a TCP port (1-65535)")
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise ConfigError("trainmem serve needs fastapi and uvicorn: pip install 'trainmem[web]'") from None
    from trainmem.web import serve

    _check_port_free(host, port)
    shown = f"[{host}]" if ":" in host else host
    print(tr(f"trainmem serve: open http://{shown}:{port}/ (Ctrl-C stops it)", lang), flush=True)
    serve(host, port, lang, allow_paths)


def _check_port_free(host: str, port: int) -> None:
    """One line, before uvicorn starts, when the address cannot be bound (in use, or not this machine's)."""
    import socket

    from trainmem.errors import ConfigError
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise ConfigError(f"--host {host!r}: not an address of this machine") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(addr)
        except OSError as exc:
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({exc.strerror})") from None


def register(app: typer.Typer) -> None:
    app.command("report")(opt.with_setup_options(report_cmd))
    app.command("serve")(serve_cmd)
