"""Server-side latency of the web calculator per edit (issue 10 target: ≤ 100 ms for /api/estimate and
/api/compare). Each request is one edit of the page: the model and the micro-batch change from one
request to the next. Prints the median and the 90th percentile per endpoint.

    python benchmarks/web_speed.py [--repeat 40] [--uvicorn]

Default: in-process through fastapi's TestClient (the app's own time, no socket). ``--uvicorn``: the
same requests over HTTP (httpx) against uvicorn on a free local port, as the page sends them.
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

EDITS = [
    {"model": "llama-3.1-8b", "engine": "fsdp2", "gpus": 8, "seq_len": 4096, "grad_accum": 2},
    {"model": "llama-2-7b", "engine": "deepspeed", "zero": 2, "gpus": 8, "seq_len": 4096},
    {"model": "qwen2.5-7b", "engine": "megatron", "gpus": 8, "tp": 2, "pp": 2, "grad_accum": 8},
    {"model": "mixtral-8x7b", "engine": "megatron", "gpus": 16, "tp": 2, "ep": 4, "sp": True},
    {"model": "llama-3.1-70b", "engine": "fsdp2", "gpus": 64, "seq_len": 8192, "recompute": "full"},
]
PLANS = [
    {"model": "llama-3.1-8b", "cluster": "8xH100-SXM-80G", "global_batch": 64, "seq_len": 4096},
    {"model": "llama-3.1-70b", "cluster": "64xH100-SXM-80G", "global_batch": 512, "seq_len": 4096},
]


def _bodies(base: list[dict], n: int) -> list[dict]:
    mbs = itertools.cycle((1, 2, 4, 3))
    return [{**b, **({"micro_batch": next(mbs)} if "cluster" not in b else {})}
            for b, _ in zip(itertools.cycle(base), range(n))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _client(use_uvicorn: bool):  # noqa: ANN202 - (post callable, stop callable)
    from trainmem.web import create_app
    if not use_uvicorn:
        from fastapi.testclient import TestClient
        c = TestClient(create_app())
        return c.post, lambda: None
    import httpx
    import uvicorn
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)

    def stop() -> None:
        c.close()
        server.should_exit = True
    return c.post, stop


def _time(post, path: str, bodies: list[dict]) -> list[float]:  # noqa: ANN001
    post(path, json=bodies[0])  # warm: imports and caches of the first request
    out = []
    for b in bodies:
        t0 = time.perf_counter()
        r = post(path, json=b)
        out.append(time.perf_counter() - t0)
        if r.status_code != 200:
            raise SystemExit(f"{path} {b}: HTTP {r.status_code} {r.text[:200]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=40, help="requests per endpoint (plans: a quarter)")
    ap.add_argument("--uvicorn", action="store_true", help="over HTTP against uvicorn instead of in-process")
    args = ap.parse_args()
    post, stop = _client(args.uvicorn)
    how = "HTTP, uvicorn" if args.uvicorn else "in-process TestClient"
    print(f"server-side latency per edit ({how}; target ≤ 100 ms for estimate and compare)")
    print(f"{'endpoint':22s} {'requests':>8s} {'median ms':>10s} {'p90 ms':>8s} {'max ms':>8s}")
    try:
        for path, base, n in (("/api/estimate", EDITS, args.repeat), ("/api/view/estimate", EDITS, args.repeat),
                              ("/api/compare", EDITS, args.repeat), ("/api/view/compare", EDITS, args.repeat),
                              ("/api/plan", PLANS, max(4, args.repeat // 4))):
            ts = sorted(_time(post, path, _bodies(base, n)))
            p90 = ts[min(len(ts) - 1, int(0.9 * len(ts)))]
            print(f"{path:22s} {len(ts):8d} {1000 * statistics.median(ts):10.1f} {1000 * p90:8.1f} {1000 * ts[-1]:8.1f}")
    finally:
        stop()


if __name__ == "__main__":
    main()
