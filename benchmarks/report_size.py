"""Size of the ``trainmem report`` HTML file and its load time in chromium with the network cut (issue
10: the report opens with no network and shows every chart).

    python benchmarks/report_size.py [--repeat 5] [--screenshots DIR]

Load time: from navigation to every chart drawn (``body[data-charts-ready]``), median of ``--repeat``
fresh pages, in Debian's chromium (``/usr/bin/chromium``) through Playwright. ``--screenshots DIR``
also saves each chart of the Llama-3.1-8B report (English and Chinese) as a PNG at 1280×800.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

MODEL = "llama-3.1-8b"
SETUP = {"engine": "fsdp2", "gpus": 8, "seq_len": 4096, "micro_batch": 2, "grad_accum": 2}
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]


def _load_seconds(browser, path: Path) -> tuple[float, int, list[str]]:  # noqa: ANN001
    """(seconds to every chart drawn, charts drawn, requests that left the file)."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    outside: list[str] = []

    def block(route) -> None:  # noqa: ANN001
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", block)
    t0 = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-charts-ready]", timeout=60_000)
    dt = time.perf_counter() - t0
    drawn = page.locator(".chart:has(.main-svg)").count()
    page.close()
    return dt, drawn, outside


def _screenshots(browser, report: Path, out: Path, suffix: str) -> list[Path]:  # noqa: ANN001
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-charts-ready]")
    saved = []
    for div in page.locator(".chart").all():
        name = (div.get_attribute("id") or "chart").removeprefix("fig-")
        path = out / f"report-{name}{suffix}.png"
        div.screenshot(path=str(path))
        saved.append(path)
    page.close()
    return saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--screenshots", type=Path, default=None, help="folder for PNGs of every chart")
    args = ap.parse_args()
    from trainmem.report.plotlyjs import plotly_js, plotly_js_version
    from trainmem.report_cli import build_report

    t0 = time.perf_counter()
    text = build_report(MODEL, "en", **SETUP)
    build_s = time.perf_counter() - t0
    size, js = len(text.encode()), len(plotly_js().encode())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        path.write_text(text, encoding="utf-8")
        zh = Path(tmp) / "report-zh.html"
        zh.write_text(build_report(MODEL, "zh", **SETUP), encoding="utf-8")
        print(f"report of {MODEL} {SETUP}")
        print(f"  size            {size:,} B ({size / 1e6:.2f} MB); plotly.js {plotly_js_version()} is {js:,} B "
              f"({100 * js / size:.0f} %), the rest {size - js:,} B")
        print(f"  built in        {build_s:.2f} s (estimate, compare, plan search, HTML)")
        if not Path(CHROMIUM).exists():
            print(f"  load time       not measured: {CHROMIUM} is missing")
            return
        from playwright.sync_api import sync_playwright
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            runs = [_load_seconds(browser, path) for _ in range(args.repeat)]
            times = [r[0] for r in runs]
            print(f"  load in chromium median {statistics.median(times):.2f} s, max {max(times):.2f} s "
                  f"({args.repeat} loads, network cut); charts drawn {runs[0][1]}; requests off the file "
                  f"{sum(len(r[2]) for r in runs)}")
            if args.screenshots:
                args.screenshots.mkdir(parents=True, exist_ok=True)
                saved = _screenshots(browser, path, args.screenshots, "") + \
                    _screenshots(browser, zh, args.screenshots, "-zh")
                print("  screenshots     " + ", ".join(str(s) for s in saved))
            browser.close()


if __name__ == "__main__":
    main()
