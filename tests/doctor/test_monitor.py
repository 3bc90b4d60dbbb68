"""The live monitor on CPU: its records, ranks, phases, warnings, OOM record and the framework callbacks."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from tests.doctor.loops import OOM_MESSAGE, train_loop  # noqa: E402
from trainmem.doctor.monitor import LiveStorageTracker, MemoryMonitor, hf_callback, lightning_callback  # noqa: E402

STEP_KEYS = {"kind", "step", "rank", "phase", "allocated_bytes", "reserved_bytes", "active_bytes",
             "peak_allocated_bytes", "peak_reserved_bytes", "step_seconds", "t"}


def _records(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_tracker_counts_live_storages() -> None:
    tr = LiveStorageTracker()
    tr.start()
    try:
        a = torch.empty(1000)  # 4000 B → one 4096 B block (512 B granule)
        assert tr.live_bytes == 4096
        b = a.view(10, 100)  # a view: same storage, nothing new
        assert tr.live_bytes == 4096
        del a, b
        assert tr.live_bytes == 0 and tr.peak_bytes == 4096
    finally:
        tr.stop()


def test_gradients_and_optimizer_states_are_counted() -> None:
    lin = torch.nn.Linear(64, 64)  # 16 KiB + 256 B
    opt = torch.optim.AdamW(lin.parameters())
    tr = LiveStorageTracker()
    tr.observe(lin.parameters())
    params = tr.live_bytes
    tr.start()
    try:
        lin(torch.randn(8, 64)).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        # AdamW keeps exp_avg and exp_avg_sq (2 × params) and a step counter per parameter
        assert tr.live_bytes >= 3 * params
    finally:
        tr.stop()


def test_records_and_phases(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    mon = train_loop(str(path), seed=0, steps=30, eval_every=10)
    recs = _records(path)
    assert recs[0]["kind"] == "meta" and recs[0]["device"] == "cpu" and recs[0]["rank"] == 0
    steps = [r for r in recs if r["kind"] == "step"]
    assert all(set(r) == STEP_KEYS for r in steps) and len(steps) == 30 + 3 * 3
    assert {r["phase"] for r in steps} == {"train", "eval"}
    assert all(r["allocated_bytes"] % 512 == 0 and r["peak_allocated_bytes"] >= r["allocated_bytes"] for r in steps)
    assert len(mon.overhead_seconds) == len(steps)


def test_every_rank_writes_its_file(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    mon = train_loop(str(tmp_path / "mem.jsonl"), seed=0, steps=5)
    assert mon.path == tmp_path / "mem.rank2.jsonl"
    assert all(r["rank"] == 2 for r in _records(mon.path))
    mon = MemoryMonitor(str(tmp_path / "r{rank}" / "log.jsonl")).start()
    mon.close()
    assert (tmp_path / "r2" / "log.jsonl").exists()


def test_oom_is_recorded_and_reraised(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    with pytest.raises(torch.OutOfMemoryError):
        train_loop(str(path), seed=0, steps=20, oom_at=10)
    oom = [r for r in _records(path) if r["kind"] == "oom"]
    assert len(oom) == 1 and OOM_MESSAGE[:40] in oom[0]["message"] and oom[0]["step"] == 10


def test_leak_and_baseline_warnings(tmp_path) -> None:
    mon = train_loop(str(tmp_path / "leak.jsonl"), seed=0, steps=100, leak=True)
    assert [w["cause"] for w in mon.warnings] == ["leak"]
    assert any(r.get("cause") == "leak" for r in _records(mon.path))
    big = torch.empty(80 * 2**20)  # 320 MiB held across steps, above an estimate of 1 MiB
    with MemoryMonitor(str(tmp_path / "base.jsonl"), expected_static_bytes=2**20) as m:
        m._tracker.observe([big])
        for _ in range(20):
            m.step()
    assert [w["cause"] for w in m.warnings] == ["baseline_above_estimate"]
    assert m.warnings[0]["observed_bytes"] >= 320 * 2**20


def test_hf_trainer_callback(tmp_path) -> None:
    transformers = pytest.importorskip("transformers")
    cb = hf_callback(str(tmp_path / "hf.jsonl"))
    assert isinstance(cb, transformers.TrainerCallback)
    model = torch.nn.Linear(8, 1)
    state = SimpleNamespace(global_step=0)
    cb.on_train_begin(None, state, None, model=model)
    for i in range(1, 6):
        state.global_step = i
        model(torch.randn(4, 8)).sum().backward()
        cb.on_step_end(None, state, None)
    cb.on_prediction_step(None, state, None)
    cb.on_train_end(None, state, None)
    recs = [r for r in _records(tmp_path / "hf.jsonl") if r["kind"] == "step"]
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 5] and recs[-1]["phase"] == "eval"
    assert recs[0]["allocated_bytes"] >= 2 * 512  # the model's weight and bias, registered at train begin


def test_lightning_callback(tmp_path) -> None:
    try:
        import lightning  # noqa: F401
    except ImportError:
        try:
            import pytorch_lightning  # noqa: F401
        except ImportError:
            from trainmem.errors import UnsupportedError
            with pytest.raises(UnsupportedError, match="needs Lightning"):
                lightning_callback(str(tmp_path / "pl.jsonl"))
            pytest.skip("Lightning is not installed (the callback refuses with one line, as tested)")
    cb = lightning_callback(str(tmp_path / "pl.jsonl"))
    trainer = SimpleNamespace(global_step=0)
    cb.on_train_start(trainer, torch.nn.Linear(4, 1))
    cb.on_train_batch_end(trainer, None, None, None, 0)
    cb.on_train_end(trainer, None)
    assert any(r["kind"] == "step" for r in _records(tmp_path / "pl.jsonl"))


class _FakeCuda:
    """torch.cuda's counters for the CUDA path, on a machine without a GPU: reserved grows 10 GiB a step."""

    def __init__(self) -> None:
        self.n, self.dumped = 0, []
        self.memory = SimpleNamespace(_dump_snapshot=self.dumped.append)

    def memory_allocated(self, d):  # noqa: ANN001, ANN201
        return self.n * 2**30

    def memory_reserved(self, d):  # noqa: ANN001, ANN201
        self.n += 1
        return self.n * 10 * 2**30

    def memory_stats(self, d):  # noqa: ANN001, ANN201
        return {"active_bytes.all.current": self.n * 2**30}

    max_memory_allocated = memory_allocated

    def max_memory_reserved(self, d):  # noqa: ANN001, ANN201
        return self.n * 10 * 2**30

    def reset_peak_memory_stats(self, d):  # noqa: ANN001, ANN201
        pass

    def get_device_properties(self, d):  # noqa: ANN001, ANN201
        return SimpleNamespace(total_memory=80 * 2**30)


def test_cuda_counters_and_threshold_snapshot(tmp_path, monkeypatch) -> None:
    """The CUDA path with torch.cuda's counters faked: records carry the allocator's numbers, and one snapshot is
    dumped when reserved memory crosses half of the 80 GiB device."""
    from trainmem.doctor import monitor as M

    fake = _FakeCuda()
    monkeypatch.setattr(torch.cuda, "memory", fake.memory, raising=False)
    mon = MemoryMonitor(str(tmp_path / "c.jsonl"), snapshot_at=0.5, snapshot_dir=str(tmp_path))
    mon._counters = M._CudaCounters("cuda:0")
    mon._counters.torch = SimpleNamespace(cuda=fake)
    mon.capacity_bytes = mon._counters.capacity()
    mon._fh = open(mon.path_template, "a", encoding="utf-8")
    for _ in range(8):
        rec = mon.step()
    mon.close()
    assert rec["reserved_bytes"] == 80 * 2**30 and rec["active_bytes"] == 8 * 2**30
    snaps = [r for r in _records(tmp_path / "c.jsonl") if r["kind"] == "snapshot"]
    assert len(snaps) == 1 and snaps[0]["why"] == "threshold" and len(fake.dumped) == 1
