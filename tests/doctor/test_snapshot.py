"""Snapshots built from the documented schema (tests/doctor/snapshots.py): attribution of the peak, fragmentation,
the trace replay, and the restricted unpickler."""

from __future__ import annotations

import os
import pickle

import pytest

from tests.doctor import snapshots as S
from trainmem.doctor.snapshot import load_snapshot, summarise_snapshot
from trainmem.errors import ConfigError
from trainmem.units import GiB, MiB


def _load(obj: object) -> dict:
    return load_snapshot(pickle.dumps(obj), "snap.pickle")


def test_peak_attributed_by_frames() -> None:
    s = summarise_snapshot(_load(S.training_peak()))
    assert s.by_category["parameters"] == 4 * GiB and s.by_category["gradients"] == 4 * GiB
    assert s.by_category["optimizer_states"] == 8 * GiB and s.by_category["activations"] == 6 * GiB
    assert s.peak_bytes == s.allocated_bytes == 22 * GiB and s.reserved_bytes == 22 * GiB + 20 * MiB
    assert s.stranded_bytes == 20 * MiB and s.peak_source == "segments" and s.frames_present


def test_fragmentation_measured_from_segments() -> None:
    s = summarise_snapshot(_load(S.fragmented()))
    assert s.reserved_bytes == 10 * GiB and s.allocated_bytes == 2560 * MiB
    assert s.stranded_bytes == 7680 * MiB and s.largest_inactive_bytes == 768 * MiB
    assert s.oom_request_bytes == GiB and s.oom_device_free_bytes == 300 * MiB


def test_trace_replay_finds_the_earlier_peak() -> None:
    """4 × 1 GiB of activations allocated then freed before the snapshot: the peak is 2 + 4 GiB, and it was
    activations (their alloc frames, not the frames recorded with the free)."""
    s = summarise_snapshot(_load(S.replayed_peak()))
    assert s.peak_source == "trace" and s.peak_bytes == 6 * GiB and s.allocated_bytes == 2 * GiB
    assert s.by_category["activations"] == 4 * GiB and s.by_category["parameters"] == 2 * GiB
    assert s.by_category["gradients"] == 0


def test_eval_and_loader_blocks() -> None:
    assert summarise_snapshot(_load(S.eval_kept())).eval_activation_bytes == 3 * GiB
    assert summarise_snapshot(_load(S.loader())).by_category["dataloader"] == 512 * MiB


def test_legacy_list_of_segments_and_history_frames() -> None:
    seg = S.segment(0, [(GiB, "active_allocated", "parameters")])
    for b in seg["blocks"]:
        b["history"] = [{"frames": b.pop("frames"), "real_size": b["size"]}]
        del b["address"]
    s = summarise_snapshot(_load([seg]))
    assert s.by_category["parameters"] == GiB


class _Evil:
    def __reduce__(self):  # noqa: ANN204
        return (os.system, ("echo pwned > /tmp/trainmem_doctor_pwned",))


@pytest.mark.parametrize("data,match", [
    (pickle.dumps({"segments": [_Evil()]}), r"Python object \(posix\.system|Python object \(os\.system"),
    (pickle.dumps({"segments": [], "x": __import__("collections").OrderedDict()}), "Python object"),
    (b"step,allocated_bytes,reserved_bytes\n0,1,2\n", "not a pickle"),
    (pickle.dumps(S.training_peak())[:200], "truncated"),
    (pickle.dumps([1, 2, 3]), "segment without total_size"),
    (pickle.dumps({"traces": []}), "no segments list"),
    (b"PK\x03\x04torch.save zip", "not a pickle"),
])
def test_bad_snapshots_refused(data: bytes, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_snapshot(data, "snap.pickle")
    assert not os.path.exists("/tmp/trainmem_doctor_pwned")
