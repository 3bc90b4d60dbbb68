"""One OOM request the size of a DeepSpeed ZeRO-1/2 flat model-state buffer is static memory (rules.STATE_BUFFERS,
from runtime/zero/stage_1_and_2.py), even when it is larger than the GPU; near misses keep their old reading.

Sizes are hand-computed from llama-2-7b's 6,738,415,616 parameters (its config.json, the catalog's count)."""

from __future__ import annotations

from functools import lru_cache

import pytest

from trainmem.api import build
from trainmem.doctor.case import Evidence, Expected
from trainmem.doctor.frames import Where
from trainmem.doctor.oom import OOMReport
from trainmem.doctor.rules import diagnose
from trainmem.memory import estimate
from trainmem.units import GiB

P = 6_738_415_616
"""llama-2-7b's parameters."""


@lru_cache(maxsize=None)
def _exp(**flags: object) -> Expected:
    spec, setup = build("llama-2-7b", **flags)
    assert spec.n_params == P
    return Expected(spec=spec, setup=setup, estimate=estimate(spec, setup))


def _oom(tried: int, total_gib: float) -> OOMReport:
    """The ≤ 2.0 message form (its totals); 1 GiB free, the rest allocated."""
    total = int(total_gib * GiB)
    return OOMReport(form="reserved", era="torch 1.13–2.0", line="", tried_bytes=tried, device=0, total_bytes=total,
                     free_bytes=GiB, allocated_bytes=total - 2 * GiB, unallocated_bytes=GiB // 2)


ZERO2_1GPU = {"engine": "deepspeed", "zero": 2, "gpus": 1, "gpu": "RTX-4090-24G"}


@pytest.mark.parametrize(("flags", "tried", "what"), [
    # one GPU: the fp32 master partition is the whole model in fp32, 4 × P = 26,953,662,464 B (25.10 GiB) > 24 GB
    (ZERO2_1GPU, 4 * P, "fp32 master-weight partition"),
    # 8 ranks (dev thread lf-1221's 3.14 GiB in Adam's update): 4 × P / 8 = 3,369,207,808 B
    ({"engine": "deepspeed", "zero": 2, "gpus": 8, "gpu": "V100-SXM2-32G"}, 4 * P // 8, "fp32 master-weight partition"),
    # ZeRO-1 on 4 ranks at initialisation: the 16-bit flat group, 2 × P = 13,476,831,232 B, not divided
    ({"engine": "deepspeed", "zero": 1, "gpus": 4, "gpu": "A100-SXM-40G"}, 2 * P, "16-bit flat copy"),
    # ZeRO-2's 16-bit gradient partition on 4 ranks: 2 × P / 4 = 3,369,207,808 B
    ({"engine": "deepspeed", "zero": 2, "gpus": 4, "gpu": "A100-SXM-40G"}, 2 * P // 4, "gradient partition"),
])
def test_a_model_state_buffer_request_is_static(flags: dict, tried: int, what: str) -> None:
    exp = _exp(**flags)
    cap = exp.estimate.gpu_memory_bytes / GiB
    f = diagnose(Evidence(oom=_oom(tried, cap)), exp)[0]
    assert f.cause == "static_overflow" and f.likelihood >= 0.8
    assert any(what in s and "model-state buffer" in s for s in f.evidence)
    assert not any("shape bug, not a memory setting" in s for s in f.evidence)


@pytest.mark.parametrize(("flags", "tried"), [
    ({**ZERO2_1GPU, "lora_rank": 8}, 4 * P),  # LoRA: DeepSpeed flattens the adapters, not the base
    (ZERO2_1GPU, int(1.1 * 4 * P)),  # 10 % over the fp32 partition (27.61 GiB): no buffer of that size
    ({**ZERO2_1GPU, "zero": 3}, 4 * P),  # ZeRO-3 flattens sub-groups (sub_group_size), not the whole model
    ({"engine": "torch", "gpus": 1, "gpu": "RTX-4090-24G"}, 4 * P),  # no ZeRO: no flat buffers
])
def test_near_misses_larger_than_the_gpu_stay_a_shape_bug(flags: dict, tried: int) -> None:
    f = diagnose(Evidence(oom=_oom(tried, 23.99)), _exp(**flags))[0]
    assert f.cause == "activation_overflow" and any("shape bug" in s for s in f.evidence)


def test_a_buffer_sized_request_in_a_forward_is_not_read_as_a_buffer() -> None:
    """Near miss: the fp32 partition's size, raised in a forward (a frame in modeling_llama.py): activations."""
    exp = _exp(engine="deepspeed", zero=2, gpus=8, gpu="V100-SXM2-32G")
    ev = Evidence(oom=_oom(4 * P // 8, 31.75), where=Where(phase="forward", module="model.layers.mlp",
                                                           location="modeling_llama.py:220 forward"))
    out = diagnose(ev, exp)
    assert not any("model-state buffer" in s for f in out for s in f.evidence)
