"""``trainmem doctor``: a thin shell over :mod:`trainmem.doctor`.

``trainmem doctor [--error FILE|-] [--log FILE] [--snapshot FILE] [--nvidia-smi FILE] [--config FILE
| --from FILE] [MODEL and estimate flags] [--lang zh] [--json]`` prints ``{"findings": [{"cause", "evidence",
"expected_bytes", "observed_bytes", "fixes": [{"action", "saves_bytes", "slowdown_pct", "fits"}], "likelihood"}],
"setup", "assumptions"}`` (the last two when there is an estimate), most likely first (``undetermined`` first when
no cause reaches the threshold).
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from trainmem import cli_options as opt

__all__ = ["register", "doctor_cmd"]

_Opt = typer.Option


def doctor_cmd(
    model: Annotated[Optional[str], typer.Argument(help="the run's model (catalog name, config.json, or a size "
                                                        "like 7B); optional: without it the rules that need the "
                                                        "estimate are skipped")] = None,
    error: Annotated[Optional[str], _Opt("--error", help="a PyTorch OOM message or whole traceback (FILE, or - "
                                                         "for stdin)")] = None,
    log: Annotated[Optional[list[str]], _Opt("--log", help="per-step memory log: the monitor's JSONL or CSV "
                                                            "step,allocated_bytes,reserved_bytes[,rank]; repeat "
                                                            "for one file per rank")] = None,
    snapshot: Annotated[Optional[str], _Opt("--snapshot", help="a torch.cuda.memory._dump_snapshot() pickle")] = None,
    nvidia_smi: Annotated[Optional[str], _Opt("--nvidia-smi", help="nvidia-smi output: the table, or --query-gpu "
                                                                   "/ --query-compute-apps CSV")] = None,
    config: Annotated[Optional[str], _Opt("--config", help="the run's training config, read as --from reads it "
                                                           "(every --from format; MODEL from it when not given)")] = None,
    report: Annotated[Optional[str], _Opt("--report", help="also write the findings and the per-step curve as a "
                                                           "self-contained HTML FILE")] = None,
    as_json: opt.Json = False, lang: opt.Lang = "en", **setup: object,
) -> None:
    """Diagnose an OOM, a leak or a slow run from what you have, against the estimate of the run."""
    from trainmem.report.i18n import check_lang
    from trainmem.doctor.report import render_text, to_json
    from trainmem.doctor.run import DoctorInputs, run_doctor

    check_lang(lang)
    from_file = setup.pop("from_file", None)  # --from FILE: --config under the name every other command takes
    if config is not None and from_file is not None:
        from trainmem.errors import ConfigError
        raise ConfigError("doctor: give the training config once, with --config or --from (the same reader)")
    config = config if config is not None else from_file
    res = run_doctor(DoctorInputs(error=error, logs=list(log or []), snapshot=snapshot, nvidia_smi=nvidia_smi,
                                  config=config, model=model, flags=opt.setup_fields(setup)))
    if report:
        _write_report(report, res, lang)
    if as_json:
        print(json.dumps(to_json(res.findings, lang, res.expected), ensure_ascii=False))
        return
    print(render_text(res.findings, res.notes, lang))


def _write_report(path: str, res, lang: str) -> None:  # noqa: ANN001 - a DoctorResult
    from trainmem.doctor.report import to_json
    from trainmem.report.html import doctor_report_html, write_report

    log = res.evidence.log
    steps = [{"step": r.step, "allocated_bytes": r.allocated_bytes, "reserved_bytes": r.reserved_bytes,
              "rank": r.rank} for r in log.records if r.phase == "train"] if log is not None else None
    expected = res.expected.estimate.static_bytes if res.expected is not None else None
    write_report(path, doctor_report_html(to_json(res.findings, lang), lang, steps=steps, expected_bytes=expected))


def register(app: typer.Typer) -> None:
    app.command("doctor")(opt.with_setup_options(doctor_cmd, read_from=False))
