"""compare's rows for what the layers keep: activation offloading (timed: its host copies) and LoRA without its
dropout (the masks and per-adapter dropout outputs it saves, memory/activations.py lora_dropout_terms)."""

from __future__ import annotations

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.plan.compare import compare


def _rows(**kw) -> dict[str, dict]:
    spec, s = build("llama-3.2-1b", **kw)
    return {o["technique"]: o for o in compare(spec, s)["options"]}, spec, s


def test_lora_without_dropout_saves_what_the_dropout_keeps() -> None:
    rows, spec, s = _rows(lora_rank=16, lora_targets="all-linear", lora_dropout=0.1, seq_len=4096, micro_batch=4)
    row = rows["LoRA without dropout (lora_dropout 0)"]
    _, s0 = build("llama-3.2-1b", lora_rank=16, lora_targets="all-linear", seq_len=4096, micro_batch=4)
    assert row["saves_bytes"] == estimate(spec, s).peak_allocated_bytes - estimate(spec, s0).peak_allocated_bytes > 0
    rows0, _, _ = _rows(lora_rank=16, lora_targets="all-linear", seq_len=4096, micro_batch=4)
    assert "LoRA without dropout (lora_dropout 0)" not in rows0


def test_activation_offloading_is_offered_and_costs_time_without_recompute() -> None:
    rows, _, _ = _rows(seq_len=4096, micro_batch=4)
    row = rows["activation offloading to CPU (OffloadActivations)"]
    assert row["saves_bytes"] > 0 and row["slowdown_pct"] > 0
