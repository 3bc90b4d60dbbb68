"""LoRA over LLM.int8 base weights (``--load-in-8bit``, bitsandbytes 0.41: trainmem/memory/int8.py), hand-computed."""

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory import estimate
from trainmem.memory.int8 import int8_base_bytes, int8_forward_transient_bytes, int8_saved_bytes_per_token
from trainmem.setup import make_setup

H, I, L = 4096, 11008, 32  # Llama-2-7B
RUN = dict(precision="bf16", attn="flash", seq_len=4096, micro_batch=2, recompute="full", lora_rank=32,
           lora_targets="all-linear", gpu="A100-SXM-80G")


def test_weights_are_one_byte_plus_a_row_absmax():
    """Int8Params.cuda: CB (1 B per weight) + SCB (fp32 per output row, each tensor rounded to 512 B)."""
    spec, _ = build("llama-2-7b", load_in_8bit=True, **RUN)
    per_layer_weights = 4 * H * H + 3 * H * I
    rows = 4 * H + 2 * I + H  # q, k, v, o; gate, up; down
    assert int8_base_bytes(spec, L * per_layer_weights) == L * (per_layer_weights + 4 * rows)


def test_static_drops_by_one_byte_per_quantised_weight():
    """The int8 base holds 1 B where the bf16 base holds 2 (LM head and embeddings stay 16-bit)."""
    spec, bf16 = build("llama-2-7b", **RUN)
    _, int8 = build("llama-2-7b", load_in_8bit=True, **RUN)
    n_q = L * (4 * H * H + 3 * H * I)
    scb = L * 4 * (4 * H + 2 * I + H)
    assert estimate(spec, bf16).static_bytes - estimate(spec, int8).static_bytes == n_q - scb


def test_saved_per_token_is_each_input_once_and_a_cat_per_linear():
    """MatMul8bitLt keeps A (16-bit, once per distinct input: attn_in, mlp_in, mlp_act; the attention output is
    flash's own) and CAt (1 B per input element, one per linear): 2·(h + h + i) + (6·h + i)."""
    spec, s = build("llama-2-7b", load_in_8bit=True, **RUN)
    assert int8_saved_bytes_per_token(spec, s, 1, True, False) == 2 * (H + H + I) + 6 * H + I
    # layer 0 without an input gradient: nothing before the first adapter (q_proj) keeps CAt — q,k,v read
    # attn_in, the first adapted input, so o, gate, up, down keep theirs
    assert int8_saved_bytes_per_token(spec, s, 0, True, True) == 2 * (H + H + I) + 3 * H + I


def test_forward_transient_at_the_widest_linear():
    """CA, CAt, C32A (3 B per input element) + int32 out32 and the 16-bit output (6 B per output element): gate/up
    (h -> i) for Llama-2-7B."""
    spec, _ = build("llama-2-7b", load_in_8bit=True, **RUN)
    assert int8_forward_transient_bytes(spec, 100) == 100 * (3 * H + 6 * I)


@pytest.mark.parametrize("kw", [dict(), dict(lora_rank=8, qlora=True), dict(lora_rank=8, engine="fsdp2", gpus=2)])
def test_refused_without_lora_with_qlora_or_off_torch(kw):
    with pytest.raises(ConfigError, match="load-in-8bit"):
        make_setup(load_in_8bit=True, **kw)


def test_a_live_peft_model_over_an_int8_base_is_read_as_load_in_8bit():
    """trainmem.estimate(peft_model) reads config.quantization_config load_in_8bit (was refused)."""
    pytest.importorskip("peft")
    import trainmem
    from tests.test_python_api import _tiny_peft

    peft = _tiny_peft(r=4, targets=("q_proj", "v_proj"), dtype="bfloat16")
    peft.get_base_model().config.quantization_config = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    est = trainmem.estimate(peft)
    assert est.setup["load_in_8bit"] is True and est.setup["lora_rank"] == 4
    assert any(a.startswith("load_in_8bit: the base weights are LLM.int8") for a in est.assumptions)


def test_axolotl_config_with_load_in_8bit_reads_as_int8_lora(tmp_path):
    """axolotl ``adapter: lora`` + ``load_in_8bit: true`` (examples/llama-2/lora.yml) -> --load-in-8bit."""
    from trainmem.frameworks.readers import read_config

    f = tmp_path / "lora.yml"
    f.write_text("base_model: meta-llama/Llama-2-7b-hf\nload_in_8bit: true\nadapter: lora\nlora_r: 32\n"
                 "lora_target_linear: true\nmicro_batch_size: 2\nsequence_len: 4096\n")
    fields = read_config(str(f)).fields
    assert fields["load_in_8bit"] is True and fields["lora_rank"] == 32 and not fields.get("qlora")
