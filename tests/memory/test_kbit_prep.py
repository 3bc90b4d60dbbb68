"""``--kbit-prep`` (trainmem/memory/kbit_prep.py): the frozen 16-bit weights cast to fp32, hand-computed for
Qwen2.5-0.5B and checked against PEFT's own ``prepare_model_for_kbit_training`` run on a tiny Qwen2 whose decoder
linears carry a parameter class named ``Params4bit`` (as bitsandbytes' 4-bit weights are, which PEFT skips by that
name); the stacks' defaults read from TRL's, axolotl's, LLaMA-Factory's and ms-swift's sources."""

from __future__ import annotations

import pytest

import trainmem
from trainmem.api import build
from trainmem.memory.kbit_prep import kbit_prep_fp32_extra_bytes, kbit_prep_upcast_params, rank_norm_params
from trainmem.memory.states import rank_params

QWEN05 = {"lora_rank": 8, "qlora": True, "recompute": "full", "precision": "bf16", "seq_len": 512}


def _peak(**fields: object) -> int:
    return trainmem.estimate("qwen2.5-0.5b", **fields).peak_allocated_bytes


def test_qwen2_5_0_5b_by_hand() -> None:
    # Qwen2.5-0.5B: hidden 896, 24 layers, vocab 151,936, tied head; q/k/v biases 896 + 128 + 128.
    emb = 151_936 * 896                      # 136,134,656 (the head is the same tensor)
    norms = 24 * 2 * 896 + 896               # 43,904
    biases = 24 * (896 + 128 + 128)          # 27,648
    spec, s = build("qwen2.5-0.5b", **QWEN05, kbit_prep="peft")
    rp = rank_params(spec, s)
    assert kbit_prep_upcast_params(spec, s, rp) == emb + norms + biases == 136_206_208
    assert rank_norm_params(spec, s, rp) == norms
    # the peak (the backward's start, every layer's checkpointed input alive) moves by the fp32 copies' 2 B each and
    # the fp32 residual stream's checkpoints, 2 B more per element: 512 tokens x 896 x 24 layers; up to the
    # parameter block's 512-B rounding (the caching allocator)
    ckpt = 2 * 512 * 896 * 24                # 22,020,096
    assert abs(_peak(**QWEN05, kbit_prep="peft") - _peak(**QWEN05) - (2 * 136_206_208 + ckpt)) < 512
    # norms-fp32: the norms' 2 B more and the checkpoints of layers 1..23 (layer 0 reads the bf16 embedding)
    assert abs(_peak(**QWEN05, kbit_prep="norms-fp32") - _peak(**QWEN05) - (2 * 43_904 + ckpt * 23 // 24)) < 512
    assert _peak(**QWEN05, kbit_prep="none") == _peak(**QWEN05)
    assert kbit_prep_fp32_extra_bytes(1000) == 2000


def test_checkpointed_inputs_fp32() -> None:
    from trainmem.memory.layers.model_wide import checkpoint_input_elem_bytes
    for prep, first, later in (("none", 2, 2), ("norms-fp32", 2, 4), ("peft", 4, 4)):
        spec, s = build("qwen2.5-0.5b", **QWEN05, kbit_prep=prep)
        assert (checkpoint_input_elem_bytes(spec, s, 0), checkpoint_input_elem_bytes(spec, s, 5)) == (first, later)


def test_unquantized_lora_base_all_fp32() -> None:
    # without --qlora PEFT's cast takes every frozen 16-bit parameter: the whole base, 2 B more each
    spec, s = build("qwen2.5-0.5b", lora_rank=8, precision="bf16", kbit_prep="peft")
    rp = rank_params(spec, s)
    assert kbit_prep_upcast_params(spec, s, rp) == rp.total - rp.trainable == spec.params.total


def test_prepare_model_for_kbit_training_itself() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from trainmem.model.hf import spec_from_hf_config

    cfg = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)

    class Params4bit(torch.nn.Parameter):  # PEFT skips a parameter by this class name (peft/utils/other.py)
        pass

    for layer in model.model.layers:
        for m in layer.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight = Params4bit(m.weight.data, requires_grad=False)
    model.is_loaded_in_4bit = True
    peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    fp32 = sum(p.numel() for p in model.parameters() if p.dtype == torch.float32)
    norm = sum(p.numel() for n, p in model.named_parameters() if "norm" in n and p.ndim == 1)  # upcast_layernorm

    spec = spec_from_hf_config(cfg.to_dict(), name="tiny-qwen2")
    _, s = build("llama-3.1-8b", lora_rank=4, qlora=True, precision="bf16", kbit_prep="peft")
    s = s.model_copy(update={"lora_targets": ("q_proj", "v_proj")})
    rp = rank_params(spec, s)
    assert fp32 == kbit_prep_upcast_params(spec, s, rp) == 64 * 256 * 2 + 5 * 64 + 2 * (64 + 32 + 32)
    assert norm == rank_norm_params(spec, s, rp) == 5 * 64


def test_stack_defaults_from_the_frameworks() -> None:
    _, ts = build("llama-3.1-8b", stack="trl", lora_rank=8, qlora=True)
    assert (ts.kbit_prep, ts.adapter_dtype) == ("none", "bf16")  # trl 1.16.0: adapters cast to bf16, no prep
    _, ts = build("llama-3.1-8b", stack="trl", lora_rank=8)
    assert ts.adapter_dtype == "fp32"  # (an unquantized base: PEFT's upcast stays)
    for stack in ("axolotl", "llama-factory", "ms-swift"):
        _, ts = build("llama-3.1-8b", stack=stack, lora_rank=8, qlora=True)
        assert ts.kbit_prep == "none", stack
    _, ts = build("llama-3.1-8b", stack="axolotl", lora_rank=8, qlora=True, kbit_prep="peft")
    assert ts.kbit_prep == "peft"  # the flag wins


def test_trl_installed_casts_quantized_adapters_to_bf16() -> None:
    trl = pytest.importorskip("trl")
    from pathlib import Path
    text = (Path(trl.__file__).parent / "trainer" / "sft_trainer.py").read_text()
    assert "prepare_model_for_kbit_training(" not in text and "peft_module_casting_to_bf16(" not in text
    assert "if _is_quantized_model:" in text and "param.data = param.data.to(torch.bfloat16)" in text


@pytest.mark.parametrize(("fields", "needle"), [
    ({"kbit_prep": "peft"}, "needs LoRA"),
    ({"lora_rank": 8, "qlora": True, "engine": "fsdp2", "gpus": 2, "kbit_prep": "peft"}, "--engine torch"),
    ({"lora_rank": 8, "precision": "fp32", "kbit_prep": "norms-fp32"}, "there are none"),
])
def test_refused(fields: dict, needle: str) -> None:
    from trainmem.errors import TrainmemError
    with pytest.raises(TrainmemError, match=needle):
        build("qwen2.5-0.5b", **fields)


def test_cli_bad_value_is_one_line(capsys) -> None:
    from trainmem.cli import main
    rc = main(["estimate", "qwen2.5-0.5b", "--lora-rank", "8", "--kbit-prep", "fp32"])
    err = capsys.readouterr().err
    assert rc == 2 and "kbit-prep" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _tiny_qwen2_4bit(torch, transformers):  # noqa: ANN001, ANN202
    """A tiny Qwen2 in bf16 whose decoder linears behave as bitsandbytes' Linear4bit.forward (0.45.0,
    bitsandbytes/nn/modules.py): input cast to the compute dtype, output back to the input's dtype, a bias cast to
    the input's dtype; the weight a parameter class named Params4bit (what PEFT skips)."""
    cfg = transformers.Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=256, tie_word_embeddings=False,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16)

    class Params4bit(torch.nn.Parameter):
        pass

    class Linear4bit(torch.nn.Linear):
        def forward(self, x):  # noqa: ANN001, ANN202
            if self.bias is not None and self.bias.dtype != x.dtype:
                self.bias.data = self.bias.data.to(x.dtype)
            inp_dtype = x.dtype
            x = x.to(torch.bfloat16)
            bias = None if self.bias is None else self.bias.to(torch.bfloat16)
            return torch.nn.functional.linear(x, self.weight, bias).to(inp_dtype)

    for layer in model.model.layers:
        for m in layer.modules():
            if isinstance(m, torch.nn.Linear):
                m.__class__ = Linear4bit
                m.weight = Params4bit(m.weight.data, requires_grad=False)
    model.is_loaded_in_4bit = True
    return model


def _layer_input_dtypes(torch, model) -> list:  # noqa: ANN001
    seen: list = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda _m, a, k: seen.append((a[0] if a else k["hidden_states"]).dtype),
                                        with_kwargs=True)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # HF Trainer bf16=True (accelerate's autocast)
        model(input_ids=torch.randint(0, 256, (1, 16)), labels=torch.randint(0, 256, (1, 16)))
    return seen


def test_peft_prep_makes_every_layer_read_fp32() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    model = _tiny_qwen2_4bit(torch, transformers)
    assert _layer_input_dtypes(torch, model) == [torch.bfloat16] * 3  # none: a bf16 stream
    model = _tiny_qwen2_4bit(torch, transformers)
    peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    assert _layer_input_dtypes(torch, model) == [torch.float32] * 3  # peft: checkpoint_input_elem_bytes 4
    model = _tiny_qwen2_4bit(torch, transformers)
    for name, p in model.named_parameters():  # LLaMA-Factory upcast_layernorm (model_utils/checkpointing.py)
        if p.ndim == 1 and "norm" in name:
            p.data = p.data.to(torch.float32)
    # norms-fp32: layer 0 reads the bf16 embedding, its fp32 norm output makes the stream fp32 after it (the
    # later layers' fp32 inputs are among what kbit_prep.py lists as not modelled)
    assert _layer_input_dtypes(torch, model) == [torch.bfloat16, torch.float32, torch.float32]


def test_llama_factory_upcast_layernorm_is_read(tmp_path) -> None:
    from trainmem.frameworks.readers import read_config
    path = tmp_path / "qlora.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\nfinetuning_type: lora\nquantization_bit: 4\n"
                    "upcast_layernorm: true\nbf16: true\ncutoff_len: 512\n")
    f = read_config(str(path))
    assert f.fields["kbit_prep"] == "norms-fp32" and ("kbit_prep norms-fp32", "upcast_layernorm") in f.read
    path.write_text(path.read_text().replace("upcast_layernorm: true\n", ""))
    assert "kbit_prep" not in read_config(str(path)).fields  # the stack's none (upcast_layernorm=False)


@pytest.mark.parametrize("prep", ["peft", "norms-fp32", "none"])
def test_live_model_reads_the_upcast(prep: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    from trainmem.live_model import read_live_model
    model = _tiny_qwen2_4bit(torch, transformers)
    if prep == "peft":
        peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    elif prep == "norms-fp32":
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.data = p.data.to(torch.float32)
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    live = read_live_model(model)
    assert live.fields["qlora"] is True and live.fields.get("kbit_prep", "none") == prep
    assert live.fields["precision"] == "bf16"  # (peft: from the compute dtype, not the fp32 embeddings)
