"""Fixtures of the web and report tests: the CLI with ``report``/``serve`` registered, the API's test
client, a live uvicorn server on a free port, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]


def _register_commands() -> None:
    """``report`` and ``serve`` on the CLI (cli.py registers them; register here if it does not yet)."""
    import typer

    from trainmem.cli import app
    if "report" not in typer.main.get_command(app).commands:  # type: ignore[attr-defined]
        from trainmem.report_cli import register
        register(app)


_register_commands()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr)."""
    from trainmem.cli import main
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def cli_json(capsys, *args: str) -> dict:
    rc, out, err = cli(capsys, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="session")
def client():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from trainmem.web import create_app
    with TestClient(create_app()) as c:
        yield c


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def live_server():
    """The app under uvicorn in a thread (Host checked as ``trainmem serve`` does); its base URL."""
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from trainmem.web import create_app
    from trainmem.web.app import LOOPBACK_HOSTS

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(LOOPBACK_HOSTS), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="session")
def browser():
    """Debian's chromium through Playwright (no browser download); skipped where either is missing."""
    pytest.importorskip("playwright")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, tmp_path):
    """A 1280×800 page; the test's screenshots go to ``tmp_path`` (kept by pytest)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    yield pg
    context.close()


def shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    return path


