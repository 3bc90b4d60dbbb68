"""``trainmem report``: one self-contained HTML file (plotly.js inside, nothing from the network) with
the setup, the estimate, every chart, assumptions and formulas; Chinese with ``--lang zh``; written
atomically; it opens in chromium with the network cut and draws every chart."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.web.conftest import cli, shot

pytest.importorskip("plotly")

ARGS = ["llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--seq-len", "4096", "--micro-batch", "2",
        "--grad-accum", "2"]
CHARTS = {"timeline", "breakdown", "compare", "plan-memory", "plan-time"}


class _Doc(HTMLParser):
    """Every src/href, the visible text and the figures of a report."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.text: list[str] = []
        self.figures: dict = {}
        self.ids: set[str] = set()
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        self.links += [v for k, v in attrs if k in ("src", "href", "srcset", "action", "data") and v]
        if "id" in a:
            self.ids.add(a["id"])
        self._in.append("figs" if a.get("id") == "trainmem-figures" else tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        where = self._in[-1] if self._in else ""
        if where == "figs":
            self.figures = json.loads(data)
        elif where not in ("script", "style") and data.strip():
            self.text.append(data)


@pytest.fixture(scope="module")
def report_en(tmp_path_factory) -> Path:
    from trainmem.cli import main
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", *ARGS, "-o", str(out)]) == 0
    return out


def _parse(path: Path) -> _Doc:
    doc = _Doc()
    doc.feed(path.read_text(encoding="utf-8"))
    return doc


def test_report_is_one_self_contained_file(report_en: Path) -> None:
    text = report_en.read_text(encoding="utf-8")
    doc = _parse(report_en)
    remote = [u for u in doc.links if re.match(r"^\s*(https?:)?//", u, re.I)]
    assert not remote, remote
    assert all(u.startswith("#") for u in doc.links), doc.links  # only the page's own anchors
    assert "<script src" not in text and "<link" not in text and "@import" not in text
    assert re.search(r"plotly\.js v\d", text)  # the bundle itself
    assert set(doc.figures) == CHARTS and {f"fig-{k}" for k in CHARTS} <= doc.ids
    body = "\n".join(doc.text)
    for must in ("does NOT fit on H100-SXM-80G", "Setup", "Memory at the peak", "Assumptions", "formula",
                 "activations (+ logits/loss)", "What each technique saves and costs", "Fastest plans on the same GPUs",
                 "How each line is computed", "ZeRO"):
        assert must in body, must
    tl = doc.figures["timeline"]
    assert tl["layout"]["yaxis"]["title"]["text"] == "allocated memory (GiB)"


def test_report_in_chinese(tmp_path, capsys) -> None:
    from tests.report.test_zh import assert_chinese

    out = tmp_path / "zh.html"
    rc, stdout, err = cli(capsys, "report", *ARGS, "-o", str(out), "--lang", "zh")
    assert rc == 0, err
    assert stdout.startswith("已写入 ") and stdout.count("\n") == 1
    doc = _parse(out)
    assert_chinese("\n".join(doc.text))
    titles = [f["layout"]["title"]["text"] for f in doc.figures.values()]
    assert_chinese("\n".join(titles))


def test_bad_input_writes_nothing(tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "r.html"
    rc, _, err = cli(capsys, "report", "no-such-model", "-o", str(out))
    assert rc == 2 and err.startswith("error: unknown model") and err.count("\n") == 1
    rc, _, err = cli(capsys, "report", *ARGS)
    assert rc == 2 and err == "error: -o FILE.html is required (the report to write)\n"
    rc, _, err = cli(capsys, "report", *ARGS, "-o", str(tmp_path / "missing" / "r.html"))
    assert rc == 2 and "does not exist" in err and err.count("\n") == 1
    import trainmem.report.html as h

    def full_disk(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(h.os, "replace", full_disk)
    rc, _, err = cli(capsys, "report", *ARGS, "-o", str(out), "--no-plan")
    assert rc == 2 and "No space left on device" in err
    assert list(tmp_path.iterdir()) == []  # neither the report nor its temporary file


def test_existing_report_survives_a_failed_rewrite(tmp_path, capsys) -> None:
    out = tmp_path / "r.html"
    out.write_text("old")
    rc, _, _ = cli(capsys, "report", "llama-3.1-8b", "--micro-batch", "0", "-o", str(out))
    assert rc == 2 and out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_report_opens_offline_and_draws_every_chart(report_en: Path, page, tmp_path) -> None:
    requests: list[str] = []

    def block(route) -> None:  # noqa: ANN001
        requests.append(route.request.url)
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            route.abort()

    page.route("**/*", block)
    page.goto(report_en.as_uri())
    page.wait_for_selector(f'body[data-charts-ready="{len(CHARTS)}"]')
    for k in CHARTS:
        assert page.locator(f"#fig-{k} .main-svg").count() >= 1, k
        assert page.locator(f"#fig-{k} .legend").count() == 1, k
    assert page.locator("#fig-timeline .annotation-text").first.text_content().startswith("peak 78.38 GiB")
    assert [u for u in requests if not u.startswith("file://")] == []
    page.locator("#fig-timeline").scroll_into_view_if_needed()
    shot(page, tmp_path, "report-timeline")


def test_report_with_a_traced_step(tmp_path, capsys) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.tiny_configs import TINY

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY["llama-gqa"]))
    out = tmp_path / "traced.html"
    rc, _, err = cli(capsys, "report", str(cfg), "--seq-len", "64", "--trace", "--no-plan", "-o", str(out))
    assert rc == 0, err
    doc = _parse(out)
    assert "trace" in doc.figures and "plan-memory" not in doc.figures
    names = [d["name"] for d in doc.figures["trace"]["data"]]
    assert names[-1] == "trace: allocated" and len(doc.figures["trace"]["data"][-1]["x"]) > 10


def test_plan_and_doctor_reports() -> None:
    from trainmem.plan.search import plan
    from trainmem.plan_cli import _request
    from trainmem.report.html import doctor_report_html, plan_report_html

    req = _request("llama-3.2-1b", "8xH100-SXM-80G", 64, 2048, "bf16", 5.0, 3, None, {})
    text = plan_report_html(req, plan(req), "en")
    assert "plan-memory" in text and "8×H100-SXM-80G" in text and "<script src" not in text
    findings = {"findings": [{"cause": "leak", "evidence": "allocated grows 1 MiB per step", "expected_bytes": 2**30,
                              "observed_bytes": 2 * 2**30,
                              "fixes": [{"action": "call loss.item()", "saves_bytes": 2**30, "slowdown_pct": 0.0}]}]}
    steps = [{"step": s, "allocated_bytes": 2**30 + s * 2**20, "reserved_bytes": 2**31} for s in range(20)]
    text = doctor_report_html(findings, "en", steps=steps)
    assert 'data-cause="leak"' in text and "fig-monitor" in text and "+1.000 MiB per step" in text
    from trainmem.report.html import _cause_name
    from trainmem.report.i18n import tr
    assert _cause_name("leak") in doctor_report_html(findings, "en")
    assert tr(_cause_name("leak"), "zh") in doctor_report_html(findings, "zh") and "显存" in tr(_cause_name("leak"), "zh")
