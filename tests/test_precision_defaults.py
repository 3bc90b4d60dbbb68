"""The precision every command takes when the flags leave it to the GPU (fp16 where there is no bfloat16) or
name a family the engine runs as its mixed recipe (issue 19: "the default precision follows the GPU; engines
take the precision names every other command takes") — estimate and the Python API, not only the doctor."""

from __future__ import annotations

import pytest

import trainmem
from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory import estimate


@pytest.mark.parametrize(("fields", "want"), [
    (dict(gpu="V100-SXM2-32G"), "amp-fp16"),
    (dict(gpu="V100-SXM2-32G", engine="deepspeed", gpus=2), "mixed-fp16"),
    (dict(gpu="V100-SXM2-32G", engine="megatron", gpus=2), "mixed-fp16"),
    (dict(gpu="H100-SXM-80G"), "amp-bf16"),
    (dict(engine="deepspeed", gpus=8, precision="bf16"), "mixed-bf16"),
    (dict(engine="megatron", gpus=8, precision="fp16"), "mixed-fp16"),
    (dict(engine="fsdp2", gpus=8, precision="bf16"), "bf16"),  # a recipe of fsdp2 as it is
])
def test_precision_follows_the_gpu_and_the_engine(fields, want) -> None:
    _, setup = build("llama-3.2-1b", **fields)
    assert setup.precision == want
    defaulted = fields.get("precision") != want and want != "amp-bf16"  # (amp-bf16: trainmem's own default)
    assert any(want in n and ("no bfloat16" in n or "recipe" in n) for n in setup.notes) == defaulted


def test_a_v100_estimate_runs_and_says_why() -> None:
    r = trainmem.estimate("llama-3.2-1b", gpu="V100-SXM2-32G")
    assert r.setup["precision"] == "amp-fp16"
    assert any("has no bfloat16" in a for a in r.assumptions)


def test_bf16_asked_on_a_v100_is_still_refused() -> None:
    spec, setup = build("llama-3.2-1b", gpu="V100-SXM2-32G", precision="amp-bf16")
    with pytest.raises(ConfigError, match="no bfloat16 support"):
        estimate(spec, setup)
