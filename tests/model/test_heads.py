"""*ForSequenceClassification / *ForTokenClassification configs: exact parameter counts against the
transformers model built on the meta device, and the estimate against a traced step."""

from __future__ import annotations

import pytest

from trainmem.errors import ConfigError
from trainmem.model.catalog import load_catalog_spec
from trainmem.model.hf import spec_from_hf_config

HEADS = ("ForSequenceClassification", "ForTokenClassification")
MODELS = ("llama-3.2-1b", "qwen2.5-0.5b", "gpt2", "bert-large-uncased", "roberta-base", "pythia-1b",
          "falcon-7b", "gemma-2-2b", "phi-3-mini-4k", "qwen1.5-moe-a2.7b")


def _cfg(name: str, head: str, **extra: object) -> dict:
    return {**load_catalog_spec(name).hf_config, "architectures": ["Any" + head], **extra}


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("name", MODELS)
def test_head_parameter_count_equals_transformers(name: str, head: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = _cfg(name, head, num_labels=5)
    spec = spec_from_hf_config(cfg, name=name)
    assert spec.architecture.endswith(head) and spec.num_labels == 5 and not spec.tie_word_embeddings
    raw = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "_source", "torch_dtype", "dtype")}
    conf = transformers.AutoConfig.for_model(cfg["model_type"], **raw)
    with torch.device("meta"):
        model = getattr(transformers, spec.architecture)(conf)
    assert spec.n_params == sum(p.numel() for p in model.parameters())


def test_num_labels_from_id2label_and_default() -> None:
    assert spec_from_hf_config(_cfg("gpt2", HEADS[0], id2label={"0": "a", "1": "b", "2": "c"}), name="x").num_labels == 3
    assert spec_from_hf_config(_cfg("gpt2", HEADS[1]), name="x").num_labels == 2
    with pytest.raises(ConfigError, match="num_labels"):
        spec_from_hf_config(_cfg("gpt2", HEADS[0], num_labels=0), name="x")


def test_classification_loss_is_tiny() -> None:
    from trainmem.memory.loss import loss_buffers
    from trainmem.setup import make_setup
    spec = spec_from_hf_config(_cfg("llama-3.2-1b", HEADS[0], num_labels=4), name="x")
    lb = loss_buffers(spec, make_setup(seq_len=4096, micro_batch=2))
    assert lb.logits_bytes == 2 * 2 * 4096 * 4 and lb.kept_bytes == 4 * 2 * 4096 * 4


TRACE_CASES = [
    ("llama-gqa", HEADS[0], dict(precision="bf16", seq_len=256, micro_batch=4)),
    ("qwen2", HEADS[1], dict(precision="amp-bf16", seq_len=256, micro_batch=4)),
    ("gpt2", HEADS[0], dict(precision="amp-bf16", seq_len=256, micro_batch=4)),
    ("gpt_neox", HEADS[1], dict(precision="bf16", seq_len=256, micro_batch=4)),
    ("mistral-window", HEADS[0], dict(precision="bf16", seq_len=256, micro_batch=4, recompute="full")),
]


@pytest.mark.parametrize("fam,head,kw", TRACE_CASES, ids=[f"{f}-{h}" for f, h, _ in TRACE_CASES])
def test_head_estimate_matches_trace(fam: str, head: str, kw: dict) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.tiny_configs import TINY
    from trainmem.setup import make_setup
    from trainmem.trace.compare import compare
    spec = spec_from_hf_config({**TINY[fam], "architectures": ["Any" + head], "num_labels": 3}, name=fam)
    cmp = compare(spec, make_setup(**kw))
    assert abs(cmp.peak_error) < 0.01, cmp.to_dict()
