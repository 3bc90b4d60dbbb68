"""fp8 (torchao Float8Linear, tensorwise) under --compile, and FSDP2's float8 all-gather (trainmem/memory/fp8_compile.py).

Hand-computed from the saved set the min-cut partitioner chose for torchao 0.7.0 and 0.11.0 (torch 2.13), and, where
torchao is importable, against the partitioner itself (trainmem/trace/compiled.py on a tiny llama block)."""

from __future__ import annotations

import pytest

from tests.memory.tiny_configs import TINY
from trainmem.errors import ConfigError
from trainmem.memory.compile import compiled_layer_saved
from trainmem.memory.estimate import estimate
from trainmem.memory.fp8_compile import fsdp_float8_gathered_bytes
from trainmem.memory.plan import kept_per_layer
from trainmem.model.catalog import load_catalog_spec
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup, validate_for_model

B, S = 2, 8192


def _fp8(**kw):  # noqa: ANN003, ANN202
    return make_setup(engine="fsdp2", gpus=8, precision="fp8", compile=True, micro_batch=B, seq_len=S, **kw)


def _base(s):  # noqa: ANN001, ANN202 - estimate.py's swap: an fp8 run simulated on its 16-bit base recipe
    return s.model_copy(update={"precision": "amp-bf16"})


def test_llama_8b_compiled_fp8_layer_by_hand() -> None:
    """llama-3.1-8b, per token: input 2·4096, rsqrt 4 + 4, q 2·4096, k and v 2·1024 each, attention output 2·4096,
    logsumexp 4·32, o_proj's output 2·4096, gate and up 2·14336 each, o_proj's fp8 input 1·4096 = 98,440 B
    (the partitioner's, traced at b 2 × s 8192 on fake tensors); bf16 compiled: 139,400 (+ q/k/v, mlp and down
    inputs 8192 + 8192 + 28672, − the fp8 copy)."""
    spec = load_catalog_spec("llama-3.1-8b")
    s = _base(_fp8(recompute="none"))
    fp8 = compiled_layer_saved(spec, s, 0, fp8=True).total_bytes
    bf16 = compiled_layer_saved(spec, s, 0).total_bytes
    assert fp8 == 98_440 * B * S
    assert bf16 == 139_400 * B * S


def test_op_sac_compiled_fp8_same_as_bf16() -> None:
    """torchtitan's op-SAC policy sees aten.mm on the Float8Tensor subclass: the same matmul outputs are saved
    (55,424 B per token per layer traced with torchao 0.7.0, with and without 9dec370's aten.abs)."""
    spec = load_catalog_spec("llama-3.1-8b")
    kept = kept_per_layer(spec, _base(_fp8(recompute="selective")))
    assert kept[0] == 55_424 * B * S


def test_fsdp_float8_all_gather_by_hand() -> None:
    """A llama-3.1-8b unit: 218,103,808 linear weights (4096·(4096+1024+1024+4096) + 3·4096·14336) gathered at 1 B,
    two RMSNorm weights (8192) at 2 B; the all-gather buffer at the peak is that, against 436,224,000 bf16."""
    assert fsdp_float8_gathered_bytes(218_103_808 + 8192, 218_103_808) == 218_120_192
    spec = load_catalog_spec("llama-3.1-8b")
    kw = dict(engine="fsdp2", gpus=32, precision="fp8", compile=True, micro_batch=B, seq_len=S, recompute="selective",
              gpu="H200-141G")
    on = estimate(spec, make_setup(fp8_allgather=True, **kw))
    off = estimate(spec, make_setup(**kw))
    assert off.breakdown_at_peak_bytes["communication_buffers"] == 436_224_000
    assert on.breakdown_at_peak_bytes["communication_buffers"] == 218_120_192


def test_refusals() -> None:
    with pytest.raises(ConfigError, match="--fp8-allgather needs"):
        make_setup(engine="fsdp2", precision="amp-bf16", fp8_allgather=True)
    gpt2 = spec_from_hf_config(TINY["gpt2"], name="gpt2")
    with pytest.raises(ConfigError, match="fp8 linears on gpt2"):
        validate_for_model(make_setup(engine="fsdp2", precision="fp8", compile=True), gpt2)
    llama = spec_from_hf_config(TINY["llama"], name="llama")
    with pytest.raises(ConfigError, match="fp8-backend te"):
        validate_for_model(make_setup(engine="fsdp2", precision="fp8", fp8_backend="te", compile=True), llama)


def test_traced_by_the_partitioner() -> None:
    """The tiny llama block compiled with Float8Linear (torchao, where installed): the partitioner's saved set =
    the formula (h 256, 8 heads of 32, 2 kv heads, i 688: 5,352 B per token without the 0-d scales)."""
    pytest.importorskip("torchao.float8")
    pytest.importorskip("transformers")
    from trainmem.trace.compiled import trace_compiled_layer

    spec = spec_from_hf_config(TINY["llama-gqa"], name="llama-gqa")
    s = make_setup(engine="fsdp2", precision="fp8", compile=True, micro_batch=2, seq_len=64)
    r = trace_compiled_layer(spec, s)
    scalars = sum(n for shape, _, n in r.tensors if not shape)
    assert r.saved_bytes - scalars == 5_352 * 128 == r.estimate_bytes


_TOML = """[model]
name = "llama3"
flavor = "8B"
converters = ["float8"]

[training]
local_batch_size = 2
seq_len = 8192

[compile]
enable = true

[float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true
force_recompute_fp8_weight_in_bwd = true
"""


def test_torchtitan_reader_float8_all_gather(tmp_path) -> None:
    """The H200 benchmark's flags (torchtitan bcdeaa37 benchmarks/llama3_8b_h200_2025-06_torchtitan.md) as a TOML:
    --fp8-allgather; precompute / force_recompute read, no memory effect; 0.2.2's [quantize.linear.float8] too."""
    from trainmem.frameworks.readers import read_config

    p = tmp_path / "h200.toml"
    p.write_text(_TOML)
    f = read_config(str(p)).fields
    assert (f["precision"], f["fp8_allgather"], f["compile"]) == ("fp8", True, True)
    p.write_text(_TOML.replace("[float8]", "[quantize.linear.float8]"))
    assert read_config(str(p)).fields["fp8_allgather"] is True
    p.write_text(_TOML.replace("enable_fsdp_float8_all_gather = true", "enable_fsdp_float8_all_gather = false"))
    assert "fp8_allgather" not in read_config(str(p)).fields


def test_torchtitan_export_float8_all_gather() -> None:
    """torchtitan 0.2.2 config/job_config.py Float8Linear: enable_fsdp_float8_all_gather and
    precompute_float8_dynamic_scale_for_fsdp under [quantize.linear.float8]."""
    from trainmem.export.common import ExportTarget
    from trainmem.export.torchtitan import job_config

    spec = load_catalog_spec("llama-3.1-8b")
    kw = dict(engine="fsdp2", gpus=8, precision="fp8", micro_batch=2, seq_len=8192, recompute="selective")
    on = job_config(spec, make_setup(fp8_allgather=True, **kw), ExportTarget("llama-3.1-8b", 1, 8))
    off = job_config(spec, make_setup(**kw), ExportTarget("llama-3.1-8b", 1, 8))
    f8 = on["quantize.linear.float8"]
    assert f8["enable_fsdp_float8_all_gather"] is True and f8["precompute_float8_dynamic_scale_for_fsdp"] is True
    assert "enable_fsdp_float8_all_gather" not in off["quantize.linear.float8"]
