"""LoRA on the output head (``--lora-targets ...,lm_head``) and bf16 adapters (``--adapter-dtype bf16``), traced
through PEFT itself on fake tensors (trace/lora.py: ``get_peft_model(..., autocast_adapter_dtype=False)`` with
the adapters created in bf16), against the estimate (memory/lora_head.py, activations.py ``_lora_adapter_terms``).

Head cases use a vocabulary of 8192 on the tiny 3-layer models (h 256), so the head's b·s·V tensors are the
largest of the step and its forward and backward are where the peak is decided."""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.memory.states import lora_param_count  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compare import compare  # noqa: E402

QVH = "q_proj,v_proj,lm_head"
V8K = {"vocab_size": 8192}
CASES = [
    # the head: fp32 adapters on a bf16 base (no autocast / autocast), bf16 adapters, fp32
    ("llama", V8K, dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH)),
    ("llama", V8K, dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH)),
    ("llama", V8K, dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH,
                        adapter_dtype="bf16")),
    ("llama", V8K, dict(precision="fp32", seq_len=256, micro_batch=2, lora_rank=16, lora_targets=QVH)),
    ("llama", {}, dict(precision="bf16", seq_len=512, micro_batch=4, lora_rank=16, lora_targets=QVH)),
    # the head called per chunk (torchtune's chunked output), and under the fused cross-entropy (a small loss
    # backward: the head's own backward is the peak of the backward there)
    ("llama", V8K, dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH, loss="chunked")),
    ("llama", V8K, dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH,
                        loss="chunked")),
    ("llama", V8K, dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH,
                        adapter_dtype="bf16", loss="chunked", loss_chunks=4)),
    ("llama", V8K, dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH, loss="fused-ce")),
    ("llama", V8K, dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH,
                        loss="fused-ce")),
    ("llama", V8K, dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QVH,
                        adapter_dtype="bf16", loss="fused-ce")),
    # tied embeddings: the adapter wraps the head alone (PEFT warns), the base weight stays the embedding's
    ("qwen2", V8K, dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=8, lora_targets=QVH)),
    ("gpt2", {"vocab_size": 4096}, dict(precision="bf16", seq_len=256, micro_batch=4, lora_rank=16,
                                        lora_targets="c_attn,lm_head")),
    # bf16 adapters in the layers: lora_A keeps x itself (shared by the adapters reading it), no weight copies
    ("llama", {}, dict(precision="bf16", seq_len=512, micro_batch=4, lora_rank=16, lora_targets="q_proj,v_proj",
                       adapter_dtype="bf16")),
    ("llama", {}, dict(precision="amp-bf16", seq_len=512, micro_batch=4, lora_rank=16, lora_targets="all-linear",
                       adapter_dtype="bf16")),
    ("qwen2", {}, dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets="all-linear",
                       adapter_dtype="bf16")),
    ("gpt2", {}, dict(precision="bf16", seq_len=256, micro_batch=4, lora_rank=16, lora_targets="c_attn,c_proj",
                      adapter_dtype="bf16")),
    ("mistral", {}, dict(precision="amp-bf16", seq_len=256, micro_batch=3, lora_rank=16,
                         lora_targets="gate_proj up_proj down_proj", adapter_dtype="bf16")),
    ("llama", {}, dict(precision="bf16", seq_len=512, micro_batch=4, lora_rank=16, lora_targets="all-linear",
                       adapter_dtype="bf16", recompute="full")),
]
IDS = [f"{f}-{'-'.join(f'{k}={v}' for k, v in kw.items())}".replace(",", "+").replace(" ", "+") for f, _, kw in CASES]
#: Known residual: bf16 adapters with checkpointing (+3.6 %): the estimate's forward bound of a checkpointed layer
#: (its saved tensors + its frames, memory/walk.py ``fwdtmp``) is the peak there; the traced forward stays below
#: the backward. Over-, not under-prediction.
#: And within 0.6 % below: bf16 adapters with 4 loss chunks, fp32 adapters under the fused cross-entropy (the
#: head's forward, then the peak, keeps a little more than the estimate's 8 / 4 B per logit: not yet explained).
TOL = {len(CASES) - 1: 0.04, **{i: 0.007 for i, (_, _, kw) in enumerate(CASES)
                                if kw.get("loss") == "fused-ce" or kw.get("loss_chunks") == 4}}


@functools.lru_cache(maxsize=None)
def _compare(k: int):
    fam, over, kw = CASES[k]
    spec = spec_from_hf_config({**TINY[fam], **over}, name=fam)
    return spec, make_setup(**kw), compare(spec, make_setup(**kw))


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_estimate_matches_peft_trace(k: int) -> None:
    spec, setup, cmp = _compare(k)
    assert abs(cmp.peak_error) < TOL.get(k, 0.002), cmp.to_dict()
    rows = {c: (e, t) for c, e, t, _ in cmp.rows()}
    for cat in ("parameters", "optimizer_states"):  # adapters (fp32 or bf16) and their AdamW states
        e, t = rows[cat]
        assert e == pytest.approx(t, rel=0.002, abs=16 * 1024), (cat, e, t)
    assert cmp.trace.n_trainable_params == lora_param_count(spec, setup)
