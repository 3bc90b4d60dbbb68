"""A family's layer is declared once, as data (trainmem/memory/layers/family.py): every described family has its
description, a new family is one description (registered here for a toy), and no term function asks which
family it is. Plus the size rule of trainmem/memory: no module over 600 lines.

The toy families reuse the tiny Llama's shapes (tests/memory/tiny_configs.py: h 256, 8 heads and 8 kv heads of
d 32, MLP width 688) under a model_type nothing else knows; the expected bytes are computed by hand."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import trainmem.memory
from tests.memory.tiny_configs import TINY
from trainmem.memory.activations import layer_saved
from trainmem.memory.layers import family as family_mod
from trainmem.memory.layers.family import FAMILIES, LayerFamily, layer_family, register_family
from trainmem.memory.layers.model_wide import recomputed_checkpoint_input_bytes
from trainmem.model.hf import SUPPORTED_MODEL_TYPES, spec_from_hf_config
from trainmem.model.vlm import VLM_MODEL_TYPES
from trainmem.setup import make_setup

MEMORY = Path(trainmem.memory.__file__).parent
LLAMA = spec_from_hf_config(TINY["llama"], name="llama-tiny")
TOY = dataclasses.replace(LLAMA, model_type="toy_family", name="toy-tiny")
BF16 = make_setup(precision="bf16", seq_len=512, micro_batch=2)  # T = 1,024 tokens, c = r = 2
T = 1024


def _per_token(spec, setup=BF16) -> dict[str, float]:
    return {t.name: t.bytes / T for t in layer_saved(spec, setup, 1).terms}


def test_every_described_family_has_its_description():
    """Each model_type trainmem describes by hand has its own entry (none falls back to the default silently);
    a vision-language model's layers are its text model's (model/vlm.py: the spec is the text family's)."""
    assert set(SUPPORTED_MODEL_TYPES) - set(VLM_MODEL_TYPES) - set(FAMILIES) == set()


def test_an_undeclared_family_is_a_llama_layer():
    assert layer_family(TOY) is family_mod.DEFAULT_FAMILY
    assert _per_token(TOY) == _per_token(LLAMA)


def test_a_new_family_is_one_description(monkeypatch):
    """Registering a description is all a family built from known ops needs. A Llama layer with Qwen3's q/k norms
    (``qk_norm="cast_back"``): per token, each of the 8 + 8 heads keeps the fp32 copy and the 16-bit normalised
    value of its 32 elements, (4 + 2)·32, plus one fp32 rsqrt: 196·16 = 3,136 B; nothing else changes."""
    monkeypatch.setitem(FAMILIES, "toy_family", LayerFamily(qk_norm="cast_back"))
    got, llama = _per_token(TOY), _per_token(LLAMA)
    assert got.pop("qk_norm") == 3136
    assert got == llama


def test_a_fused_qkv_description(monkeypatch):
    """GPT-2's attention on the Llama shape (``fused_qkv_linear``, ``sdpa_saves="fused_output"``): the one fused
    projection keeps one 16-bit input (2·256 = 512 B per token, not 3·512) and SDPA keeps the fused (b, s, 3h)
    output its q, k and v are views of (2·(256 + 2·256) = 1,536 B) in place of q, k, v (512 each)."""
    register_family("toy_family", LayerFamily(fused_qkv_linear=True, sdpa_saves="fused_output"))
    try:
        got, llama = _per_token(TOY), _per_token(LLAMA)
    finally:
        del FAMILIES["toy_family"]
    assert got["qkv_input"] == 512 and llama["qkv_input"] == 512  # (pure bf16: one shared input either way)
    assert got["qkv_fused_out"] == 1536 and not {"q", "k", "v"} & set(got)
    assert {n: v for n, v in got.items() if n != "qkv_fused_out"} == \
        {n: v for n, v in llama.items() if n not in ("q", "k", "v")}
    amp = make_setup(precision="amp-bf16", seq_len=512, micro_batch=2)
    monkeypatch.setitem(FAMILIES, "toy_family", LayerFamily(fused_qkv_linear=True))
    assert _per_token(TOY, amp)["qkv_input"] == 512  # autocast: one 16-bit cast, where Llama's three linears
    assert _per_token(LLAMA, amp)["qkv_input"] == 3 * 512  # each cast their own


def test_what_recompute_finds_held_is_declared(monkeypatch):
    """``norm_keeps_layer_input`` on a LayerNorm layer under full recompute: the checkpointed input (fp32 under
    autocast, 4·256 B per token) is not counted twice — always, only without autocast, or never."""
    ln = dataclasses.replace(TOY, norm="layernorm")
    amp = make_setup(precision="amp-bf16", seq_len=512, micro_batch=2, recompute="full")
    bf16 = make_setup(precision="bf16", seq_len=512, micro_batch=2, recompute="full")
    for keeps, want_amp, want_bf16 in (("always", 4 * 256 * T, 2 * 256 * T), ("without_autocast", 0, 2 * 256 * T),
                                       ("never", 0, 0)):
        monkeypatch.setitem(FAMILIES, "toy_family", LayerFamily(norm_keeps_layer_input=keeps))
        assert (recomputed_checkpoint_input_bytes(ln, amp), recomputed_checkpoint_input_bytes(ln, bf16)) == \
            (want_amp, want_bf16), keeps


def test_config_variants_resolve():
    """Falcon's new decoder architecture and OPT's post-LN are read from the config once, by the description."""
    old = spec_from_hf_config(TINY["falcon"], name="falcon-tiny")
    new = spec_from_hf_config(TINY["falcon-new"], name="falcon-new-tiny")
    assert not layer_family(old).kv_broadcast_copies and layer_family(old).parallel_mlp_input == "shared_norm"
    assert layer_family(new).kv_broadcast_copies and layer_family(new).parallel_mlp_input == "second_norm_same_input"
    pre, post = (spec_from_hf_config(TINY[n], name=n) for n in ("opt", "opt-350m"))
    assert (layer_family(pre).post_ln, layer_family(post).post_ln) == (False, True)
    assert layer_family(post).norm_keeps_layer_input == "without_autocast"


_READS_THE_DESCRIPTION = ("layers/norms.py", "layers/attention.py", "layers/mlp.py", "layers/lora.py",
                          "layers/model_wide.py", "layers/base.py", "activations.py", "gpt_oss_frames.py")


@pytest.mark.parametrize("rel", _READS_THE_DESCRIPTION)
def test_no_term_asks_which_family(rel):
    """The term modules read the description, never ``spec.model_type`` (only layers/family.py maps it)."""
    tree = ast.parse((MEMORY / rel).read_text(encoding="utf-8"))
    asks = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "model_type"]
    assert not asks, f"{rel} reads model_type at lines {asks}"


def test_no_module_in_memory_over_600_lines():
    long = {p.relative_to(MEMORY).as_posix(): n for p in sorted(MEMORY.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600}
    assert not long, f"modules over 600 lines: {long}"


def test_the_doc_carries_the_generated_table():
    """docs/layers.md's family table is ``families_markdown()``'s output (regenerate the doc when a description
    changes)."""
    doc = (MEMORY.parents[1] / "docs" / "layers.md").read_text(encoding="utf-8")
    assert family_mod.families_markdown() in doc


def test_which_linears_run_addmm_is_declared(monkeypatch):
    """torchtitan's op-SAC counts and saves ``aten.mm`` only: a linear whose description says it adds its bias in
    ``aten.addmm`` is neither (memory/op_sac.py reads ``addmm_bias``). A toy with a biased q/k/v and a config key
    saying *no* bias on the MLP: q, k, v addmm; o mm; gate, up, down addmm unless ``toy_no_bias`` is set."""
    from trainmem.memory.layers.family import Bias, LinearBiases
    from trainmem.memory.op_sac import block_linears
    no_bias = Bias(key="toy_no_bias", default=False, negate=True)
    monkeypatch.setitem(FAMILIES, "toy_family", LayerFamily(addmm_bias=LinearBiases(
        qkv=Bias(default=True), o=Bias(), up=no_bias, down=no_bias)))
    assert [ln.mm for ln in block_linears(TOY)] == [False] * 3 + [True] + [False] * 3
    flagged = dataclasses.replace(TOY, hf_config=dict(TOY.hf_config, toy_no_bias=True))
    assert [ln.mm for ln in block_linears(flagged)] == [False] * 3 + [True] * 4
    assert [ln.mm for ln in block_linears(LLAMA)] == [True] * 7  # (Llama: attention_bias, mlp_bias absent)
    biased = dataclasses.replace(LLAMA, hf_config=dict(LLAMA.hf_config, attention_bias=True))
    assert [ln.mm for ln in block_linears(biased)] == [False] * 4 + [True] * 3
