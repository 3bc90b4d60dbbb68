"""Issue 19's concrete cases that no other test pinned directly (the audit of its "Why" list): the doctor's JSON
states the precision the GPU or the engine chose as ``estimate --json`` does; a 13B full fine-tune with ZeRO-2 on
4 × 80 GB whose OOM shows no phase is a static overflow (the estimate's peak is the optimizer step), while the same
run with ZeRO-3 is not; and no corpus input where the job's own ranks hold contexts gets "stop process" advice."""

from __future__ import annotations

import json

import pytest

from tests.doctor.test_corpus import CASES, _args
from trainmem.cli import main
from trainmem.doctor.rules import THRESHOLD


def _json(capsys, *args: str) -> dict:
    rc = main(list(args) + ["--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize(("args", "precision", "said"), [
    (["llama-2-7b", "--gpu", "V100-SXM2-32G"], "amp-fp16", "has no bfloat16"),
    (["qwen2.5-0.5b", "--gpu", "T4-16G", "--engine", "deepspeed", "--zero", "2", "--gpus", "2"], "mixed-fp16",
     "has no bfloat16"),
    (["llama-3.2-1b", "--engine", "deepspeed", "--zero", "2", "--precision", "bf16", "--gpus", "2"], "mixed-bf16",
     "is its mixed-bf16 recipe"),
])
def test_doctor_states_the_precision_it_took_as_estimate_does(capsys, args: list[str], precision: str,
                                                                said: str) -> None:
    """V100/T4 without --precision take the engine's fp16 recipe; deepspeed's bf16 is mixed-bf16. The doctor's
    setup and assumptions are estimate's (the note was only in the text report's notes, not in --json)."""
    est = _json(capsys, "estimate", *args)
    doc = _json(capsys, "doctor", *args)
    assert doc["setup"]["precision"] == est["setup"]["precision"] == precision
    assert doc["setup"] == est["setup"] and doc["assumptions"] == est["assumptions"]
    assert sum(said in a for a in doc["assumptions"]) == 1


# thread lf-1158 (benchmarks/oom_threads.json, dev): Baichuan2-13B full fine-tune, ZeRO-2, 4 × A800-80G, as posted
LF_1158_OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.94 GiB (GPU 1; 79.35 GiB total "
               "capacity; 77.65 GiB already allocated; 316.12 MiB free; 77.66 GiB reserved in total by PyTorch) If "
               "reserv ed memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.\n")
SETUP_13B = ["13B", "--engine", "deepspeed", "--gpus", "4", "--gpu", "A800-SXM-80G", "--micro-batch", "1",
             "--precision", "mixed-bf16", "--seq-len", "1536", "--recompute", "full"]


@pytest.mark.parametrize("posted", [True, False])
def test_13b_zero2_on_4x80g_without_phase_is_static(capsys, tmp_path, posted: bool) -> None:
    """No frame says where it was raised; the estimate peaks in the optimizer step (84.8 GiB on 79.4 GiB): static,
    with ZeRO-3 (the maintainer's answer) among the fixes and fitting; activations come after it."""
    err = tmp_path / "e.txt"
    err.write_text(LF_1158_OOM if posted else "torch.cuda.OutOfMemoryError: CUDA out of memory.\n")
    f = _json(capsys, "doctor", *SETUP_13B, "--zero", "2", "--error", str(err))["findings"]
    assert f[0]["cause"] == "static_overflow" and f[0]["likelihood"] >= THRESHOLD
    assert "peaks in the optimizer step" in f[0]["evidence"] and "not the activations" in f[0]["evidence"]
    assert any(x["action"].startswith("ZeRO-3") and x["fits"] for x in f[0]["fixes"])
    assert [x["cause"] for x in f].index("activation_overflow") > 0
    # near miss: ZeRO-3 on the same GPUs fits the estimate, so the bare OOM is no static overflow
    f3 = _json(capsys, "doctor", *SETUP_13B, "--zero", "3", "--error", str(err))["findings"]
    assert f3[0]["cause"] != "static_overflow"


SIBLING_CASES = [c for c in CASES if c["first"] == "rank_imbalance"]


@pytest.mark.parametrize("case", SIBLING_CASES, ids=lambda c: "+".join(a.rsplit("/", 1)[-1] for a in c["args"]))
def test_no_finding_advises_stopping_the_jobs_own_ranks(case: dict, tmp_path, capsys) -> None:
    """Where the first cause is the job's own ranks (their contexts on GPU 0, or one rank heavier), no finding —
    not only rank_imbalance's — says "stop process"."""
    found = _json(capsys, "doctor", *_args(case, tmp_path))["findings"]
    assert found[0]["cause"] == "rank_imbalance"
    assert not [x["action"] for f in found for x in f["fixes"] if x["action"].startswith("stop process")]


def test_goal_table_counts_undetermined_both_ways() -> None:
    """benchmarks/doctor_threads.py's goal table: per held-out split and pooled, the top-cause share over all
    threads and over those the doctor named (threads less undetermined), from the same judged rows as the summary."""
    from tests.doctor.test_threads import _bench, _rows
    b, rows = _bench(), list(_rows())
    lines = b.goal_table(rows).splitlines()[2:]
    sums = [b.summary(rows, s) for s in b.HELD_OUT]
    pooled = {k: sum(s[k] for s in sums) for k in sums[0]}
    assert len(lines) == 4
    for line, s in zip(lines, [*sums, pooled]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        n, und, named = s["threads"], s["undetermined"], s["threads"] - s["undetermined"]
        assert (int(cells[1]), int(cells[2])) == (n, und)
        assert cells[3].startswith(f"{s['cause_right']}/{n} ") and cells[4].startswith(f"{s['cause_right']}/{named} ")
        assert cells[5].startswith(f"{s['fix_offered']}/{n} ") and cells[6].split("/")[1].startswith(f"{named} ")
    assert "all held-out" in lines[-1]


def _varlen_log(reserved: int, ranks: tuple[int, ...] = (0,), long_on: tuple[int, ...] = (0,)):
    from trainmem.doctor.steplog import StepLog, StepRecord
    from trainmem.units import GiB
    recs = tuple(StepRecord(step=i, allocated_bytes=20 * GiB, reserved_bytes=reserved, rank=r,
                            peak_allocated_bytes=(50 if i == 3 and r in long_on else 25) * GiB)
                 for r in ranks for i in range(60))
    return StepLog(records=recs, ranks=ranks)


def test_reserved_at_the_runs_high_water_mark_is_the_cache_not_fragmentation() -> None:
    """Variable-length samples: step 3's long sequence peaks at 50 GiB, the other 59 steps at 25 GiB; the cache keeps
    the 52 GiB the long step grew (segments go back only on a failed cudaMalloc or empty_cache). Reserved is 27 GiB
    above each short step's own peak, 2 GiB above the highest peak so far: no finding (it was fragmentation 0.65).
    Reserved 72 GiB is 22 GiB above that high-water mark: fragmentation. The mark is per rank."""
    from trainmem.doctor.case import Evidence
    from trainmem.doctor.rules import diagnose
    from trainmem.units import GiB
    assert [f.cause for f in diagnose(Evidence(log=_varlen_log(52 * GiB)), None)] == ["none"]
    f = diagnose(Evidence(log=_varlen_log(72 * GiB)), None)[0]
    assert f.cause == "fragmentation" and f.observed_bytes == 22 * GiB
    # rank 1 never ran the long sequence: its 52 GiB reserved is 27 GiB over its own highest peak
    f = diagnose(Evidence(log=_varlen_log(52 * GiB, ranks=(0, 1), long_on=(0,))), None)
    assert "fragmentation" in [x.cause for x in f]
    assert [x.cause for x in diagnose(Evidence(log=_varlen_log(52 * GiB, ranks=(0, 1), long_on=(0, 1))), None)] \
        == ["none"]


def test_the_display_on_the_jobs_gpu_counts_only_where_something_failed(capsys, tmp_path) -> None:
    """A desktop RTX 4090 training (python 19.8 GiB) beside Xorg, gnome-shell and firefox (Type G, 731 MiB): no
    finding (it was other_process 0.7 with "stop process 1874 (/usr/lib/xorg/Xorg)"). With an OOM asking 1 GiB where
    900 MiB is free, the display's 731 MiB would make the room: other_process."""
    from tests.doctor.conftest import CORPUS
    from trainmem.doctor.nvsmi import parse_nvidia_smi
    smi_path = CORPUS / "nvsmi" / "desktop_display_4090.txt"
    smi = parse_nvidia_smi(smi_path.read_text())
    assert [(p.pid, p.type) for p in smi.processes] == [(1874, "G"), (2101, "G"), (3342, "G"), (88123, "C")]
    assert [f["cause"] for f in _json(capsys, "doctor", "--nvidia-smi", str(smi_path))["findings"]] == ["none"]
    err = tmp_path / "e.txt"
    err.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity "
                   "of 23.99 GiB of which 900.00 MiB is free. Including non-PyTorch memory, this process has 19.80 GiB "
                   "memory in use. Of the allocated memory 19.00 GiB is allocated by PyTorch, and 300.00 MiB is "
                   "reserved by PyTorch but unallocated.\n")
    f = _json(capsys, "doctor", "--nvidia-smi", str(smi_path), "--error", str(err))["findings"]
    assert f[0]["cause"] == "other_process" and f[0]["observed_bytes"] == (412 + 201 + 118) * 2**20
