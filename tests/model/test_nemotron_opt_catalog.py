"""The Nemotron and OPT catalog entries: exact totals (transformers' meta-device build, which
tests/model/test_catalog.py checks for every entry) against the sizes their papers publish."""

from __future__ import annotations

import pytest

from trainmem.model.catalog import load_catalog_spec

# OPT paper (Zhang et al. 2022, arXiv:2205.01068) Table 1 sizes; the exact counts are transformers' build
# (tied lm_head; 2048 + 2 learned positions; opt-350m's project_in/out 512 ↔ 1024 and no final layer norm).
OPT = {
    "opt-125m": (125_239_296, 125e6, 12, 768), "opt-350m": (331_196_416, 350e6, 24, 1024),
    "opt-1.3b": (1_315_758_080, 1.3e9, 24, 2048), "opt-2.7b": (2_651_596_800, 2.7e9, 32, 2560),
    "opt-6.7b": (6_658_473_984, 6.7e9, 32, 4096), "opt-13b": (12_853_473_280, 13e9, 40, 5120),
    "opt-30b": (29_974_540_288, 30e9, 48, 7168), "opt-66b": (65_719_701_504, 66e9, 64, 9216),
    "opt-175b": (174_604_468_224, 175e9, 96, 12288),
}


@pytest.mark.parametrize("name", sorted(OPT))
def test_opt_totals(name: str) -> None:
    exact, paper, layers, h = OPT[name]
    spec = load_catalog_spec(name)
    assert (spec.n_params, spec.num_layers, spec.hidden_size) == (exact, layers, h)
    # the paper's sizes are rounded (opt-350m's build lies 5 % under its label)
    assert abs(spec.n_params - paper) / paper < (0.06 if name == "opt-350m" else 0.03)
    assert spec.tie_word_embeddings and spec.intermediate_size == 4 * h and spec.vocab_size == 50272


def test_nemotron_totals_and_shapes() -> None:
    """Nemotron-4 340B (technical report, arXiv:2406.11704): 96 layers of h 18432, 96 heads, 8 KV heads, ffn
    73728, vocab 256000: 96 · (2·18432² + 2·18432·1536 + 2·18432·73728 + 4·18432) + 2·256000·18432 + 2·18432
    = 341,029,195,776 ("340B")."""
    spec = load_catalog_spec("nemotron-4-340b")
    h = 18432
    layer = 2 * h * h + 2 * h * 1536 + 2 * h * 73728 + 4 * h
    assert spec.n_params == 96 * layer + 2 * 256000 * h + 2 * h == 341_029_195_776
    assert (spec.head_dim, spec.num_kv_heads, spec.rotary_dim, spec.hidden_act) == (192, 8, 96, "relu2")
    mini = load_catalog_spec("nemotron-mini-4b")
    assert mini.n_params == 4_190_509_056 and (mini.head_dim, mini.rotary_dim) == (128, 64)
