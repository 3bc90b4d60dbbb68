"""``trainmem serve``: the FastAPI app — a JSON API mirroring the CLI and one static page.

Routes: ``POST /api/estimate|compare|plan|doctor`` answer the CLI's ``--json`` object (the same bytes
``json.dumps`` prints); ``POST /api/view/<command>`` adds the page's HTML and plotly figures to it;
``GET /api/meta`` (catalogs, choices), ``GET /api/ui?lang=`` (labels); ``/`` the page, ``/static`` its
files, ``/vendor/plotly.min.js`` the installed plotly.js; the OpenAPI spec at ``/openapi.json``
(``/docs``). Bad input: HTTP 422 ``{"error": "<the CLI's one line>"}`` (in ``lang``'s language);
a body over :data:`MAX_BODY_BYTES`: 413; a body that is not ``application/json``: 415 (so a page of
another site cannot post a plain form to it).
"""

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.staticfiles import StaticFiles

from trainmem.errors import TrainmemError

__all__ = ["create_app", "MAX_BODY_BYTES", "STATIC_DIR", "LOOPBACK_HOSTS"]

MAX_BODY_BYTES = 256 * 1024
"""Largest request body (a pasted config.json is a few KiB; an OOM traceback some tens)."""
STATIC_DIR = Path(__file__).resolve().parent / "static"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_VIEW_COMMANDS = ("estimate", "compare", "plan", "doctor")


class BodyLimit:
    """ASGI middleware: refuse (413, one line) a request whose body is over ``max_bytes``, whether it
    says so in Content-Length or streams it."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES) -> None:  # noqa: ANN001
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(send)
            return
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            more = msg.get("more_body", False)
            if size > self.max_bytes:
                await self._refuse(send)
                return
        body, sent = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send) -> None:  # noqa: ANN001
        text = json.dumps({"error": f"request body is larger than {self.max_bytes // 1024} KiB"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(text)).encode())]})
        await send({"type": "http.response.body", "body": text})


def _error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": message}), status_code=status, media_type="application/json")


def _lang(body: Any) -> str:
    from trainmem.report.i18n import LANGS
    lang = body.get("lang") if isinstance(body, dict) else None
    return lang if lang in LANGS else "en"


async def _read_json(request: Request) -> tuple[Any, Response | None]:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        return None, _error(415, "send the request body as JSON (Content-Type: application/json)")
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return None, _error(422, f"request body is not valid JSON: {str(exc).splitlines()[0][:200]}")
    if not isinstance(body, dict):
        return None, _error(422, "request body must be a JSON object (the command's options by name)")
    return body, None


def _view(command: str, body: dict, result: dict, allow_paths: bool = False) -> dict:
    """The page's HTML (``summary`` above the charts, ``html`` below) and figures for a result, made by
    the same functions as the HTML report."""
    from trainmem.report import html as h

    lang = _lang(body)
    if command == "estimate":
        est = result.get("estimate") if "max_micro_batch" in result else result
        if est is None:
            return {"summary": "", "html": "", "figures": {}}
        fix = ""
        if not est["fits"]:
            from trainmem.web.commands import estimate_fix
            fix = h.fix_paragraph(*estimate_fix(body, allow_paths), lang)
        return {"summary": h.estimate_summary(est, lang, fix),
                "html": h.estimate_section(est, lang, explain=result.get("explain"), with_setup=False, with_summary=False),
                "figures": h.estimate_figures(est, lang)}
    if command == "compare":
        return {"summary": "", "html": h.compare_section(result, lang), "figures": h.compare_figures(result, lang)}
    if command == "plan":
        return {"summary": "", "html": h.plan_section(result, lang), "figures": h.plan_figures(result, lang)}
    from trainmem.web.commands import doctor_steps
    return {"summary": "", "html": h.doctor_section(result, lang), "figures": h.doctor_figures(doctor_steps(body), lang)}


async def _answer(request: Request, command: str, view: bool = False) -> Response:
    from trainmem.report.i18n import tr
    from trainmem.web.commands import run

    body, err = await _read_json(request)
    if err is not None:
        return err
    try:
        result = await run_in_threadpool(run, command, body, request.app.state.allow_paths)
        extra = await run_in_threadpool(_view, command, body, result, request.app.state.allow_paths) if view else None
    except TrainmemError as exc:
        return _error(422, tr(str(exc), _lang(body)))
    payload = {"result": result, **extra} if view else result
    return Response(json.dumps(payload), media_type="application/json")


def _meta() -> dict:
    from typing import get_args

    from trainmem import setup as s
    from trainmem.frameworks import STACK_NAMES
    from trainmem.hardware import list_gpus
    from trainmem.model.catalog import list_models, load_catalog_spec
    from trainmem.web.commands import command_defaults, doctor_available

    models = []
    for m in list_models():
        spec = load_catalog_spec(m.name)
        models.append({"name": m.name, "model_type": spec.model_type, "n_params": spec.n_params})
    choices = {"engine": get_args(s.Engine), "precision": get_args(s.Precision), "optimizer": get_args(s.Optimizer),
               "recompute": get_args(s.Recompute), "attn": get_args(s.Attn), "offload": get_args(s.Offload),
               "loop": get_args(s.Loop), "loss": get_args(s.Loss), "stack": STACK_NAMES}
    gpus = [{"name": g.name, "memory_bytes": g.memory_bytes} for g in list_gpus()]
    return {"models": models, "gpus": gpus, "choices": choices, "recipes": s.RECIPES,
            "doctor": doctor_available(), "max_body_bytes": MAX_BODY_BYTES, "defaults": command_defaults()}


def _openapi_body(command: str) -> dict:
    from trainmem.web.commands import request_schema
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": request_schema(command)}}},
            "responses": {"422": {"description": 'bad input: {"error": "<one line, as the CLI prints it>"}'},
                          "413": {"description": "request body too large"},
                          "415": {"description": "request body is not application/json"}}}


def _add_api_routes(app: FastAPI, command: str) -> None:
    async def endpoint(request: Request) -> Response:
        return await _answer(request, command)

    async def view(request: Request) -> Response:
        return await _answer(request, command, view=True)

    summary = {"estimate": "trainmem estimate --json", "compare": "trainmem compare --json",
               "plan": "trainmem plan --json", "doctor": "trainmem doctor --json"}[command]
    app.post(f"/api/{command}", summary=summary, openapi_extra=_openapi_body(command), name=command)(endpoint)
    app.post(f"/api/view/{command}", summary=f"{summary}, with the page's HTML and plotly figures",
             openapi_extra=_openapi_body(command), name=f"view-{command}")(view)


def create_app(allowed_hosts: tuple[str, ...] | None = None, lang: str = "en", allow_paths: bool = False) -> FastAPI:
    """The app. ``allowed_hosts``: Host headers accepted (``trainmem serve`` on a loopback address
    passes :data:`LOOPBACK_HOSTS`, against DNS rebinding); None accepts any. ``lang``: the page's
    language until the user switches it. ``allow_paths``: read local files named in requests (a model's
    config.json, a cluster file; ``trainmem serve --allow-paths``); off, a path gets one answer, found or not."""
    from importlib.metadata import PackageNotFoundError, version

    from trainmem.report.plotlyjs import plotly_js_path
    from trainmem.web.ui import ui_strings

    try:
        ver = version("trainmem")
    except PackageNotFoundError:  # pragma: no cover
        ver = "0"
    app = FastAPI(title="trainmem", version=ver,
                  description="GPU memory of one training step. Each POST takes the command's options in "
                              "snake_case (plus `model`) and answers the command's `--json` object.")
    app.state.allow_paths = allow_paths
    for command in _VIEW_COMMANDS:
        _add_api_routes(app, command)
    meta: dict = {}

    @app.get("/api/meta", summary="catalogs and choices for the page")
    def api_meta() -> JSONResponse:
        if not meta:
            meta.update(_meta(), lang=lang)
        return JSONResponse(meta)

    @app.get("/api/ui", summary="the page's labels in a language")
    def api_ui(lang: str = "en") -> JSONResponse:
        return JSONResponse(ui_strings(lang))

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly() -> FileResponse:
        return FileResponse(plotly_js_path(), media_type="text/javascript")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)
    if allowed_hosts:
        from starlette.middleware.trustedhost import TrustedHostMiddleware
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return app
