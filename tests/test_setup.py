"""Setup validation: every bad combination names the field, the value and the arithmetic."""

from __future__ import annotations

import pytest

from trainmem.errors import ConfigError
from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup, validate_for_model


def test_defaults_table() -> None:
    s = make_setup()
    assert (s.engine, s.precision, s.optimizer, s.seq_len, s.micro_batch, s.grad_accum, s.recompute,
            s.attn, s.gpus, s.dp, s.gpu, s.zero) == ("torch", "amp-bf16", "adamw", 2048, 1, 1, "none",
                                                      "sdpa", 1, 1, "H100-SXM-80G", 0)
    assert make_setup(engine="deepspeed").precision == "mixed-bf16"
    assert make_setup(engine="fsdp2", gpus=8).zero == 3


@pytest.mark.parametrize("kw,msg", [
    (dict(engine="megatron", dp=3, tp=2, gpus=8), "dp(3) * tp(2) * pp(1) * cp(1) != gpus(8)"),
    (dict(precision="mixed-bf16"), "mixed-bf16 is not a recipe of the torch engine; use amp-bf16 or bf16"),
    (dict(engine="deepspeed", precision="amp-bf16"), "amp-bf16 is not a recipe of the deepspeed engine"),
    (dict(engine="megatron", tp=3, gpus=8), "gpus(8) is not divisible by tp(3) * pp(1) * cp(1) = 3"),
    (dict(engine="fsdp2", zero=1, gpus=2), "zero(1) is not available on the fsdp2 engine"),
    (dict(engine="megatron", sp=True, gpus=2, dp=2), "--sp needs tp > 1"),
    (dict(micro_batch=0), "micro-batch: Input should be greater than or equal to 1"),
    (dict(precision="fp9"), "precision: Input should be"),
    (dict(precision="fp8"), "fp8 is modelled for megatron (Transformer Engine) and fsdp2"),
    (dict(engine="fsdp2", gpus=2, fp8_backend="te"), "--fp8-backend needs --precision fp8"),
    (dict(engine="megatron", precision="fp8", fp8_backend="torchao"), "Megatron's fp8 runs Transformer Engine"),
    (dict(loss="fused-ce", loss_chunks=4), "--loss-chunks needs --loss chunked or fused-linear"),
    (dict(attn="eager", attn_kernel="fa3"), "--attn-kernel fa3 is a fused 16-bit attention kernel"),
    (dict(precision="fp32", attn_kernel="triton"), "not with --attn eager or fp32"),
    (dict(attn="flash", precision="fp32"), "flash attention needs 16-bit compute"),
    (dict(engine="deepspeed", offload="optimizer+params", zero=2, gpus=2), "needs zero 3, got zero(2)"),
    (dict(qlora=True), "--qlora needs --lora-rank > 0"),
    (dict(engine="megatron", tp=2, cp=3, gpus=6, seq_len=1000), "seq_len(1000) is not divisible by 2 * cp(3)"),
])
def test_invalid_setups_name_the_arithmetic(kw: dict, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        make_setup(**kw)
    assert msg in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("model,kw,msg", [
    ("llama-2-7b", dict(engine="megatron", tp=3, gpus=3), "tp(3) does not divide num_attention_heads(32)"),
    ("llama-2-7b", dict(engine="megatron", pp=64, gpus=64), "pp(64) > num_layers(32)"),
    ("llama-2-7b", dict(engine="megatron", ep=2, gpus=2), "ep(2) needs a mixture-of-experts model"),
    ("mixtral-8x7b", dict(engine="megatron", ep=3, gpus=3), "ep(3) does not divide num_experts(8)"),
    ("gpt2", dict(seq_len=4096), "seq_len(4096) > max_position_embeddings(1024)"),
    ("gemma-2-9b", dict(), "gemma2 has no sdpa implementation"),
    ("gpt-oss-20b", dict(attn="sdpa"), "gpt_oss has no sdpa implementation"),
    ("gpt-oss-20b", dict(engine="megatron", attn="eager"), "gpt_oss under the megatron engine is not modelled"),
])
def test_model_dependent_checks(model: str, kw: dict, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_for_model(make_setup(**kw), resolve_model(model))
    assert msg in str(e.value)
