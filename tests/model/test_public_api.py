"""trainmem.model: its public surface, and that importing it stays light (no torch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trainmem.model


def test_public_surface_is_stable():
    assert sorted(trainmem.model.__all__) == sorted(
        ["ModelSpec", "ParamCounts", "LayerParams", "resolve_model", "spec_from_hf_config", "list_models"])
    for name in trainmem.model.__all__:
        assert getattr(trainmem.model, name) is not None


def test_import_does_not_pull_torch_or_transformers():
    code = ("import sys, trainmem.model; trainmem.model.resolve_model('llama-3.1-8b'); "
            "bad = [m for m in ('torch', 'transformers', 'huggingface_hub') if m in sys.modules]; "
            "assert not bad, bad")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=root, env=env)
