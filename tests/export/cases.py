"""Building an export from a model name, an exporter and setup fields (as the planner does)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from trainmem.api import build
from trainmem.export import ExportTarget, export_files, write_export


def export(model: str, exporter: str, nodes: int, gpus_per_node: int, ref: str | None = None, **fields):  # noqa: ANN201
    """(spec, setup, files) of ``model`` exported to ``engine`` on nodes × gpus_per_node GPUs."""
    spec, setup = build(model, gpus=nodes * gpus_per_node, **fields)
    files = export_files(spec, setup, ExportTarget(ref or model, nodes, gpus_per_node), exporter)
    return spec, setup, files


def written(files: dict[str, str], tmp_path: Path) -> Path:
    out = tmp_path / "export"
    write_export(files, out)
    return out


def bash_syntax_ok(text: str) -> None:
    """``bash -n``: the script parses."""
    done = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True, check=False)
    assert done.returncode == 0, done.stderr
