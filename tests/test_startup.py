"""Start-up of the command line (issue 18 item 7): only the invoked command is built, pydantic's disabled plugin
loader is not imported, and the estimate path imports nothing it does not use — with the same answers, errors and
exit codes as the whole typer group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import trainmem.cli as cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _python(code: str, **env: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT, env={**ENV, **env})


def test_only_the_invoked_command_is_built() -> None:
    every = set(typer.main.get_command(cli.app).commands)  # type: ignore[attr-defined]
    assert {"estimate", "explain", "trace", "plan", "models"} <= every
    assert set(cli._group(["estimate", "llama-3.2-1b", "--json"]).commands) == {"estimate"}
    assert set(cli._group(["models"]).commands) == {"models"}
    for argv in ([], ["--help"], ["--version"], ["estimat"], ["-h", "estimate"]):  # help, suggestions: the whole group
        assert set(cli._group(argv).commands) == every, argv


ARGV = [
    ["estimate", "llama-3.2-1b", "--json"],
    ["estimate", "llama-3.2-1b", "--micro-batch", "2", "--engine", "fsdp2", "--gpus", "8", "--json"],
    ["estimate", "--help"],
    ["estimate"],
    ["estimate", "llama-3.2-1b", "--micro-batch", "abc"],
    ["estimate", "llama-3.2-1b", "--nope"],
    ["estimate", "llama-3.2-1b", "--seq-len", "0", "--lang", "zh"],
    ["explain", "llama-3.2-1b"],
    ["models", "--json"],
    ["estimat", "llama-3.2-1b"],
]


@pytest.mark.parametrize("argv", ARGV, ids=[" ".join(a) for a in ARGV])
def test_the_command_alone_answers_as_the_whole_group(argv: list[str], capsys, monkeypatch) -> None:
    rc = cli.main(list(argv))
    alone = (rc, *capsys.readouterr())
    monkeypatch.setattr(cli, "_group", lambda _argv: typer.main.get_command(cli.app))
    rc = cli.main(list(argv))
    assert alone == (rc, *capsys.readouterr())


def test_pydantic_plugin_loader_is_not_imported_when_plugins_are_off() -> None:
    """pydantic imports plugin/_loader.py (and with it importlib.metadata) for its first model; with plugins off the
    CLI's hook gives a ``get_plugins`` returning ``()``, and pydantic's own module for any other name."""
    _python("import sys, trainmem.cli\n"
            "from pydantic import BaseModel\n"
            "class A(BaseModel):\n    x: int = 1\n"
            "assert A(x=2).x == 2\n"
            "assert 'importlib.metadata' not in sys.modules, 'plugin loader imported'\n"
            "from pydantic.plugin._loader import get_plugins\n"
            "assert tuple(get_plugins()) == ()\n"
            "from pydantic.plugin._loader import PYDANTIC_ENTRY_POINT_GROUP\n"
            "assert PYDANTIC_ENTRY_POINT_GROUP == 'pydantic'\n")


def test_a_users_plugin_setting_loads_pydantics_loader() -> None:
    _python("import sys, trainmem.cli\n"
            "from pydantic import BaseModel\n"
            "class A(BaseModel):\n    x: int = 1\n"
            "A()\n"
            "assert hasattr(sys.modules['pydantic.plugin._loader'], 'entry_points')\n",
            PYDANTIC_DISABLE_PLUGINS="some-plugin")


def test_the_estimate_path_imports_only_what_it_uses() -> None:
    """`trainmem estimate MODEL --json`: no tracer, planner, doctor, report table, rich, torch; no model derivation
    (importlib.metadata, hashlib: a catalog model is described, not derived); no typer adapter (nothing given); no
    cluster types, link catalog or trace result (lazy package names); catalogs read without importlib.resources."""
    _python("import sys, io, contextlib\n"
            "before = set(sys.modules)\n"
            "import trainmem.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert c.main(['estimate', 'llama-3.2-1b', '--json']) == 0\n"
            "new = set(sys.modules) - before\n"
            "heavy = ('torch', 'transformers', 'rich', 'plotly', 'fastapi', 'importlib.metadata', 'typer._adapters',\n"
            "         'trainmem.model.derive', 'trainmem.trace.step', 'trainmem.plan', 'trainmem.doctor',\n"
            "         'trainmem.report.table', 'trainmem.frameworks', 'trainmem.hardware.cluster',\n"
            "         'trainmem.hardware.cluster_types', 'trainmem.hardware.links', 'trainmem.trace.result',\n"
            "         'importlib.resources')\n"
            "bad = sorted(m for m in new if m in heavy or m.startswith(tuple(h + '.' for h in heavy)))\n"
            "assert not bad, bad\n")
