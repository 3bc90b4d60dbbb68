"""One torch thread: the machine's two cores are shared, and the monitor's CPU loops are tiny."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = Path(__file__).parent / "corpus"


def cases(kind: str) -> list[dict]:
    return json.loads((CORPUS / kind / "index.json").read_text())["cases"]


try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a dev dependency
    pass
