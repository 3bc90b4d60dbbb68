"""torchtitan exporter: torchtitan.toml parsed by torchtitan 0.2.2's own ConfigManager (unknown keys refused;
Literal values checked), its parallel degrees accepted by torchtitan's ParallelDims, the batch arithmetic of its
trainer (train.py: accumulation = global / (local x dp); under PP local / pipeline_parallel_microbatch_size
micro-batches), and the generated flavor's MLP width through torchtitan's FeedForward rounding."""

from __future__ import annotations

import ast
import sys
import tomllib
import types
from pathlib import Path

import pytest

from tests.export.cases import bash_syntax_ok, export, written
from tests.export.engines import _torchtitan_config_only, require, torchtitan_job_config
from trainmem.api import build
from trainmem.export import can_export
from trainmem.export.torchtitan import llama3_args


def torchtitan_ffn(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """torchtitan 0.2.2 models/llama3/model/model.py FeedForward: hidden_dim = 4·dim, then ``int(2·h/3)``,
    × ffn_dim_multiplier, rounded up to multiple_of."""
    hidden = int(2 * 4 * dim / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def batch(cfg) -> tuple[int, int]:  # noqa: ANN001
    """(gradient accumulation steps, pipeline micro-batches) as torchtitan's trainer derives them."""
    t, p = cfg.training, cfg.parallelism
    dp = p.data_parallel_replicate_degree * p.data_parallel_shard_degree
    assert t.global_batch_size % (t.local_batch_size * dp) == 0  # train.py:202-209
    accum = t.global_batch_size // (t.local_batch_size * dp)
    if p.pipeline_parallel_degree > 1:
        assert t.local_batch_size % p.pipeline_parallel_microbatch_size == 0  # pipeline_parallel.py:189
        return accum, t.local_batch_size // p.pipeline_parallel_microbatch_size
    return accum, 1


def parallel_dims(cfg, world: int) -> None:  # noqa: ANN001
    """torchtitan's own ParallelDims validation of the degrees for this world size."""
    with _torchtitan_config_only():
        from torchtitan.distributed.parallel_dims import ParallelDims

        p = cfg.parallelism
        ParallelDims(dp_replicate=p.data_parallel_replicate_degree, dp_shard=p.data_parallel_shard_degree,
                     cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                     ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=world)


def test_fsdp_zero3_fp8_selective(tmp_path: Path) -> None:
    """Hand-computed: 8 GPUs, micro-batch 2, accumulation 4: local 2, global 2 * 4 * 8 = 64."""
    _, s, files = export("llama-3.1-8b", "torchtitan", 1, 8, engine="fsdp2", precision="fp8", recompute="selective",
                         micro_batch=2, grad_accum=4)
    assert "trainmem_flavor.py" not in files  # Llama-3.1-8B is torchtitan's own "8B" flavor
    out = written(files, tmp_path)
    cfg = torchtitan_job_config(out / "torchtitan.toml")
    assert (cfg.model.name, cfg.model.flavor, cfg.model.converters) == ("llama3", "8B", ["quantize.linear.float8"])
    assert (cfg.training.local_batch_size, cfg.training.global_batch_size, cfg.training.seq_len) == (2, 64, 2048)
    assert batch(cfg) == (4, 1)
    assert cfg.parallelism.data_parallel_shard_degree == 8 and cfg.parallelism.fsdp_reshard_after_forward == "always"
    assert (cfg.activation_checkpoint.mode, cfg.activation_checkpoint.selective_ac_option) == ("selective", "op")
    assert cfg.training.mixed_precision_param == "bfloat16" and cfg.training.dtype == "float32"
    assert cfg.optimizer.implementation == "foreach" and cfg.quantize.linear.float8.recipe_name == "tensorwise"
    assert cfg.compile.enable is False
    parallel_dims(cfg, 8)
    assert "torchrun --nnodes 1 --nproc-per-node 8 -m torchtitan.train --job.config_file torchtitan.toml" in \
        files["launch.sh"]
    bash_syntax_ok(files["launch.sh"])


def test_tp_pp_interleaved_custom_flavor(tmp_path: Path) -> None:
    """Llama-2-7B (not a torchtitan flavor) on 2 x 8: tp 2, pp 2 x 2 chunks, dp 4, micro-batch 1, 8 pipeline
    micro-batches: local 8, global 32; 32 layers in 4 parts of 8, embedding first, norm and output last."""
    spec, s, files = export("llama-2-7b", "torchtitan", 2, 8, engine="fsdp2", tp=2, pp=2, vpp=2, grad_accum=8,
                            recompute="full", offload="none")
    out = written(files, tmp_path)
    cfg = torchtitan_job_config(out / "torchtitan.toml")
    assert cfg.model.flavor == "trainmem" and cfg.experimental.custom_import == "trainmem_flavor"
    assert batch(cfg) == (1, 8) and cfg.training.global_batch_size == 32
    p = cfg.parallelism
    assert (p.tensor_parallel_degree, p.pipeline_parallel_degree, p.data_parallel_shard_degree) == (2, 2, 4)
    assert p.pipeline_parallel_schedule == "Interleaved1F1B" and p.fsdp_reshard_after_forward == "never"
    parts = p.module_fqns_per_model_part
    assert len(parts) == 4 and parts[0][:2] == ["tok_embeddings", "layers.0"] and parts[-1][-2:] == ["norm", "output"]
    assert sum(len([m for m in part if m.startswith("layers.")]) for part in parts) == 32
    assert cfg.activation_checkpoint.mode == "full"
    parallel_dims(cfg, 16)
    flavor = files["trainmem_flavor.py"]
    ast.parse(flavor)
    args = llama3_args(spec)
    assert torchtitan_ffn(args["dim"], args["multiple_of"], args["ffn_dim_multiplier"]) == spec.intermediate_size
    assert 'export PYTHONPATH="$PWD' in files["launch.sh"]
    _run_flavor_module(flavor, spec.intermediate_size)


def _run_flavor_module(source: str, width: int) -> None:
    """Execute trainmem_flavor.py against torchtitan's own TransformerModelArgs field names (read from the
    installed args.py) and check the registered flavor."""
    require("torchtitan")
    import importlib.util

    found = importlib.util.find_spec("torchtitan")
    args_py = Path(found.submodule_search_locations[0]) / "models" / "llama3" / "model" / "args.py"
    tree = ast.parse(args_py.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TransformerModelArgs")
    names = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}
    registry: dict[str, dict] = {}

    def make(**kw: object) -> dict:
        assert set(kw) <= names | {"rope_scaling_args"}, set(kw) - names
        return kw

    llama3 = types.ModuleType("torchtitan.models.llama3")
    llama3.TransformerModelArgs, llama3.llama3_args = make, registry  # type: ignore[attr-defined]
    margs = types.ModuleType("torchtitan.models.llama3.model.args")
    margs.RoPEScalingArgs = lambda **kw: kw  # type: ignore[attr-defined]
    saved = {k: sys.modules.get(k) for k in (llama3.__name__, margs.__name__)}
    sys.modules.update({llama3.__name__: llama3, margs.__name__: margs})
    try:
        exec(compile(source, "trainmem_flavor.py", "exec"), {})  # noqa: S102 - our own generated module
    finally:
        for k, v in saved.items():
            sys.modules.pop(k) if v is None else sys.modules.__setitem__(k, v)
    f = registry["trainmem"]
    assert torchtitan_ffn(f["dim"], f["multiple_of"], f["ffn_dim_multiplier"]) == width


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-2-7b", "llama-2-70b",
                                   "tinyllama-1.1b", "7B"])
def test_every_llama_width_is_exact(model: str) -> None:
    spec, _ = build(model)
    a = llama3_args(spec)
    assert torchtitan_ffn(a["dim"], a["multiple_of"], a["ffn_dim_multiplier"]) == spec.intermediate_size


def test_tp_only_and_cpu_offload() -> None:
    _, _, files = export("llama-3.1-8b", "torchtitan", 1, 2, engine="fsdp2", tp=2, no_loss_parallel=True)
    t = tomllib.loads(files["torchtitan.toml"])
    assert t["parallelism"]["data_parallel_shard_degree"] == 1 and t["parallelism"]["disable_loss_parallel"]
    _, _, files = export("llama-3.1-8b", "torchtitan", 1, 4, engine="fsdp2", offload="optimizer+params")
    assert tomllib.loads(files["torchtitan.toml"])["training"]["enable_cpu_offload"] is True


@pytest.mark.parametrize("fields, why", [
    ({"lora_rank": 8}, "LoRA is not a torchtitan"),
    ({"precision": "amp-fp16"}, "no fp16"),
    ({"precision": "bf16"}, "float32 (mixed_precision_reduce)"),
    ({"gpus": 1}, "dp * cp = 1"),
    ({"gpus": 2, "tp": 2, "no_sp": True}, "sequence parallelism"),
    ({"attn": "eager"}, "eager attention"),
    ({"loss": "chunked"}, "plain cross-entropy"),
    ({"optimizer": "lion"}, "Adam and AdamW only"),
])
def test_refusals(fields: dict, why: str) -> None:
    fields = {"gpus": 8, **fields}
    spec, s = build("llama-3.1-8b", engine="fsdp2", **fields)
    assert why in can_export(s, "torchtitan")


@pytest.mark.parametrize("model, why", [("qwen2.5-7b", "bias-free"), ("llama-3.2-1b", "ties its embeddings"),
                                        ("mistral-7b", "sliding window"), ("mixtral-8x7b", "bias-free")])
def test_models_it_cannot_build(model: str, why: str) -> None:
    spec, s = build(model, engine="fsdp2", gpus=8)
    assert why in can_export(s, "torchtitan", spec)


def test_the_parse_can_fail(tmp_path: Path) -> None:
    """An unknown key is refused by torchtitan's ConfigManager; a value outside a Literal by the check here."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[training]\nlocal_batch = 2\n')
    with pytest.raises(ValueError, match="Invalid field names"):
        torchtitan_job_config(bad)
    bad.write_text('[parallelism]\nfsdp_reshard_after_forward = "sometimes"\n')
    with pytest.raises(AssertionError, match="fsdp_reshard_after_forward"):
        torchtitan_job_config(bad)
