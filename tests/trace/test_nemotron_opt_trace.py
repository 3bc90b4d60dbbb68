"""Nemotron and OPT: the estimator against the tracer (its judge), within 0.5 % of the peak.

Toy models of each structure (tests/memory/tiny_configs.py: Nemotron's LayerNorm1P, relu2 MLP, partial RoPE
and GQA; OPT pre-LN with its dropout, and opt-350m's post-LN with projected embeddings) over the recipes
(bf16, amp-bf16, fp32; recompute none / full; torch and fsdp2 on a fake process group; sdpa and eager; LoRA;
micro-batch 1 and 2), plus one real catalog model per family: Nemotron-4-340B's real layer shapes cut to two
layers, and opt-125m whole. What the estimator models for these families, and the transformers code behind
each tensor: trainmem/memory/activations.py (``_layernorm1p``, ``plain_mlp_act_saved_per_elem``,
``relu2_backward_extra_per_elem``, ``fused_attention_backward_bytes``, ``recomputed_checkpoint_input_bytes``,
``opt_*``) and trainmem/memory/plan.py (``_EAGER_V_GRAD_ONLY``, ``_tied_head_embedding_part``).

Known residual, not covered here: OPT under LoRA with autocast, all-linear targets *and* full recompute
(+1.8 % on these toys: the LoRA recomputation frames are modelled on Llama's MLP)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import TINY  # noqa: E402
from tests.trace._specs import assert_matches_trace  # noqa: E402
from trainmem.errors import UnsupportedError  # noqa: E402
from trainmem.model.catalog import load_catalog_spec  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compare import compare  # noqa: E402

TOL = 0.005
_OPT_DROPOUT = dict(TINY["opt"], dropout=0.1)  # OPT's own default (CUDA's bool dropout masks)
_CONFIGS = {**TINY, "opt-dropout": _OPT_DROPOUT}
_S = dict(seq_len=512, micro_batch=4)

CASES = [
    ("nemotron", dict(_S, precision="bf16")),
    ("nemotron", dict(_S, precision="bf16", attn="eager", recompute="full")),  # + the checkpointed mask
    ("nemotron", dict(_S, precision="amp-bf16", recompute="full")),
    ("nemotron", dict(_S, precision="amp-bf16", engine="fsdp2", gpus=4)),
    ("nemotron", dict(precision="amp-bf16", seq_len=512, micro_batch=2, grad_accum=2)),  # relu2's fp32 backward
    ("nemotron", dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=8, lora_targets="all-linear")),
    ("opt-dropout", dict(_S, precision="amp-bf16")),
    ("opt-dropout", dict(_S, precision="bf16", attn="eager")),
    ("opt-dropout", dict(precision="amp-bf16", seq_len=512, micro_batch=2, engine="fsdp2", gpus=2, recompute="full")),
    ("opt", dict(precision="bf16", seq_len=512, micro_batch=1)),  # peaks at the optimizer step
    ("opt", dict(precision="amp-bf16", seq_len=512, micro_batch=2, lora_rank=8, recompute="full")),
    ("opt-350m", dict(_S, precision="amp-bf16")),
    ("opt-350m", dict(_S, precision="bf16", recompute="full")),
    ("opt-350m", dict(precision="bf16", seq_len=512, micro_batch=2, lora_rank=8, lora_targets="all-linear")),
]


def _check(spec, kw: dict):  # noqa: ANN001, ANN202
    return assert_matches_trace(spec, make_setup(**kw), TOL)


@pytest.mark.parametrize("fam,kw", CASES, ids=[f"{f}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for f, kw in CASES])
def test_estimate_matches_trace(fam: str, kw: dict) -> None:
    _check(spec_from_hf_config(_CONFIGS[fam], name=fam), kw)


def test_nemotron_4_340b_real_shapes_two_layers() -> None:
    """Nemotron-4-340B's layer (h 18432, 96 heads of 192, 8 kv heads, ffn 73728, vocab 256000), two of them, on
    64 FSDP2 ranks at its 4096-token context: the flash backward's expanded dk/dv and fp32 dq_accum and the
    fp32 relu2 backward at these widths are the step's peak."""
    spec = load_catalog_spec("nemotron-4-340b")
    spec = spec_from_hf_config({**spec.hf_config, "num_hidden_layers": 2}, name="nemotron-4-340b-2l")
    cmp = _check(spec, dict(precision="amp-bf16", seq_len=4096, micro_batch=2, engine="fsdp2", gpus=64,
                            gpu="H100-SXM-80G"))
    assert cmp.trace.peak_phase.startswith("backward")


def test_opt_125m_whole_model() -> None:
    """opt-125m as on the hub (12 pre-LN layers, 2048 + 2 learned positions, dropout 0.1, tied head) at its
    2048-token context; opt-350m's post-LN and projections are the toy ``opt-350m`` cases above (the whole
    opt-350m agrees within 0.02 % too, but takes three times as long to trace)."""
    cmp = _check(load_catalog_spec("opt-125m"), dict(precision="amp-bf16", seq_len=2048, micro_batch=2,
                                                     gpu="A100-SXM-80G"))
    assert cmp.trace.peak_phase.startswith("backward")


def test_what_the_tracer_cannot_run_is_one_line() -> None:
    spec = spec_from_hf_config(dict(TINY["opt"], layerdrop=0.1), name="opt-layerdrop")
    with pytest.raises(UnsupportedError, match=r"layerdrop\(0.1\)") as err:
        compare(spec, make_setup(precision="bf16", seq_len=64))
    assert "\n" not in str(err.value)
    nemotron = spec_from_hf_config(TINY["nemotron"], name="nemotron")
    for kw in (dict(engine="fsdp2", gpus=2, tp=2), dict(engine="fsdp2", gpus=2, pp=2, grad_accum=2)):
        with pytest.raises(UnsupportedError, match="nemotron") as err:
            compare(nemotron, make_setup(precision="bf16", seq_len=64, **kw))
        assert "\n" not in str(err.value)


def test_autocast_emulation_of_square_and_the_cuda_query() -> None:
    """CUDA autocast runs ``torch.square`` (``at::pow(self, 2)``, whose Tensor_Scalar overload is on the fp32 list)
    in fp32, and ``torch.is_autocast_enabled()`` without a device asks about CUDA, which the emulated CPU region
    stands in for (NemotronLayerNorm1P's ``_cast_if_autocast_enabled``); both restored on exit."""
    import torch

    from trainmem.trace.autocast import cuda_autocast

    x = torch.ones(4, 4, dtype=torch.bfloat16)
    orig = torch.is_autocast_enabled
    with cuda_autocast():
        assert not torch.is_autocast_enabled()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.is_autocast_enabled() and torch.is_autocast_enabled("cpu")
            assert torch.square(x).dtype == torch.float32
            with torch.autocast("cpu", enabled=False):  # transformers' maybe_autocast(enabled=False)
                assert not torch.is_autocast_enabled() and torch.square(x).dtype == torch.bfloat16
    assert torch.is_autocast_enabled is orig
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not torch.is_autocast_enabled()  # the real no-argument form: CUDA's state
