"""--device-map auto: accelerate's split (checked against transformers' own _get_device_map on a meta model)
and what each GPU holds (hand-computed)."""

from __future__ import annotations

import pytest

from trainmem.api import build, build_spec
from trainmem.errors import TrainmemError
from trainmem.hardware import get_gpu
from trainmem.memory.device_map import balanced_max_memory_bytes, device_split, infer_device_split
from trainmem.memory.estimate import estimate
from trainmem.memory.overhead import CUDA_CONTEXT_BYTES
from trainmem.model.hf import spec_from_hf_config

CFG = dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=8, num_attention_heads=8,
           num_key_value_heads=2, vocab_size=4096, max_position_embeddings=4096, tie_word_embeddings=False)

YI = dict(engine="torch", precision="bf16", attn="flash", seq_len=8192, micro_batch=1, grad_accum=16,
          recompute="full", lora_rank=8, lora_targets="q_proj,k_proj,v_proj", gpu="A100-SXM-80G", loop="trainer")


def test_balanced_budget_hand_computed():
    # 100 B over 2 GPUs, biggest block 10, leaf 8: 50 + int(1.25 * 10) = 62 on GPU 0; the last keeps its free 90
    assert balanced_max_memory_bytes(100, 10, 8, [90, 90]) == [62, 90]
    assert balanced_max_memory_bytes(100, 10, 8, [40, 90]) == [40, 90]  # capped at the free memory
    assert balanced_max_memory_bytes(100, 10, 8, [90]) == [81]  # one GPU: 90 %


def test_greedy_walk_hand_computed():
    # GPU 0 keeps room for the largest layer still to place (10): cap 30 - 10 = 20 -> emb 4 + two layers of 8
    mods = [("model", 4 + 4 * 8, [("e", 4, None), ("layers", 32, [(f"l{i}", 8, None) for i in range(4)])]),
            ("head", 10, None)]
    assert infer_device_split(mods, [30, 100]) == {"e": 0, "l0": 0, "l1": 0, "l2": 1, "l3": 1, "head": 1}
    with pytest.raises(TrainmemError, match="offload"):
        infer_device_split(mods, [30, 10])


@pytest.mark.parametrize("gpus,free_mib", [(2, 40), (3, 20), (4, 12)])
def test_split_equals_transformers_get_device_map(gpus, free_mib):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.integrations.accelerate import _get_device_map

    free = free_mib * 2**20
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).to(torch.bfloat16)
    dm = _get_device_map(model, "auto", {i: free for i in range(gpus)}, None)
    per_layer = [0] * gpus
    for i in range(CFG["num_hidden_layers"]):
        key = next(k for k in (f"model.layers.{i}", "model.layers", "model") if k in dm)
        per_layer[dm[key]] += 1
    spec = spec_from_hf_config(CFG, name="tiny")
    _, s = build_spec(spec, **{**YI, "gpus": gpus, "device_map": "auto"})
    split = device_split(spec, s, free)
    assert list(split.layers_per_gpu) == [n for n in per_layer if n] and split.head_gpu == dm["lm_head"]


def test_yi34b_two_gpus_split_and_per_gpu_bytes():
    spec, s = build("yi-34b", **YI, gpus=2, device_map="auto")
    e = estimate(spec, s)
    dm = e.device_map
    # 60 layers of 557,856,768 bf16 weights (q, o 7168^2; k, v 7168 * 1024; mlp 3 * 7168 * 20480; 2 norms):
    # 1,115,713,536 B each; embedding = head = 64000 * 7168 * 2 = 917,504,000 B; final norm 2 * 7168
    assert dm["model_bytes"] == 60 * 1_115_713_536 + 2 * 917_504_000 + 2 * 7168
    # GPU 0: total // 2 + int(1.25 * layer) = 34,388,917,248 + 1,394,641,920, minus one layer kept free on the
    # main device (34,667,845,632): the embedding and 30 layers = 34,388,910,080 B fit, a 31st would not
    assert dm["max_memory_bytes"][0] == 68_777_834_496 // 2 + int(1.25 * 1_115_713_536)
    assert dm["max_memory_bytes"][1] == get_gpu("A100-SXM-80G").memory_bytes - CUDA_CONTEXT_BYTES  # the last: all it has free
    assert dm["layers_per_gpu"] == [30, 30] and dm["head_gpu"] == 1
    # GPU 1 holds the head and the loss: the most loaded; the estimate reports it
    assert dm["most_loaded_gpu"] == 1 and e.stage == 1
    assert e.peak_allocated_bytes == dm["per_gpu"][1]["peak_allocated_bytes"]
    # what GPU 1 holds between steps: 30 layers + final norm + head in bf16, its 30 layers' fp32 adapters
    # (q 7168->7168, k and v 7168->1024 at rank 8) and their AdamW states (8 B)
    lora = 8 * (7168 + 7168) + 2 * 8 * (7168 + 1024)
    start = e.timeline_categories[0]
    assert abs(start["parameters"] - (2 * (30 * 557_856_768 + 7168 + 458_752_000) + 4 * 30 * lora)) <= 1024
    assert abs(start["optimizer_states"] - 8 * 30 * lora) <= 1024


def test_per_gpu_parameters_hand_computed():
    spec = spec_from_hf_config(CFG, name="tiny")
    _, s = build_spec(spec, **{**YI, "seq_len": 512, "gpus": 2, "device_map": "auto", "gpu_memory": 40 * 2**20 + CUDA_CONTEXT_BYTES})
    e = estimate(spec, s)
    n0, n1 = e.device_map["layers_per_gpu"]
    assert n0 + n1 == 8
    pc = spec.params
    layer = pc.layers[0].attention + pc.layers[0].mlp + pc.layers[0].norms
    # the most loaded (last) GPU: its layers' frozen bf16 weights + final norm + head; adapters fp32 with
    # AdamW (4 + 8 B): q (256 -> 256), k and v (256 -> 64) at rank 8: 8 * (256 + 256) + 2 * 8 * (256 + 64)
    lora = 8 * (256 + 256) + 2 * 8 * (256 + 64)
    assert e.stage == 1
    assert e.breakdown_at_peak_bytes["parameters"] >= 2 * (n1 * layer + pc.final_norm + pc.lm_head) + 4 * n1 * lora
    assert e.breakdown_at_peak_bytes["optimizer_states"] >= 8 * n1 * lora


def test_refusals():
    with pytest.raises(TrainmemError, match="engine torch"):
        build("yi-34b", **{**YI, "engine": "fsdp2"}, gpus=2, device_map="auto")
    with pytest.raises(TrainmemError, match="qlora-impl torchao"):
        build("yi-34b", **YI, gpus=2, device_map="auto", qlora=True, qlora_impl="torchao")
    with pytest.raises(TrainmemError, match="gpus >= 2"):
        build("yi-34b", **YI, gpus=1, device_map="auto")
    with pytest.raises(TrainmemError, match="tied"):
        spec, s = build("qwen2.5-0.5b", **YI, gpus=2, device_map="auto")
        estimate(spec, s)


def test_qlora_split_hand_computed():
    spec, s = build("yi-34b", **{**YI, "seq_len": 2048}, gpus=2, device_map="auto", qlora=True)
    dm = estimate(spec, s).device_map
    # Linear4bit weights 0.5 B (557,842,432 matmul weights -> 278,921,216 B) + 2 norms of 7168 in bf16:
    # 278,949,888 B per layer; embedding and head stay bf16 (917,504,000 B each), final norm 14,336 B
    layer = 557_842_432 // 2 + 2 * 2 * 7168
    total = 60 * layer + 2 * 917_504_000 + 2 * 7168
    assert dm["model_bytes"] == total == 18_572_015_616
    # the largest leaf is the embedding (917,504,000 > a layer): budget (total // 2 + int(1.25 * 917,504,000)) * 0.9
    budget0 = int((total // 2 + int(1.25 * 917_504_000)) * 0.9)
    assert dm["max_memory_bytes"][0] == budget0 == 9_389_599_027
    # GPU 0 keeps room for the largest module still to place (lm_head, 917,504,000 B): the embedding + 27 layers
    # (917,504,000 + 27 * 278,949,888 = 8,449,150,976 <= 8,472,095,027; a 28th would not fit)
    assert dm["layers_per_gpu"] == [27, 33] and dm["head_gpu"] == 1


def test_step_time_is_sequential():
    # one GPU busy at a time: the step of the whole model on one GPU's clock (no DDP all-reduce: dp = 1),
    # and the MFU spread over both GPUs
    from trainmem.hardware.cluster import parse_cluster
    from trainmem.perf.step import step_time

    spec, s2 = build("yi-34b", **YI, gpus=2, device_map="auto")
    _, s1 = build("yi-34b", **YI, gpus=1)
    assert s2.dp == 1 and s2.global_batch == s1.global_batch
    t2 = step_time(spec, s2, parse_cluster("2xA100-SXM-80G").groups[0])
    t1 = step_time(spec, s1, parse_cluster("1xA100-SXM-80G").groups[0])
    assert t2.step_seconds == pytest.approx(t1.step_seconds)
    assert t2.mfu == pytest.approx(t1.mfu / 2)


def test_logits_copied_back_to_gpu0():
    # the root AlignDevicesHook sends the output to GPU 0: with the "script" loop (outputs alive through backward)
    # GPU 0 holds the copy of the bf16 logits, 1 * 512 * 4096 * 2 = 4,194,304 B, through its backward; the
    # "trainer" loop drops it before backward (a forward-end transient, under GPU 0's backward peak here)
    spec = spec_from_hf_config(CFG, name="tiny")
    peaks = {}
    for loop in ("trainer", "script"):
        _, s = build_spec(spec, **{**YI, "seq_len": 512, "grad_accum": 2, "loop": loop, "gpus": 2, "device_map": "auto",
                                   "gpu_memory": 40 * 2**20 + CUDA_CONTEXT_BYTES})
        peaks[loop] = [g["peak_allocated_bytes"] for g in estimate(spec, s).device_map["per_gpu"]]
    assert peaks["script"][0] - peaks["trainer"][0] == 1 * 512 * 4096 * 2
