"""``trainmem validate LOG...``: a thin shell over :mod:`trainmem.integrations.validate`.

Prints, per run in the preflight logs, the predicted and measured peak allocated / reserved memory (GiB) and the
signed error; ``--json`` the same as one object; ``--points FILE`` also writes the measured runs in the
published-measurements format (``benchmarks/published_points.json``).
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

__all__ = ["register", "validate_cmd"]


def validate_cmd(
    logs: Annotated[list[str], typer.Argument(help="preflight JSON-lines files (PreflightCallback / "
                                                   "trainmem.preflight log=)")],
    points: Annotated[Optional[str], typer.Option("--points", help="also write the measured runs as "
                                                                   "published-measurement points to FILE")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Summarise preflight logs: each run's prediction against its measurement (signed error)."""
    from trainmem.integrations.validate import group_lines, read_lines, summary_json, to_points, write_points

    groups = group_lines(read_lines(logs))
    out = summary_json(groups)
    if points is not None:
        write_points(points, to_points(groups))
    if as_json:
        print(json.dumps(out))
        return
    _print_table(out, points)


def _pct(e: float | None) -> str:
    return "—" if e is None else f"{100 * e:+.1f} %"


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**30:.2f}"


def _print_table(out: dict, points: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    tab = Table(title="trainmem validate: predicted vs measured (GiB = 1024³ B; error = (predicted − measured) / "
                      "measured)")
    for col in ("run", "model", "GPU", "alloc pred", "alloc meas", "alloc err", "resv pred", "resv meas", "resv err"):
        tab.add_column(col, justify="left" if col in ("run", "model", "GPU") else "right")
    for r in out["runs"]:
        p, m, e = r["predicted"], r["measured"], r["error"]
        tab.add_row(r["id"], r["model"], str(r["gpu"]), _gib(p.get("peak_allocated_bytes")), _gib(m["allocated"]),
                    _pct(e["allocated"]), _gib(p.get("peak_reserved_bytes")), _gib(m["reserved"]), _pct(e["reserved"]))
    console = Console()
    console.print(tab)
    for metric, s in out["summary"].items():
        if s["runs"]:
            console.print(f"{metric}: {s['runs']} measured runs, median error {_pct(s['median_error'])}, median "
                          f"|error| {_pct(s['median_abs_error']).lstrip('+')}, {s['under_10pct']} under −10 %")
        else:
            console.print(f"{metric}: no measured runs (the measured line is written on CUDA after the first steady "
                          "step)")
    if points is not None:
        console.print(f"points written to {points}")


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_cmd)
