"""``--from FILE`` for vision-language fine-tunes (trainmem/frameworks/readers/llama_factory_vision.py).

LLaMA-Factory's own Qwen2.5-VL examples (tests/frameworks/configs/llamafactory_qwen2_5vl_*.yaml, copied verbatim
from the repository, source in each header) give the same setup as the flags written here by hand from the file
and LLaMA-Factory 0.9.5's defaults; estimated on a reduced Qwen2.5-VL (tests/model/test_vlm.py's, the same
classes) given as MODEL, since the files name the hub id. LLaMA-Factory's own parser is not installed here (its
package pins an older transformers), so the mapping is checked against its source (cited in the module), not its
loader. ``image_max_pixels`` 262144 → 262144 // (14·14·4) = 334 image tokens by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.frameworks.test_readers import CONFIGS
from tests.report.test_zh import ascii_punctuation_in_chinese, english_runs
from trainmem.errors import ConfigError
from trainmem.frameworks.readers import merge_fields, read_config
from trainmem.report.i18n import tr

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: file → the equivalent flags (LLaMA-Factory 0.9.5 defaults: gradient checkpointing on, adamw_torch_fused).
VLM_CASES: dict[str, dict] = {
    # lora_target all, bf16 base with fp32 adapters; image_max_pixels 262144 → 334 tokens; the tower frozen
    "llamafactory_qwen2_5vl_lora_sft.yaml": dict(
        stack="llama-factory", lora_rank=8, lora_targets="all-linear", image_tokens=334, seq_len=2048, micro_batch=1,
        grad_accum=8, recompute="full", optimizer="adamw", optimizer_impl="fused", precision="bf16"),
    # freeze_vision_tower / freeze_multi_modal_projector true (stated), ds_z3_config.json's "auto" from the HF args
    "llamafactory_qwen2_5vl_full_sft.yaml": dict(
        stack="llama-factory", freeze_vision=True, image_tokens=334, seq_len=2048, micro_batch=1, grad_accum=2,
        recompute="full", optimizer="adamw", engine="deepspeed", zero=3, precision="mixed-bf16"),
}


@pytest.fixture(scope="module")
def small_qwen(tmp_path_factory) -> str:
    """A reduced Qwen2.5-VL config.json (2 text layers, 4 vision blocks), cached once for the module."""
    from tests.model.test_vlm import _small_qwen

    d = tmp_path_factory.mktemp("vlm")
    path = d / "config.json"
    path.write_text(json.dumps(_small_qwen()))
    return str(path)


@pytest.fixture(autouse=True)
def _cache(small_qwen, monkeypatch):
    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(Path(small_qwen).parent))


@pytest.mark.parametrize("name", sorted(VLM_CASES))
def test_vlm_example_gives_the_setup_of_its_flags(name: str, small_qwen: str) -> None:
    from trainmem.api import build

    flags = VLM_CASES[name]
    got = read_config(str(CONFIGS / name))
    assert got.model == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert set(got.fields) <= set(flags)
    assert build(small_qwen, **merge_fields(got, {}))[1].model_dump() == build(small_qwen, **flags)[1].model_dump()


def test_vlm_example_estimate_and_plan_equal_the_flags(small_qwen: str, capsys) -> None:
    """``estimate --from`` equals the flags; ``plan`` takes the VLM flags and its pinned plan equals estimate."""
    from trainmem.cli import main

    def run(args: list[str]) -> dict:
        assert main(args) == 0, capsys.readouterr().err
        return json.loads(capsys.readouterr().out)

    lora = str(CONFIGS / "llamafactory_qwen2_5vl_lora_sft.yaml")
    from_file = run(["estimate", small_qwen, "--from", lora, "--json"])
    flags = run(["estimate", small_qwen, "--stack", "llama-factory", "--lora-rank", "8", "--lora-targets", "all-linear",
                 "--image-tokens", "334", "--seq-len", "2048", "--micro-batch", "1", "--grad-accum", "8",
                 "--recompute", "full", "--optimizer", "adamw", "--optimizer-impl", "fused", "--precision", "bf16",
                 "--json"])
    assert from_file["peak_allocated_bytes"] == flags["peak_allocated_bytes"]
    assert from_file["setup"]["image_tokens"] == 334
    est = run(["estimate", small_qwen, "--engine", "deepspeed", "--zero", "2", "--gpus", "2", "--micro-batch", "2",
               "--recompute", "full", "--seq-len", "1024", "--image-tokens", "256", "--train-vision", "--precision",
               "mixed-bf16", "--json"])
    plan = run(["plan", small_qwen, "--cluster", "2xH100-SXM-80G", "--global-batch", "4", "--seq-len", "1024",
                "--image-tokens", "256", "--train-vision", "--precision", "mixed-bf16", "--fix",
                "engine=deepspeed,zero=2,micro_batch=2,recompute=full", "--top", "1", "--json"])
    text = run(["plan", small_qwen, "--cluster", "2xH100-SXM-80G", "--global-batch", "4", "--seq-len", "1024",
                "--train-vision", "--precision", "mixed-bf16", "--fix", "engine=deepspeed,zero=2,micro_batch=2,"
                "recompute=full", "--top", "1", "--json"])
    assert plan["plans"][0]["peak_allocated_bytes"] == est["peak_allocated_bytes"]
    assert text["plans"][0]["peak_allocated_bytes"] < est["peak_allocated_bytes"]  # the images' activations


_HEAD = "model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct\nstage: sft\ncutoff_len: 4096\n"

#: (YAML body after _HEAD, the VLM fields read, or the refusal's words)
KEYS: list[tuple[str, dict | str]] = [
    ("finetuning_type: full\ntemplate: qwen2_vl\nfreeze_multi_modal_projector: false\n",
     {"train_projector": True, "image_tokens": 752}),  # image_max_pixels default 768·768 → 589824 // 784
    ("finetuning_type: full\ntemplate: qwen2_vl\nfreeze_vision_tower: false\nfreeze_multi_modal_projector: false\n"
     "image_max_pixels: 1003520\n", {"train_vision": True, "image_tokens": 1280}),
    ("finetuning_type: full\ntemplate: qwen2_vl\n", {"freeze_vision": True, "image_tokens": 752}),
    ("finetuning_type: full\ntemplate: qwen2_vl\nfreeze_vision_tower: false\n", "the tower trained, the projector frozen"),
    ("finetuning_type: lora\ntemplate: qwen2_vl\nfreeze_vision_tower: false\n", "freeze_vision_tower false under LoRA"),
    ("finetuning_type: lora\ntemplate: qwen2_vl\nfreeze_language_model: true\n", "freeze_language_model true"),
    ("finetuning_type: lora\ntemplate: qwen2_vl\nfreeze_multi_modal_projector: false\n", {"image_tokens": 752}),
    ("finetuning_type: lora\ntemplate: llava\nimage_max_pixels: 262144\n", {"image_tokens": 576}),
    ("finetuning_type: lora\ntemplate: gemma3\n", {"image_tokens": 256}),
    ("finetuning_type: lora\ntemplate: gemma3\nimage_do_pan_and_scan: true\n", "image_do_pan_and_scan true"),
    ("finetuning_type: lora\ntemplate: qwen3\nimage_max_pixels: 262144\n", {}),  # a template trainmem does not count
    ("finetuning_type: lora\ntemplate: qwen3\n", {}),  # a text fine-tune: template stays an ignored key
]
_VLM_FIELDS = ("train_vision", "train_projector", "freeze_vision", "image_tokens")


@pytest.mark.parametrize("body, want", KEYS, ids=range(len(KEYS)))
def test_vlm_keys(body: str, want: dict | str, tmp_path: Path) -> None:
    path = tmp_path / "lf.yaml"
    path.write_text(_HEAD + body)
    if isinstance(want, str):
        with pytest.raises(ConfigError, match=want) as e:
            read_config(str(path))
        assert not _left(str(e.value))
        return
    got = read_config(str(path))
    assert {k: v for k, v in got.fields.items() if k in _VLM_FIELDS} == want
    assert ("template" in got.ignored) == (not want)
    if "image_max_pixels" in body and not want:
        assert any(n.startswith("image tokens not read: template qwen3") for n in got.notes())
    assert not {n: _left(n) for n in got.notes() if _left(n)}


def _left(text: str) -> list[str]:
    zh = tr(text, "zh")
    return english_runs(zh) + ascii_punctuation_in_chinese(zh)


@pytest.mark.parametrize("name", sorted(VLM_CASES))
def test_vlm_assumption_lines_are_chinese(name: str) -> None:
    left = {line: _left(line) for line in read_config(str(CONFIGS / name)).notes()}
    assert not {k: v for k, v in left.items() if v}, "\n".join(k for k, v in left.items() if v)


@pytest.mark.parametrize("body, want", [
    ("", {}),  # axolotl's own example: LoRA on the language model's projections (lora_target_modules)
    ("adapter:\n", {"train_vision": True}),  # a full fine-tune: axolotl freezes nothing
    ("adapter:\nfreeze_mm_modules: true\n", {"freeze_vision": True}),
], ids=["example", "full", "freeze_mm_modules"])
def test_axolotl_multimodal_keys(body: str, want: dict, tmp_path: Path) -> None:
    text = (CONFIGS / "axolotl_qwen2_5-vl_lora-7b.yaml").read_text()
    path = tmp_path / "axolotl.yaml"
    path.write_text(text.replace("adapter: lora\n", "") + body if body else text)
    got = read_config(str(path))
    assert {k: v for k, v in got.fields.items() if k in _VLM_FIELDS} == want
    assert "processor_type" not in got.ignored and "skip_prepare_dataset" in got.ignored
    assert any(n.startswith("image tokens not read: the model's processor") for n in got.notes())
    assert not {n: _left(n) for n in got.notes() if _left(n)}
