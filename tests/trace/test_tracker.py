"""The light tracker against hand arithmetic and against PyTorch's MemTracker."""

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from trainmem.trace.tracker import StorageTracker  # noqa: E402


def test_rounding_and_frees():
    with FakeTensorMode(), StorageTracker() as tr:
        tr.start_recording("s")
        a = torch.empty(1000)          # 4000 B -> 4096
        b = torch.empty(100)           # 400 B  -> 512
        c = a * 2                      # 4096
        del a                          # freed: 4608
        d = torch.empty(3000)          # 12000 B -> 12288: 16896
        assert tr.allocated == 512 + 4096 + 12288
        assert tr.peak == 512 + 4096 + 12288
        del b, c, d
        assert tr.allocated == 0


def test_linear_step_peak_by_hand():
    """nn.Linear(64, 32, bias=False), x [16, 64] fp32, loss = y.sum(), SGD (foreach, in place).

    W = 32·64·4 = 8192 B, x = 16·64·4 = 4096 B (both alive before the step);
    forward: y [16, 32] = 2048 B, loss = 4 B -> 512 B; y is freed after sum (SumBackward keeps
    only the shape): 8192 + 4096 + 512 = 12800 after forward (14848 while y is alive);
    backward: the seed grad ones_like(loss) 512 B, dW = x.t() @ grad 8192 B -> 12800 + 512 + 8192 =
    21504 = the peak; the seed dies, dW becomes W.grad; SGD updates W in place; zero_grad frees dW.
    """
    with FakeTensorMode(), StorageTracker() as tr:
        model = torch.nn.Linear(64, 32, bias=False)
        x = torch.randn(16, 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
        tr.start_recording("s")
        loss = model(x).sum()
        assert (tr.allocated, tr.peak) == (12800, 14848)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        assert tr.peak == 8192 + 4096 + 512 + 512 + 8192 == 21504
        assert tr.allocated == 8192 + 4096


def test_resize_patch_is_restored_even_on_error():
    orig = torch.UntypedStorage.resize_
    with pytest.raises(RuntimeError, match="boom"):
        with FakeTensorMode(), StorageTracker():
            assert torch.UntypedStorage.resize_ is not orig
            raise RuntimeError("boom")
    assert torch.UntypedStorage.resize_ is orig


def test_storage_resize_is_tracked():
    with FakeTensorMode(), StorageTracker() as tr:
        t = torch.empty(1024)                      # 4096 B
        t.untyped_storage().resize_(0)             # FSDP2's free_storage
        assert tr.allocated == 0
        t.untyped_storage().resize_(4096)          # alloc_storage
        assert tr.allocated == 4096


def test_agrees_with_pytorch_memtracker():
    """Same steady AdamW step of a 2-layer MLP, seen by both trackers at once.

    MemTracker (torch/distributed/_tools/mem_tracker.py) rounds to 512 B only on CUDA devices and
    only counts what it tracks after ``track_external``; our tracker rounds every storage (we stand
    for CUDA) and also sees the input x. Parameters 64·128 + 128 + 128·64 + 64 floats: only the
    second bias (64·4 = 256 B) rounds up, by 256 B per copy; five copies are alive at
    the peak (params, grads, exp_avg, exp_avg_sq, foreach sqrt temporary) -> 5·256 B; Adam's four
    `step` scalars are 4 B each for MemTracker and 512 B each here -> 4·508 B; x = 32·64·4 = 8192 B.
    """
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode(), StorageTracker() as tr:
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
        opt = torch.optim.AdamW(model.parameters(), foreach=True)
        x = torch.randn(32, 64)

        def step():
            model(x).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        mt = MemTracker()
        mt.track_external(model, opt)
        tr.start_recording("steady")
        with mt:
            step()
        ours = tr.peak
    theirs = next(iter(mt.get_tracker_snapshot("peak").values()))["Total"]
    assert ours - theirs == 5 * 256 + 4 * (512 - 4) + 8192
