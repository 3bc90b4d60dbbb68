"""LoRA (PEFT) traced on fake tensors, and the estimator against those traces.

The tracer applies ``peft.get_peft_model`` to the real transformers model (trace/lora.py): fp32 adapters,
a frozen 16-bit base (fp32 for the fp32 recipe), gradient checkpointing with
``enable_input_require_grads``. The estimator's LoRA terms (memory/activations.py ``_lora_terms`` and the
frame functions) must match the traced peak within 1 % median and 3 % max over these cases.
"""

from __future__ import annotations

import functools
import statistics

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.errors import UnsupportedError  # noqa: E402
from trainmem.memory.states import lora_param_count  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compare import compare  # noqa: E402
from trainmem.trace.support import check_traceable  # noqa: E402

QV = "q_proj,v_proj"
# Tiny 3-layer models (h 256, vocab 512): families llama/qwen2/mistral/gpt2, ranks 8-64, q,v and
# all-linear (and MLP-only, o/down), recompute none/full, amp-bf16/bf16/fp32, micro-batch 1-4.
CASES = [
    ("llama", dict(precision="bf16", seq_len=512, micro_batch=4, lora_rank=16, lora_targets=QV)),
    ("llama", dict(precision="amp-bf16", seq_len=512, micro_batch=4, lora_rank=16, lora_targets=QV)),
    ("llama", dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=64, lora_targets="all-linear")),
    ("llama", dict(precision="amp-bf16", seq_len=512, micro_batch=4, lora_rank=8, lora_targets="all-linear",
                   recompute="full")),
    ("llama", dict(precision="bf16", seq_len=512, micro_batch=4, lora_rank=32, lora_targets=QV, recompute="full")),
    ("llama", dict(precision="fp32", seq_len=256, micro_batch=2, lora_rank=16, lora_targets=QV)),
    ("llama", dict(precision="fp32", seq_len=256, micro_batch=2, lora_rank=8, lora_targets="all-linear",
                   recompute="full")),
    ("llama", dict(precision="bf16", seq_len=512, micro_batch=1, lora_rank=8, lora_targets="o_proj,down_proj")),
    ("llama-gqa", dict(precision="amp-bf16", seq_len=512, micro_batch=4, lora_rank=64, grad_accum=2)),
    ("qwen2", dict(precision="bf16", seq_len=512, micro_batch=4, lora_rank=32, lora_targets=QV)),
    ("qwen2", dict(precision="amp-bf16", seq_len=512, micro_batch=1, lora_rank=8, lora_targets="all-linear")),
    ("qwen2", dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=16, recompute="full")),
    ("mistral", dict(precision="bf16", seq_len=256, micro_batch=2, lora_rank=16, lora_targets="all-linear",
                     recompute="full")),
    ("mistral", dict(precision="amp-bf16", seq_len=256, micro_batch=3, lora_rank=16,
                     lora_targets="gate_proj up_proj down_proj")),
    ("mistral-window", dict(precision="amp-bf16", seq_len=256, micro_batch=4, lora_rank=32, lora_targets=QV)),
    ("gpt2", dict(precision="bf16", seq_len=256, micro_batch=4, lora_rank=16, lora_targets="c_attn")),
    ("gpt2", dict(precision="amp-bf16", seq_len=256, micro_batch=2, lora_rank=8, lora_targets="all-linear")),
    ("gpt2", dict(precision="fp32", seq_len=256, micro_batch=2, lora_rank=16, lora_targets="c_attn,c_proj")),
    ("gpt2", dict(precision="bf16", seq_len=256, micro_batch=4, lora_rank=32, lora_targets="all-linear",
                  recompute="full")),
    # families the LoRA terms were checked on after they were written (first run: qwen3's q/k norms,
    # GPT-NeoX/Falcon's parallel residual and two LayerNorms, Qwen2-MoE's shared expert were then fixed)
    ("qwen3", dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QV)),
    ("gpt_neox", dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets="query_key_value")),
    ("phi3", dict(precision="bf16", seq_len=256, micro_batch=4, lora_rank=32, lora_targets="all-linear")),
    ("falcon-new", dict(precision="amp-bf16", seq_len=256, micro_batch=4, lora_rank=16,
                        lora_targets="query_key_value,dense")),
    ("qwen2_moe", dict(precision="bf16", seq_len=256, micro_batch=2, lora_rank=8, lora_targets=QV)),
    ("llama", dict(precision="amp-fp16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QV)),
    ("llama", dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=16, lora_targets=QV, attn="eager")),
]
IDS = [f"{f}-{'-'.join(f'{k}={v}' for k, v in kw.items())}".replace(",", "+").replace(" ", "+") for f, kw in CASES]
# Known residuals: GPT-2's checkpoint recomputation with every linear adapted (-1.3 %: one 16-bit
# tensor of width h in the adapted c_proj's frame is not modelled); eager attention (+2.0 %: its
# backward's transient is full fine-tuning's, a little larger than a LoRA layer's).
# GPT-2 fp32 with c_attn+c_proj (-1.7 %): the trace's final LayerNorm backward holds three fp32 b·s·4h
# tensors the estimator does not place there (found when the final-norm backward was added; not yet
# explained).
TOL = {18: 0.02, len(CASES) - 1: 0.03,
       CASES.index(("gpt2", dict(precision="fp32", seq_len=256, micro_batch=2, lora_rank=16,
                                 lora_targets="c_attn,c_proj"))): 0.02}


@functools.lru_cache(maxsize=None)
def _compare(k: int):
    fam, kw = CASES[k]
    spec = spec_from_hf_config(TINY[fam], name=fam)
    return spec, make_setup(**kw), compare(spec, make_setup(**kw))


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_lora_estimate_matches_trace(k: int) -> None:
    spec, setup, cmp = _compare(k)
    assert abs(cmp.peak_error) < TOL.get(k, 0.01), cmp.to_dict()
    rows = {c: (e, t) for c, e, t, _ in cmp.rows()}
    # frozen 16-bit base + fp32 adapters, and Adam states for the adapters only: exact up to 512-B rounding
    for cat in ("parameters", "optimizer_states"):
        e, t = rows[cat]
        assert e == pytest.approx(t, rel=0.002, abs=16 * 1024), (cat, e, t)
    # the tracer adapted exactly the modules the estimator counts (PEFT's own count)
    assert cmp.trace.n_trainable_params == lora_param_count(spec, setup)


def test_lora_median_and_max() -> None:
    """Done means for LoRA (issue 6): median |error| <= 1 %, max <= 3 % over the traced cases."""
    errors = [abs(_compare(k)[2].peak_error) for k in range(len(CASES))]
    assert statistics.median(errors) <= 0.01 and max(errors) <= 0.03, errors


def test_qlora_and_other_engines_are_not_traced() -> None:
    spec = spec_from_hf_config(TINY["llama"], name="llama")
    with pytest.raises(UnsupportedError, match=r"cannot trace LoRA/QLoRA fine-tuning \(not traced yet\)"):
        check_traceable(spec, make_setup(lora_rank=8, qlora=True, seq_len=128))
    with pytest.raises(UnsupportedError, match="LoRA with the fsdp2 engine"):
        check_traceable(spec, make_setup(lora_rank=8, engine="fsdp2", gpus=2, seq_len=128))


@pytest.mark.parametrize("base_dtype", ["bfloat16", "float32"])
def test_what_one_peft_lora_linear_saves(base_dtype: str) -> None:
    """Real tensors, ``saved_tensors_hooks``: a PEFT LoRA linear over a frozen base keeps, per token, its
    own fp32 copy of x (16-bit base: 4·fin; fp32 base: x itself, nothing new) and the fp32 rank
    activation (4·r), not the base's input; the base weight and adapters are parameters."""
    import torch
    from peft import LoraConfig, get_peft_model

    fin, fout, rank, tokens = 64, 96, 8, 32
    dtype = getattr(torch, base_dtype)
    model = torch.nn.Sequential(torch.nn.Linear(fin, fout)).to(dtype)
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=16, target_modules=["0"]))
    assert all(p.dtype == torch.float32 for n, p in model.named_parameters() if "lora_" in n)
    x = torch.randn(tokens, fin, dtype=dtype, requires_grad=True)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and st.data_ptr() != x.untyped_storage().data_ptr():
            saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).sum().backward()
    x_copy = 4 * fin if dtype != torch.float32 else 0
    assert sum(saved.values()) == tokens * (x_copy + 4 * rank)
