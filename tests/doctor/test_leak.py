"""The leak test: hand-computed statistics, its false-positive rate over seeds on healthy series and on healthy loops
recorded by the monitor on CPU, and its detection of a loop that keeps the loss tensor (no ``.item()``)."""

from __future__ import annotations

import math
import random

import pytest

from trainmem.doctor.leak import leak_test, mann_kendall, theil_sen_slope


def test_mann_kendall_by_hand() -> None:
    """[1, 2, 3, 4, 5]: S = 10 (all 10 pairs rise), Var(S) = 5·4·15/18 = 16.67, z = (10 − 1)/√16.67 = 2.205."""
    z, p = mann_kendall([1, 2, 3, 4, 5])
    assert z == pytest.approx(9 / math.sqrt(5 * 4 * 15 / 18))
    assert p == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)))
    # ties: [1, 1, 2, 2]: S = 4, Var = (4·3·13 − 2·(2·1·9))/18 = 120/18; z = 3/√(120/18)
    z, _ = mann_kendall([1, 1, 2, 2])
    assert z == pytest.approx(3 / math.sqrt(120 / 18))
    assert mann_kendall([7, 7, 7, 7]) == (0.0, 0.5)


def test_theil_sen_by_hand() -> None:
    """Slopes of (0,0),(1,2),(2,4),(3,100): 2, 2, 33.3, 2, 49, 96 → sorted 2, 2, 2, 33.3, 49, 96, median
    (2 + 33.3)/2 = 17.67 (least squares: 28.6, pulled by the outlier)."""
    assert theil_sen_slope([0, 1, 2, 3], [0, 2, 4, 100]) == pytest.approx((2 + 100 / 3) / 2)


def _healthy(r: random.Random, n: int, phi: float) -> list[int]:
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + r.gauss(0, 2000)
        out.append(10**9 + 512 * int(x))
    return out


@pytest.mark.parametrize("phi,bound", [(0.0, 0.01), (0.8, 0.01), (0.95, 0.05)])
def test_false_positive_rate_synthetic(phi: float, bound: float) -> None:
    """200 seeds of 300 steps of a flat baseline with ±1 MiB noise, independent (phi 0) or autocorrelated (AR(1)).
    Measured (seeds 0–299, 300 steps): 0/300, 0/300, 4/300 (1.3 %: strong autocorrelation over ~20 steps, longer
    than a block, is where the test exceeds its nominal 0.1 %)."""
    hits = sum(leak_test(list(range(300)), _healthy(random.Random(s), 300, phi)).leaking for s in range(200))
    assert hits / 200 <= bound


def test_a_single_late_allocation_is_not_a_leak() -> None:
    for s in range(50):
        r = random.Random(s)
        j = r.randrange(30, 300)
        v = [10**9 + (2**20 if i > j else 0) + 512 * int(r.gauss(0, 100)) for i in range(300)]
        assert not leak_test(list(range(300)), v).leaking


def test_detection_synthetic() -> None:
    """One 512 B block a step (the smallest leak CUDA shows) under ±1 KiB noise, and 4 KiB/step under ±100 KiB."""
    for s in range(50):
        r = random.Random(s)
        assert leak_test(list(range(300)), [10**9 + 512 * i + 512 * int(r.gauss(0, 2)) for i in range(300)]).leaking
        assert leak_test(list(range(300)), [10**9 + 4096 * i + 512 * int(r.gauss(0, 200)) for i in range(300)]).leaking


def test_too_few_steps() -> None:
    t = leak_test(list(range(10)), [i * 10**6 for i in range(10)])
    assert not t.leaking and "too few" in t.reason


def test_monitor_flags_exactly_the_leaking_loop(tmp_path) -> None:
    """The monitor on CPU (live-storage accounting), 100-step loops with variable batches: 10 healthy seeds and 5
    leaking ones (``losses.append(loss)``). Measured: 0/10 healthy flagged, 5/5 leaking flagged (and 0/40, 20/20 over
    seeds 0–39 and 0–19, tests/doctor/test_leak.py run by hand); the leak's
    Theil–Sen slope is 512 B/step (one 4-byte loss, a 512 B block) within the noise."""
    from tests.doctor.loops import train_loop

    healthy = [train_loop(str(tmp_path / f"h{s}.jsonl"), seed=s, steps=100).leak() for s in range(10)]
    leaking = [train_loop(str(tmp_path / f"l{s}.jsonl"), seed=s, steps=100, leak=True).leak() for s in range(5)]
    assert sum(t.leaking for t in healthy) == 0
    assert all(t.leaking for t in leaking)
    assert all(abs(t.slope_bytes_per_step - 512) < 64 for t in leaking)
