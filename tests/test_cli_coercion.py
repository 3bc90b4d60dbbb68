"""typer's coercion deferred to the given values (trainmem/cli_coercion.py): the same values and the same
refusals as typer's own, and no pydantic adapter built for what the command line does not give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]

ARGV = [
    ["estimate", "llama-3.2-1b", "--micro-batch", "4", "--seq-len", "1024", "--engine", "fsdp2", "--gpus", "8"],
    ["estimate", "llama-3.2-1b", "--gpu-memory", "24GB", "--sp", "--lang", "zh"],
    ["plan", "llama-3.2-1b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64", "--margin", "7.5"],
    ["estimate", "llama-3.2-1b", "--micro-batch", "abc"],
    ["estimate", "llama-3.2-1b", "--micro-batch", "2.5"],
    ["plan", "llama-3.2-1b", "--margin", "x"],
    ["estimate", "llama-3.2-1b", "--gpus", ""],
]


def _parse(argv: list[str], deferred: bool) -> tuple[str, object]:
    from trainmem.cli import app
    from trainmem.cli_coercion import defer_coercion

    group = typer.main.get_command(app)
    if deferred:
        defer_coercion(group)
    try:
        ctx = group.make_context("trainmem", list(argv))
        sub = group.commands[argv[0]].make_context(argv[0], list(argv[1:]), parent=ctx)
    except Exception as e:  # click's usage errors: compare their one line
        return "error", f"{type(e).__name__}: {e.format_message()}"  # type: ignore[attr-defined]
    return "ok", sub.params


@pytest.mark.parametrize("argv", ARGV, ids=[" ".join(a[1:]) for a in ARGV])
def test_deferred_coercion_gives_typers_values_and_errors(argv: list[str]) -> None:
    assert _parse(argv, deferred=True) == _parse(argv, deferred=False)


def test_no_adapter_for_what_is_not_given() -> None:
    """`trainmem estimate llama-3.1-8b` gives one text value: typer's pydantic adapters are never built."""
    code = ("import sys, io, contextlib, trainmem.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = c.main(['estimate', 'llama-3.2-1b', '--json'])\n"
            "assert rc == 0 and 'typer._adapters' not in sys.modules, rc\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = c.main(['estimate', 'llama-3.2-1b', '--micro-batch', '2', '--json'])\n"
            "assert rc == 0 and 'typer._adapters' in sys.modules\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT, env=env)
