"""The simulator's results on a pinned set of 224 setups over every engine path (tests/memory/golden.py)
equal the stored ones: a restructuring of the walk or the engine units must not change any of them.
After an intended change of the model, regenerate the file (see golden.py) and say why in the commit."""

from __future__ import annotations

import json
from pathlib import Path

from tests.memory.golden import snapshot


def test_estimates_equal_the_golden_file() -> None:
    want = json.loads((Path(__file__).parent / "golden_estimates.json").read_text())
    got = snapshot()
    assert set(got) == set(want)
    diff = [k for k in want if got[k] != want[k]]
    assert not diff, f"{len(diff)} setups changed, e.g. {diff[0]}: {want[diff[0]]} -> {got[diff[0]]}"
