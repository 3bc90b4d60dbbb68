"""``trainmem trace``: trace one training step (fake tensors, or a real CUDA step) and compare with the estimate.

Registered on the CLI at start-up; torch and transformers are imported only when a trace runs.
"""

from __future__ import annotations

import json

import typer

from trainmem import cli_options as opt

__all__ = ["register", "NOT_TRACED"]

#: What ``trainmem.trace.support.check_traceable`` refuses (exit 2), shown under ``trace --help``; keep the two
#: in step.
NOT_TRACED = ("Not traced yet (exit code 2; use `trainmem estimate`): --engine deepspeed or megatron; "
              "--pp, --ep > 1 (so --vpp); --tp > 1 except fsdp2 on dense llama-style models; --cp > 1 except fsdp2 "
              "on causal llama-style models with sdpa in 16 bits, without tp/pp; "
              "--dp > 1 with --engine torch; --offload; --qlora; --lora-rank except with --engine torch; "
              "--optimizer adamw-8bit; --attn flash; --recompute selective; --engine fsdp2 with --precision "
              "amp-fp16; --loss chunked/fused-linear on encoders and softcapped models.")


def register(app: typer.Typer) -> None:
    @app.command("trace", epilog=NOT_TRACED)
    @opt.with_setup_options
    def trace_cmd(
        model: opt.Model, as_json: opt.Json = False,
        compare: bool = typer.Option(False, "--compare", help="estimate and trace side by side, per category"),
        device: str = typer.Option("fake", "--device", help="fake (CPU, fake tensors) | cuda (a real step)"),
        lang: opt.Lang = "en", **setup_args: object,
    ) -> None:
        """Trace one steady training step of the real transformers model (no GPU needed)."""
        from trainmem.api import build
        from trainmem.errors import ConfigError

        from trainmem.report.i18n import check_lang

        check_lang(lang)
        if device not in ("fake", "cuda"):
            raise ConfigError(f"device: {device!r} is not one of fake, cuda")
        spec, setup = build(model, **opt.setup_fields(setup_args))
        if device == "cuda" and setup.compile:
            from trainmem.errors import UnsupportedError
            raise UnsupportedError("cannot trace --compile with --device cuda (the compiled layer is traced on fake "
                                   "tensors: drop --device); use `trainmem estimate`")
        if device == "cuda":
            from trainmem.trace.cuda import cuda_step

            res = cuda_step(spec, setup)
            if as_json:
                print(json.dumps(res.to_dict()))
            else:
                from rich.console import Console
                Console().print(res.to_dict())
            return
        from trainmem.api import check_trace_size
        from trainmem.trace.support import check_traceable

        check_trace_size(spec, setup)
        if setup.compile:  # the compiled layer itself, partitioned by torch on fake tensors (trace/compiled.py)
            from trainmem.trace.compiled import print_compiled_trace
            print_compiled_trace(spec, setup, as_json, lang)
            return
        check_traceable(spec, setup)  # one line, before any progress bar
        result = _trace_with_progress(spec, setup, quiet=as_json)
        if compare:
            from trainmem.trace.compare import compare as do_compare

            cmp = do_compare(spec, setup, trace=result)
            if as_json:
                print(json.dumps({"trace": result.to_dict(), "comparison": cmp.to_dict()}))
            else:
                from trainmem.report.trace_table import print_comparison
                print_comparison(spec, setup, cmp, lang)
            return
        if as_json:
            print(json.dumps(result.to_dict()))
        else:
            from trainmem.report.trace_table import print_trace
            print_trace(spec, setup, result, lang)


def _trace_with_progress(spec, setup, quiet: bool):  # noqa: ANN001, ANN202
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from trainmem.trace import trace_step

    if quiet:
        return trace_step(spec, setup)
    with Progress(TextColumn("[bold]tracing[/bold] {task.description}"), BarColumn(), TimeElapsedColumn(),
                  transient=True) as prog:
        task = prog.add_task("build", total=None)

        def cb(done: int, total: int, label: str) -> None:
            prog.update(task, completed=done, total=total, description=label)

        return trace_step(spec, setup, progress=cb)
