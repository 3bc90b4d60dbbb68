"""The plotly.js bundle of the installed ``plotly`` package, found without importing plotly.

The HTML report embeds it (one self-contained file, nothing fetched); ``trainmem serve`` serves it
from disk at ``/vendor/plotly.min.js``. plotly.py ships it as ``plotly/package_data/plotly.min.js``.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from pathlib import Path

from trainmem.errors import ConfigError

__all__ = ["plotly_js_path", "plotly_js", "plotly_js_version"]


def plotly_js_path() -> Path:
    """Path of the installed plotly.js bundle; one line (ConfigError) if plotly is not installed."""
    spec = importlib.util.find_spec("plotly")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for loc in locations:
        path = Path(loc) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    raise ConfigError("charts need the plotly package, in trainmem's web extra: pip install 'trainmem[web]'")


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The whole bundle, as text to put inside a ``<script>`` element."""
    text = plotly_js_path().read_text(encoding="utf-8")
    return text.replace("</script", "<\\/script")


def plotly_js_version() -> str:
    """``4.1.1`` from the bundle's banner ("plotly.js v4.1.1"), or "" when it has none."""
    with plotly_js_path().open(encoding="utf-8") as fh:
        head = fh.read(400)
    m = re.search(r"plotly\.js v(\S+)", head)
    return m.group(1) if m else ""
