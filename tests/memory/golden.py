"""Golden estimates: a pinned set of setups over every engine path, to prove that a restructuring of the
simulator changes no result. Regenerate (after an intended change) with
``python -m tests.memory.golden > tests/memory/golden_estimates.json``."""

from __future__ import annotations

import itertools
import json
import sys

from trainmem.api import build
from trainmem.errors import TrainmemError
from trainmem.memory import estimate

MODELS = ("llama-3.1-8b", "qwen2.5-0.5b", "mixtral-8x7b", "gemma-2-2b", "gpt2", "deepseek-v2-lite",
          "bert-large-uncased", "falcon-7b")
SETUPS = (
    {}, {"precision": "bf16", "recompute": "full"}, {"precision": "fp32", "attn": "eager", "seq_len": 512},
    {"grad_accum": 3, "micro_batch": 2, "loop": "script"}, {"recompute": "selective", "optimizer": "sgd-momentum"},
    {"engine": "torch", "gpus": 4, "loss": "chunked"},
    {"engine": "fsdp2", "gpus": 8}, {"engine": "fsdp2", "gpus": 8, "zero": 2, "grad_accum": 2},
    {"engine": "fsdp2", "gpus": 16, "tp": 2, "recompute": "full"}, {"engine": "fsdp2", "gpus": 4, "tp": 4},
    {"engine": "fsdp2", "gpus": 8, "offload": "optimizer+params"}, {"engine": "fsdp2", "gpus": 8, "pp": 2, "grad_accum": 4},
    {"engine": "fsdp2", "gpus": 8, "cp": 2, "loss": "fused-linear"},
    {"engine": "deepspeed", "zero": 0}, {"engine": "deepspeed", "zero": 1, "gpus": 8, "grad_accum": 2},
    {"engine": "deepspeed", "zero": 2, "gpus": 8, "grad_accum": 3}, {"engine": "deepspeed", "zero": 3, "gpus": 8},
    {"engine": "deepspeed", "zero": 3, "gpus": 16, "offload": "optimizer+params"},
    {"engine": "deepspeed", "zero": 2, "gpus": 8, "offload": "optimizer"},
    {"engine": "megatron", "gpus": 8, "tp": 2, "sp": True}, {"engine": "megatron", "gpus": 16, "tp": 2, "pp": 4, "grad_accum": 8, "zero": 1},
    {"engine": "megatron", "gpus": 16, "pp": 4, "vpp": 2, "grad_accum": 8, "recompute": "full"},
    {"engine": "megatron", "gpus": 64, "ep": 8, "zero": 1}, {"engine": "megatron", "gpus": 8, "zero": 1, "offload": "optimizer"},
    {"lora_rank": 16}, {"lora_rank": 32, "qlora": True, "recompute": "full"},
    {"lora_rank": 8, "lora_targets": "all-linear", "engine": "fsdp2", "gpus": 2},
    {"lora_rank": 8, "engine": "deepspeed", "zero": 3, "gpus": 4, "qlora": True},
    {"lora_rank": 8, "engine": "fsdp2", "gpus": 4, "qlora": True, "qlora_impl": "torchao", "recompute": "full"},
)


def cases() -> list[tuple[str, dict]]:
    return list(itertools.product(MODELS, SETUPS))


def snapshot() -> dict[str, dict]:
    out = {}
    for model, kw in cases():
        key = f"{model} {json.dumps(kw, sort_keys=True)}"
        try:
            spec, s = build(model, **kw)
            e = estimate(spec, s)
        except TrainmemError as err:
            out[key] = {"error": str(err)}
            continue
        out[key] = {"peak_allocated_bytes": e.peak_allocated_bytes, "static_bytes": e.static_bytes,
                    "breakdown_at_peak_bytes": e.breakdown_at_peak_bytes, "peak_phase": e.peak_phase,
                    "host_memory_bytes": e.host_memory_bytes, "category_peak_bytes": e.category_peak_bytes,
                    "timeline_points": len(e.timeline), "stage": e.stage,
                    "assumptions": len(e.assumptions)}
    return out


if __name__ == "__main__":
    json.dump(snapshot(), sys.stdout, indent=0, sort_keys=True)
