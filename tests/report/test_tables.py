"""The text of the tables (issue 18, item 7's small ones): the memory override named, numbers right-aligned and
text not, a comparison row below the table's resolution left out."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.report.html import _table, _verdict, is_number_cell
from trainmem.report.table import result_line
from trainmem.report.trace_table import RESOLUTION_BYTES, shown_rows
from trainmem.units import GiB


def test_gpu_memory_override_is_named() -> None:
    """`--gpu-memory 24GB` ran as "does NOT fit on H100-SXM-80G (22.4 GiB)": an 80 GB name beside 22.4 GiB."""
    spec, s = build("llama-3.1-8b", gpu_memory="24GB")
    est = estimate(spec, s)
    assert est.gpu_memory_bytes == 24 * 10**9
    line = result_line(est)
    assert "does NOT fit on H100-SXM-80G with --gpu-memory (22.4 GiB)" in line
    assert "H100-SXM-80G（--gpu-memory 22.4 GiB）放不下" in result_line(est, "zh")
    html = _verdict(est.to_dict(), "en")
    assert "H100-SXM-80G with --gpu-memory (22.4 GiB): " in html
    assert "H100-SXM-80G（--gpu-memory 22.4 GiB）放不下" in _verdict(est.to_dict(), "zh")
    plain = estimate(*build("llama-3.2-1b"))
    assert "fits on H100-SXM-80G (79.2 GiB)" in result_line(plain) and "--gpu-memory" not in _verdict(plain.to_dict(), "en")


@pytest.mark.parametrize("cell, number", [
    ("74.64", True), ("+26.77", True), ("-0.4 %", True), ("−3.2 %", True), ("1.032 s", True), ("1,234", True),
    ("53.2 / 79.2", True), ("2×4", True), ("5e+08", True), ("100 %", True),
    ("8-bit AdamW (bitsandbytes)", False), ("2 × 8,030,261,248 params", False), ("4xH100", False), ("", False),
    ("fsdp2", False), ("3D parallel", False),
])
def test_number_cells(cell: str, number: bool) -> None:
    assert is_number_cell(cell) is number


def test_technique_column_is_left_aligned() -> None:
    html = _table(["technique", "saves GiB"], [["8-bit AdamW (bitsandbytes)", "+5.61"]])
    assert "<td>8-bit AdamW (bitsandbytes)</td>" in html and '<td class="num">+5.61</td>' in html


def test_comparison_rows_below_the_resolution_are_left_out() -> None:
    """trace --compare printed "other 0.000 / 0.000 / -100.0 %" for a few hundred bytes against none."""
    rows = [("parameters", 5 * GiB, 5 * GiB, 0.0), ("other", 0, 512, -1.0), ("temporaries", RESOLUTION_BYTES, 0, 1.0),
            ("gradients", 0, 0, 0.0)]
    assert [r[0] for r in shown_rows(rows)] == ["parameters", "temporaries"]
    assert f"{(RESOLUTION_BYTES - 1) / GiB:.3f}" == "0.000" and f"{RESOLUTION_BYTES / GiB:.3f}" == "0.001"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_report_files_are_written_as_open_would(tmp_path, umask: int, mode: int) -> None:
    """Reports were 0600 (mkstemp's mode): now what open() gives under the umask — 0644 under the usual 022."""
    import os
    import stat

    from trainmem.report.html import write_report
    old = os.umask(umask)
    try:
        out = write_report(tmp_path / "r.html", "<html></html>")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == mode and out.read_text() == "<html></html>"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_missing_plotly_names_the_extra(monkeypatch) -> None:
    import importlib.util

    from trainmem.errors import ConfigError
    from trainmem.report import plotlyjs
    from trainmem.report.i18n import tr
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        plotlyjs.plotly_js_path()
    assert str(e.value).endswith("pip install 'trainmem[web]'") and "plotly" in str(e.value)
    assert "pip install 'trainmem[web]'" in tr(str(e.value), "zh") and tr(str(e.value), "zh") != str(e.value)
