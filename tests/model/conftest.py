"""Fixtures shared by the deriver test modules (test_derive*.py, test_llama4.py, test_vlm.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def derived_cache(tmp_path_factory):
    """One derived-description cache (``$TRAINMEM_CACHE_DIR``) for a test module: a config's meta build and its
    probes (per precision class and attention, trainmem/model/derive.py ``_cached_probe``; a vision tower's fits,
    trainmem/model/vlm.py) are measured by the first test that needs them and read back from disk by the others,
    as a user's second run reads them. Empty at the module's start (never ``~/.cache/trainmem``). A test that checks
    what a run writes there sets its own (``monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(tmp_path))``)."""
    path = tmp_path_factory.mktemp("derived")
    mp = pytest.MonkeyPatch()
    mp.setenv("TRAINMEM_CACHE_DIR", str(path))
    yield path
    mp.undo()
