"""``trainmem serve``: a local web calculator over the library (FastAPI, one static page).

Needs the ``web`` extra (fastapi, uvicorn, plotly); the core package imports without them.
"""

from __future__ import annotations

__all__ = ["create_app", "serve"]


def create_app(allowed_hosts: tuple[str, ...] | None = None, lang: str = "en",  # noqa: ANN201
               allow_paths: bool = False):
    """The FastAPI app (see :mod:`trainmem.web.app`)."""
    from trainmem.web.app import create_app as make
    return make(allowed_hosts, lang, allow_paths)


def serve(host: str = "127.0.0.1", port: int = 8000, lang: str = "en", allow_paths: bool = False) -> None:
    """Run the app with uvicorn until interrupted (Host headers checked on a loopback address; local paths in
    requests read only with ``allow_paths``)."""
    import uvicorn

    from trainmem.web.app import LOOPBACK_HOSTS

    hosts = LOOPBACK_HOSTS if host in LOOPBACK_HOSTS else None
    uvicorn.run(create_app(hosts, lang, allow_paths), host=host, port=port, log_level="warning")
