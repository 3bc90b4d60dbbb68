"""Per-layer activations: the estimator's terms against what a real transformers layer saves.

Ground truth: ``saved_tensors_hooks`` on a small model of each family, run for real on the CPU in pure
16-bit and fp32 (no autocast: CPU and CUDA autocast lists differ; the tracer covers autocast). Dropout
is off here because CPU dropout keeps a mask in the input dtype where CUDA keeps a bool mask.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.measure import measured_layer_saved_bytes  # noqa: E402
from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.memory.activations import layer_saved  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402

CASES = [(fam, attn, prec) for fam in TINY if fam != "gpt2-dropout"
         for attn in ("sdpa", "eager") for prec in ("bf16", "fp32")
         if not (fam == "gemma2" and attn == "sdpa")          # transformers has no gemma2 sdpa
         and not (fam.startswith("falcon") and attn == "sdpa")]  # falcon passes a mask: the CPU takes the
#                                                                   math kernel; the tracer checks CUDA's


def _gqa(fam: str) -> bool:
    c = TINY[fam]
    return c.get("num_key_value_heads", c.get("num_attention_heads", 1)) < c.get("num_attention_heads", 1)


# fp32 + GQA under sdpa: CUDA runs the math kernel (no fused kernel takes fp32 with enable_gqa), the
# CPU picks per family; the tracer's CUDA emulation checks these (tests/trace/test_estimate_vs_trace.py).
CASES = [c for c in CASES if not (c[1] == "sdpa" and c[2] == "fp32" and _gqa(c[0]))]
# Fused qkv projections (phi3, gpt_neox): q is a strided view, and the CPU's flash kernel lays its output
# out like q, so HF's transpose().contiguous() copies it; CUDA's kernels allocate (b, s, a, d) and the
# copy is free. Nemotron's partial rotary ``torch.cat((q_embed, q_pass), dim=-1)`` makes q a contiguous
# (b, a, s, d) tensor: the same CPU-only copy. The tracer checks these on CUDA's terms.
CASES = [c for c in CASES if not (c[1] == "sdpa" and c[0] in ("phi3", "gpt_neox", "nemotron"))]


@pytest.mark.parametrize("fam,attn,prec", CASES, ids=["-".join(c) for c in CASES])
def test_layer_saved_bytes_match_real_module(fam: str, attn: str, prec: str) -> None:
    b, s = 2, 64
    cfg = TINY[fam]
    measured = measured_layer_saved_bytes(cfg, attn=attn, dtype=torch.bfloat16 if prec == "bf16" else torch.float32,
                                          b=b, s=s)
    spec = spec_from_hf_config(cfg, name=fam)
    est = layer_saved(spec, make_setup(precision=prec, attn=attn, seq_len=s, micro_batch=b), 1).total_bytes
    assert est == pytest.approx(measured, rel=0.005), (fam, attn, prec, est, measured)


def test_llama_sdpa_is_about_46_sbh_not_korthikanti_34() -> None:
    """HF Llama-2-7B shape (h=4096, i=11008, a=kv=32) in bf16 with sdpa keeps ≈ 45.6·s·b·h per layer:
    norms 2·(4+2) + norm outputs 2·2 + q,k,v,out 4·2 + MLP 4·2·i/h (= 21.5), plus rsqrt/lse rows."""
    from trainmem.model.catalog import load_catalog_spec

    spec = load_catalog_spec("llama-2-7b")
    setup = make_setup(precision="bf16", seq_len=2048)
    per = layer_saved(spec, setup, 0).total_bytes / (2048 * 4096)
    assert per == pytest.approx(12 + 4 + 8 + 21.5 + 2 * 4 / 4096 + 4 * 32 / 4096, rel=1e-6)
