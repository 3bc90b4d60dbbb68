"""Activation offloading (``--offload-activations``, memory/act_offload.py): torchtune/TRL ``OffloadActivations``.
Hand-computed bytes on Llama-3.1-8B (h 4096, 32 layers, seq 4096, micro-batch 1) and, on real tensors on the CPU,
what its pack hook sees under transformers' gradient checkpointing (one input per layer, torch 2.13)."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory.act_offload import MAX_FWD_STASH, MIN_OFFLOAD_BYTES, pinned_bytes, stash_window_layers
from trainmem.memory.estimate import estimate

H, L, T = 4096, 32, 4096


def test_pinned_allocator_rounds_to_powers_of_two() -> None:
    assert (pinned_bytes(1023), pinned_bytes(1024), pinned_bytes(1025)) == (0, 1024, 2048)
    assert pinned_bytes(3 * 2**20) == 4 * 2**20 and pinned_bytes(2 * H * T) == 2 * H * T


def _est(**kw):
    spec, s = build("llama-3.1-8b", seq_len=T, **kw)
    return estimate(spec, s).to_dict()


def test_checkpointed_inputs_go_to_the_host() -> None:
    """LoRA (bf16 base) + full recompute: each layer keeps only its 16-bit input, 2·h·T = 32 MiB; offloaded, all 32
    are on the host (1 GiB, powers of two already) and none on the GPU at the loss backward, the peak."""
    base = _est(lora_rank=16, recompute="full")
    off = _est(lora_rank=16, recompute="full", offload_activations=True)
    per_layer = 2 * H * T
    assert off["host_memory_bytes"] == L * per_layer == 2**30
    assert base["host_memory_bytes"] == 0
    assert base["peak_allocated_bytes"] - off["peak_allocated_bytes"] == L * per_layer
    assert off["setup"]["offload_activations"] is True
    assert stash_window_layers(build("llama-3.1-8b", recompute="full")[1], "full") == MAX_FWD_STASH


def test_without_recompute_every_layer_goes_to_the_host() -> None:
    """LoRA without recompute: the layers' saved tensors (layer 0 keeps less: nothing before its first adapter)
    are on the host, unrounded (a lower bound); the peak is then the loss backward with no layer resident, as with
    checkpointing and offloading: the two peaks are equal."""
    from trainmem.memory.activations import layer_saved

    spec, s = build("llama-3.1-8b", seq_len=T, lora_rank=16)
    first, middle = layer_saved(spec, s, 0).total_bytes, layer_saved(spec, s, 1).total_bytes
    assert (first, middle) == (639_451_136, 706_576_384)
    off = _est(lora_rank=16, offload_activations=True)
    assert off["host_memory_bytes"] == first + (L - 1) * middle == 22_543_319_040
    assert off["peak_allocated_bytes"] == _est(lora_rank=16, recompute="full", offload_activations=True)[
        "peak_allocated_bytes"] < _est(lora_rank=16)["peak_allocated_bytes"] - 20 * 2**30


def test_refusals() -> None:
    for kw, msg in [(dict(engine="deepspeed", gpus=2, zero=2), "modelled for --engine torch or fsdp2"),
                    (dict(engine="fsdp2", gpus=8, pp=2), "without pipeline parallelism")]:
        with pytest.raises(ConfigError, match=msg):
            build("llama-3.1-8b", offload_activations=True, **kw)


def test_pack_hook_sees_one_input_per_checkpointed_layer() -> None:
    """Real tensors on the CPU: a saved_tensors_hooks pack that, like torchtune's, takes tensors of >= 1024 B that
    are not Parameters, around a tiny HF Llama with non-reentrant gradient checkpointing: inside the decoder layers
    it sees exactly each layer's input, whose pinned sizes sum to the estimate's host memory."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tests.memory.tiny_configs import TINY
    from trainmem.model.hf import spec_from_hf_config
    from trainmem.setup import make_setup

    cfg = dict(TINY["llama"])
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"}))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    b, s = 2, 64
    where = ["outside"]
    for i, layer in enumerate(model.model.layers):  # (transformers 5.x: module hooks run outside the checkpoint)
        layer.register_forward_pre_hook(lambda m, a, i=i: where.__setitem__(0, i))
        layer.register_forward_hook(lambda m, a, o: where.__setitem__(0, "outside"))
    packs: dict[object, list[int]] = {}

    def pack(t):
        n = t.numel() * t.element_size()
        if n >= MIN_OFFLOAD_BYTES and not isinstance(t, torch.nn.Parameter):
            packs.setdefault(where[0], []).append(n)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=torch.randint(0, cfg["vocab_size"], (b, s)), labels=torch.randint(0, cfg["vocab_size"], (b, s)))
    n_layers = cfg["num_hidden_layers"]
    assert [packs[i] for i in range(n_layers)] == [[4 * b * s * cfg["hidden_size"]]] * n_layers
    spec = spec_from_hf_config(cfg, name="llama")
    est = estimate(spec, make_setup(precision="fp32", seq_len=s, micro_batch=b, recompute="full",
                                    offload_activations=True))
    assert est.host_memory_bytes == sum(pinned_bytes(n) for i in range(n_layers) for n in packs[i])


def test_exposed_transfer_time() -> None:
    """22.5 GB each way over a 25 GB/s host link (0.9 s), behind a 0.3 s forward and a 0.6 s backward: 0.6 + 0.3 s
    exposed; two GPUs sharing the link double the copy time; a copy shorter than its pass is hidden."""
    from trainmem.memory.act_offload import exposed_transfer_seconds

    assert exposed_transfer_seconds(22_500_000_000, 25e9, 1, 0.3, 0.6) == pytest.approx(0.6 + 0.3)
    assert exposed_transfer_seconds(22_500_000_000, 25e9, 2, 0.3, 0.6) == pytest.approx(1.5 + 1.2)
    assert exposed_transfer_seconds(1_000_000_000, 25e9, 1, 0.3, 0.6) == 0.0


def test_step_time_pays_the_copies_only_when_they_outlast_the_passes() -> None:
    from trainmem.hardware.cluster import parse_cluster
    from trainmem.perf.step import step_time

    grp = parse_cluster("1xH100-SXM-80G").groups[0]

    def t(**kw):
        spec, s = build("llama-3.1-8b", seq_len=T, lora_rank=16, **kw)
        return step_time(spec, s, grp).breakdown["offload"]

    assert t() == 0.0 and t(offload_activations=True) > 0.3  # 21 GiB each way per micro-batch
    assert t(recompute="full", offload_activations=True) == 0.0  # 1 GiB: hidden under the passes


def test_plan_with_offloaded_activations() -> None:
    """The planner runs it on torch/fsdp2 without pipeline parallelism (its step-time ranking reads its unvalidated
    candidates too, memory refused for the other engines)."""
    import trainmem

    kw = dict(cluster="2xRTX-4090-24G", global_batch=16, seq_len=4096, lora_rank=16)
    off = trainmem.plan("llama-3.1-8b", offload_activations=True, **kw).to_dict()["plans"]
    assert off and all(p["engine"] in ("torch", "fsdp2") and p["pp"] == 1 for p in off)
