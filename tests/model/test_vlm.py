"""Vision-language models (trainmem/model/vlm.py, trainmem/memory/vision.py).

- Parameters: the spec's total equals ``sum(p.numel())`` of the transformers 5.24 class built on the meta device
  here, independently (tied weights once), and its vision part the tower's and projector's modules; for the real
  hub configs of Qwen/Qwen2.5-VL-3B-Instruct and llava-hf/llava-1.5-7b-hf (pinned: the hub pages show 3.75B and
  7.06B) and for reduced copies (fewer, narrower layers: the same classes) used by the slower tests.
- Frozen vs trained tower: the difference of the estimate equals a hand count of the tower's gradients and AdamW
  states (4 + 8 B per parameter under amp-bf16).
- What the tower saves: the fit (three sizes, one and two images) against the same fake-tensor measurement of the
  tower's forward at a size and an image count it was not fitted on, within 3 %.
"""

from __future__ import annotations

import copy
import gc

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trainmem.errors import ConfigError, UnsupportedError  # noqa: E402
from trainmem.memory.estimate import estimate  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402


pytestmark = pytest.mark.usefixtures("derived_cache")  # (tests/model/conftest.py: one cache for the module)


# Qwen/Qwen2.5-VL-3B-Instruct config.json (the hub file; bookkeeping token ids kept)
QWEN25_VL_3B = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653, "vision_token_id": 151654,
    "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 128000, "max_window_layers": 70,
    "model_type": "qwen2_5_vl", "num_attention_heads": 16, "num_hidden_layers": 36, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.41.2", "use_cache": True, "use_sliding_window": False,
    "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
                      "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                      "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2},
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 151936}
# llava-hf/llava-1.5-7b-hf config.json (the hub file): its text_config lists only what differs from LlamaConfig
LLAVA_15_7B = {
    "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100, "image_token_index": 32000,
    "model_type": "llava", "pad_token_id": 32001, "projector_hidden_act": "gelu",
    "text_config": {"_name_or_path": "lmsys/vicuna-7b-v1.5", "architectures": ["LlamaForCausalLM"],
                    "max_position_embeddings": 4096, "model_type": "llama", "rms_norm_eps": 1e-05,
                    "torch_dtype": "float16", "vocab_size": 32064},
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.36.0.dev0",
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "vocab_size": 32064}


def _small_qwen() -> dict:
    """Qwen2.5-VL-3B with fewer, narrower layers (window and full-attention blocks both kept)."""
    c = copy.deepcopy(QWEN25_VL_3B)
    c.update(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=1024)
    c["vision_config"].update(depth=4, hidden_size=128, intermediate_size=256, num_heads=4, out_hidden_size=256,
                              fullatt_block_indexes=[1, 3])
    return c


def _small_llava() -> dict:
    c = copy.deepcopy(LLAVA_15_7B)
    c["text_config"].update(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                            vocab_size=1024)
    c["vision_config"].update(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4)
    return c


# google/gemma-3-4b-pt config.json as the catalog keeps it (trainmem/model/configs/gemma-3-4b.json), reduced
GEMMA3_SMALL = {
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 16,
    "boi_token_index": 255999, "eoi_token_index": 256000, "image_token_index": 262144,
    "text_config": {"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 262208,
                    "sliding_window": 1024},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 128, "image_size": 224,
                      "intermediate_size": 256, "num_attention_heads": 4, "num_hidden_layers": 2, "patch_size": 14,
                      "vision_use_head": False}}
# Qwen/Qwen2-VL-2B-Instruct's layout (every vision block full attention, embed_dim / hidden_size keys), reduced
QWEN2_VL_SMALL = {
    "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "vocab_size": 1024, "tie_word_embeddings": True, "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
    "vision_config": {"depth": 2, "embed_dim": 128, "mlp_ratio": 4, "num_heads": 4, "in_chans": 3, "hidden_size": 256,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2}}

_PARTS = {"qwen2_vl": ("visual", "visual.merger"), "gemma3": ("vision_tower", "multi_modal_projector"),
          "qwen2_5_vl": ("visual", "visual.merger"), "llava": ("vision_tower", "multi_modal_projector")}


def _meta_counts(cfg: dict) -> tuple[int, int, int]:
    """(total, tower, projector) of transformers' own class built on the meta device."""
    raw = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "torch_dtype")}
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    with torch.device("meta"):
        model = getattr(transformers, cfg["architectures"][0])._from_config(config)
    tower_path, proj_path = _PARTS[cfg["model_type"]]
    tower, proj = model.model.get_submodule(tower_path), model.model.get_submodule(proj_path)
    n_proj = sum(p.numel() for p in proj.parameters())
    return sum(p.numel() for p in model.parameters()), sum(p.numel() for p in tower.parameters()) - (
        n_proj if proj_path.startswith(tower_path + ".") else 0), n_proj


@pytest.mark.parametrize("cfg, total", [(QWEN25_VL_3B, (3_754_622_976, 631_975_680, 36_708_608)),
                                        (LLAVA_15_7B, (7_063_427_072, 303_507_456, 20_979_712)),
                                        (_small_qwen(), None), (_small_llava(), None), (QWEN2_VL_SMALL, None),
                                        (GEMMA3_SMALL, None)],
                         ids=["qwen2.5-vl-3b", "llava-1.5-7b", "qwen-small", "llava-small", "qwen2-vl-small",
                              "gemma3-small"])
def test_parameters_equal_the_meta_built_model(cfg, total):
    spec = spec_from_hf_config(cfg, name="vlm")
    if cfg["model_type"] == "gemma3":  # its text model alone by default; whole with images (api.build_spec)
        from trainmem.api import build_spec
        assert spec.vision is None and spec.params.vision == 0
        spec, _ = build_spec(spec, seq_len=256, image_tokens=16)
    # the real configs pinned from transformers 5.24's meta build (hub: Qwen2.5-VL-3B-Instruct 3.75B, llava-1.5-7b-hf
    # 7.06B params); the reduced copies against a meta build made here (the same classes, seconds less)
    ref_total, tower, proj = total if total is not None else _meta_counts(cfg)
    assert spec.n_params == ref_total
    assert (spec.vision.tower_params, spec.vision.projector_params) == (tower, proj)
    assert spec.params.vision == tower + proj
    # the language model is the described family, not derived
    assert spec.model_type in ("qwen2", "llama", "gemma3_text") and spec.derived is None


def test_frozen_and_trained_tower_differ_by_its_gradients_and_adam_states():
    spec = spec_from_hf_config(_small_llava(), name="llava-small")
    n = spec.vision.params
    frozen = estimate(spec, make_setup(seq_len=1024, precision="amp-bf16", image_tokens=576))
    trained = estimate(spec, make_setup(seq_len=1024, precision="amp-bf16", image_tokens=576, train_vision=True))
    fc, tc = frozen.category_peak_bytes, trained.category_peak_bytes
    assert tc["parameters"] == fc["parameters"]  # the tower is stored (fp32 under amp) either way
    assert abs((tc["optimizer_states"] - fc["optimizer_states"]) - 8 * n) <= 512  # AdamW exp_avg + exp_avg_sq fp32
    assert abs((tc["gradients"] - fc["gradients"]) - 4 * n) <= 512  # fp32 .grad
    assert trained.n_trainable_params - frozen.n_trainable_params == n
    projector = estimate(spec, make_setup(seq_len=1024, precision="amp-bf16", image_tokens=576, train_projector=True))
    assert projector.n_trainable_params - frozen.n_trainable_params == spec.vision.projector_params
    # text-only batches: the tower does not run, gets no .grad, so AdamW makes no state for it
    idle = estimate(spec, make_setup(seq_len=1024, precision="amp-bf16", train_vision=True))
    assert idle.category_peak_bytes["optimizer_states"] == frozen.category_peak_bytes["optimizer_states"]


@pytest.mark.parametrize("make, images, grid", [(_small_qwen, 3, (40, 24)), (_small_llava, 3, None),
                                                (lambda: QWEN2_VL_SMALL, 2, (24, 40))],
                         ids=["qwen-small", "llava-small", "qwen2-vl-small"])
@pytest.mark.parametrize("recompute", [False, True], ids=["none", "full"])
def test_tower_saved_bytes_fit_agrees_with_a_trace_it_was_not_fitted_on(make, images, grid, recompute):
    from trainmem.model import vlm

    spec = spec_from_hf_config(make(), name="vlm")
    vt = spec.vision
    fit = vt.fit("16", "sdpa", "trained", recompute)
    patches = grid[0] * grid[1] if grid else vt.tokens_per_image + vt.extra_positions
    traced = vlm._measure_at(vt, "16", "sdpa", "trained", recompute, images, grid or (0, 0))
    assert traced[0] > 0
    assert fit.saved_bytes(images, patches) == pytest.approx(traced[0], rel=0.03)


def test_frozen_tower_keeps_nothing_and_image_tokens_are_checked():
    spec = spec_from_hf_config(_small_llava(), name="llava-small")
    from trainmem.memory.vision import vision_saved_bytes
    assert vision_saved_bytes(spec, make_setup(seq_len=1024, image_tokens=576)) == 0
    assert vision_saved_bytes(spec, make_setup(seq_len=1024, image_tokens=576, train_vision=True)) > 0
    with pytest.raises(UnsupportedError, match="multiple of 576"):
        estimate(spec, make_setup(seq_len=1024, image_tokens=500))
    with pytest.raises(UnsupportedError, match="LoRA with --train-vision"):
        estimate(spec, make_setup(seq_len=1024, lora_rank=8, train_vision=True))
    with pytest.raises(ConfigError, match="part of the language model's sequence"):
        make_setup(seq_len=256, image_tokens=576)
    text = spec_from_hf_config(LLAVA_15_7B["text_config"] | {"hidden_size": 256, "intermediate_size": 512,
                                                             "num_hidden_layers": 2, "num_attention_heads": 4},
                               name="text")
    with pytest.raises(UnsupportedError, match="no vision tower"):
        estimate(text, make_setup(seq_len=1024, image_tokens=576))


def _full_forward_kept_bytes(cfg: dict, state: str, images: int, seq_len: int) -> int:
    """What the whole LlavaForConditionalGeneration keeps after ``model(input_ids, pixel_values, labels).loss``
    (the output dropped, as HF Trainer's compute_loss does), on fake tensors with the tracer's CUDA emulations:
    ``images`` images of 576 tokens in one sequence of ``seq_len`` tokens (none: a text-only sequence)."""
    from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily

    from trainmem.model import vlm
    from trainmem.trace.dropout import cuda_dropout
    from trainmem.trace.sdpa import cuda_sdpa
    from trainmem.trace.tracker import StorageTracker

    config = vlm._hf_config(transformers, vlm._clean(cfg))
    with torch.device("meta"):
        model = transformers.LlavaForConditionalGeneration._from_config(config, dtype=torch.bfloat16,
                                                                         attn_implementation="sdpa")
    ids = torch.full((1, seq_len), 5, dtype=torch.long)
    ids[0, 1:1 + 576 * images] = config.image_token_id
    with FakeTensorMode(allow_non_fake_inputs=True), cuda_dropout(), cuda_sdpa():
        model.to_empty(device="cpu")
        model.train()
        for name, p in model.named_parameters():
            p.requires_grad_(state == "trained" or not name.startswith(("model.vision_tower", "model.multi_modal")))
        with vlm._real_stays_real(torch):
            pixels = torch.empty(images, 3, 336, 336, dtype=torch.bfloat16) if images else None
            tracker = StorageTracker()
            with tracker:
                for t in [*model.parameters(), *model.buffers()]:
                    tracker.observe_storage(t.untyped_storage())
                base = tracker.allocated
                with unset_fake_temporarily():
                    labels = ids.clone()
                out = model(input_ids=ids, pixel_values=pixels, labels=labels)
                loss = out.loss
                del out
                gc.collect()  # (the model output's reference cycles: garbage, not kept for backward)
                kept = tracker.allocated - base
            tracker.close()
    del loss
    return kept


@pytest.mark.parametrize("state", ["trained", "frozen"])
def test_whole_model_forward_keeps_what_the_tower_fit_says(state):
    """The whole VLM's forward (the image features scattered into the sequence, the language model, the loss) keeps,
    with two images in the sequence, what it keeps without them plus the tower's fitted saved bytes (within 3 %)."""
    from trainmem.memory.vision import vision_saved_bytes

    cfg = _small_llava()
    cfg["vision_config"].update(image_size=336)
    spec = spec_from_hf_config(cfg, name="llava-small")
    with_images = _full_forward_kept_bytes(cfg, state, 2, 1280)
    text_only = _full_forward_kept_bytes(cfg, state, 0, 1280)
    expected = vision_saved_bytes(spec, make_setup(seq_len=1280, precision="bf16", image_tokens=1152,
                                                   train_vision=state == "trained"))
    if state == "frozen":
        assert expected == 0 and abs(with_images - text_only) <= 64 * 1024  # the scatter's mask, nothing more
    else:
        assert expected > 0 and with_images - text_only == pytest.approx(expected, rel=0.03)
