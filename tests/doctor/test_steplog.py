"""Per-step logs: the monitor's JSONL and CSV, and every kind of bad line."""

from __future__ import annotations

import pytest

from tests.doctor.conftest import CORPUS
from trainmem.doctor.steplog import merge_logs, parse_steplog
from trainmem.errors import ConfigError


def test_monitor_jsonl() -> None:
    log = parse_steplog((CORPUS / "logs" / "healthy.jsonl").read_text(), "healthy.jsonl")
    assert len(log.records) == 200 and log.ranks == (0,) and len(log.meta) == 1
    r = log.records[-1]
    assert r.step == 199 and r.allocated_bytes % 512 == 0 and r.peak_allocated_bytes >= r.allocated_bytes
    assert r.reserved_bytes is None and r.step_seconds is not None


def test_oom_record_and_capacity() -> None:
    log = parse_steplog((CORPUS / "logs" / "leak_then_oom.jsonl").read_text())
    assert len(log.ooms) == 1 and "CUDA out of memory" in log.ooms[0] and len(log.records) == 150


def test_csv_with_ranks() -> None:
    log = parse_steplog((CORPUS / "logs" / "gpu_multirank.csv").read_text())
    assert log.ranks == tuple(range(8)) and len(log.by_rank(5)) == 200
    log = parse_steplog("step,allocated_bytes,reserved_bytes\n0,100,200\n1,100,\n")
    assert log.records[1].reserved_bytes is None


def test_merge_rank_files() -> None:
    logs = [parse_steplog((CORPUS / "logs" / f"multirank.rank{r}.jsonl").read_text()) for r in range(4)]
    assert merge_logs(logs).ranks == (0, 1, 2, 3)


def test_cut_last_line_is_skipped() -> None:
    text = '{"step": 0, "allocated_bytes": 10}\n{"step": 1, "allocated_bytes": 10}\n{"step": 2, "allo'
    log = parse_steplog(text)
    assert len(log.records) == 2 and log.skipped_last_line


@pytest.mark.parametrize("text,match", [
    ('{"step": 0, "allocated_bytes": 1}\nnot json\n{"step": 2, "allocated_bytes": 1}', "line 2 is not JSON"),
    ("[1, 2]\n", "needs the columns"),
    ('{"step": 0, "allocated_bytes": true}', "not a number of bytes"),
    ('{"step": 0, "allocated_bytes": -5}', "out of range"),
    ('{"step": 0}', "needs step and allocated_bytes"),
    ('{"kind": "meta"}', "no step records"),
    ("index, name, memory.used [MiB], memory.total [MiB]\n0, A100, 1 MiB, 2 MiB\n", "needs the columns"),
    ("step,allocated_bytes\n0,abc\n", "not a number of bytes"),
])
def test_bad_logs(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_steplog(text, "x")
