"""LoRA on the output head with ``lora_dropout`` > 0 (litgpt's default 0.05 with ``lora_head: true``): the head
adapter's dropout mask and output in place of lora_A's input (memory/lora_head.py ``head_dropout_saved_per_token``),
traced through PEFT itself on fake tensors (trace/lora.py passes the setup's ``lora_dropout`` to ``LoraConfig``)
against the estimate. A vocabulary of 8192 on the tiny 3-layer Llama (h 256) makes the head's tensors the largest
of the step."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.memory.lora_head import head_adapter_saved_bytes, head_dropout_saved_per_token  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compare import compare  # noqa: E402

QVH = "q_proj,v_proj,lm_head"
V8K = {"vocab_size": 8192}
BASE = dict(seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH, lora_dropout=0.05)
CASES = [
    dict(precision="bf16", **BASE),                        # fp32 adapters on a bf16 base
    dict(precision="amp-bf16", **BASE),                    # the same under autocast
    dict(precision="bf16", adapter_dtype="bf16", **BASE),  # bf16 adapters (litgpt bf16-true)
    dict(precision="bf16", adapter_dtype="bf16", loss="chunked", loss_chunks=4, **BASE),  # litgpt's chunked head
]
IDS = ["-".join(f"{k}={v}" for k, v in kw.items() if k in ("precision", "adapter_dtype", "loss")) for kw in CASES]


@functools.lru_cache(maxsize=None)
def _compare(k: int):
    spec = spec_from_hf_config({**TINY["llama"], **V8K}, name="llama")
    return spec, make_setup(**CASES[k]), compare(spec, make_setup(**CASES[k]))


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_head_dropout_matches_peft_trace(k: int) -> None:
    spec, setup, cmp = _compare(k)
    assert abs(cmp.peak_error) < 0.007, cmp.to_dict()


def test_head_dropout_bytes_by_hand() -> None:
    """bf16 adapters, h 256, r 16, 2 x 512 tokens: mask 1 B + dropout output 2 B per element, lora_B's input 2·r."""
    spec = spec_from_hf_config({**TINY["llama"], **V8K}, name="llama")
    setup = make_setup(**CASES[2])
    assert head_dropout_saved_per_token(setup, 256) == 3 * 256
    assert head_adapter_saved_bytes(spec, setup) == (3 * 256 + 2 * 16) * 1024
    assert head_dropout_saved_per_token(make_setup(**{**CASES[2], "lora_dropout": 0.0}), 256) == 0
