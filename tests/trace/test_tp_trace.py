"""fsdp2 + tensor parallelism, estimate against trace: rank 0 of torch's own TP (``parallelize_module``
with torchtitan's Llama plan, trace/tp.py) on a fake process group, with and without SequenceParallel
and loss parallel, TP alone (no fully_shard) and FSDP2 × TP on a 2-D (dp_shard, tp) mesh."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.errors import UnsupportedError  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.support import check_traceable  # noqa: E402
from tests.trace._specs import assert_matches_trace  # noqa: E402

_SHAPE = dict(engine="fsdp2", seq_len=256, micro_batch=4)
# (family, setup) — "llama" has 8 kv heads (tp 8 splits whole heads), "llama-gqa" 2.
CASES = [
    ("llama", dict(gpus=2, tp=2, precision="bf16")),                                # SP + loss parallel
    ("llama", dict(gpus=4, tp=4, precision="bf16", no_sp=True)),                    # Megatron-style TP
    ("llama", dict(gpus=8, tp=8, precision="bf16", no_loss_parallel=True)),         # full logits per rank
    ("llama-gqa", dict(gpus=2, tp=2, precision="bf16", no_sp=True, no_loss_parallel=True)),
    ("llama", dict(gpus=2, tp=2, precision="amp-bf16")),                            # TP alone: fp32 compute
    ("llama-gqa", dict(gpus=4, tp=2, precision="amp-bf16")),                        # FSDP2 × TP, ZeRO-3
    ("llama", dict(gpus=8, tp=2, precision="bf16", zero=2)),                        # peak at the loss forward
    ("qwen2", dict(gpus=4, tp=2, precision="amp-bf16")),                            # tied embeddings
    ("mistral", dict(gpus=4, tp=2, precision="amp-bf16", grad_accum=2)),
    ("llama-gqa", dict(gpus=4, tp=2, precision="amp-bf16", recompute="full")),
    # short sequences, 32k vocabulary: the peak moves to the embedding's backward / the optimizer step, where
    # DTensor's full-vocabulary embedding gradient shows (tied under FSDP2 × TP; untied with TP alone)
    ("qwen2-32k", dict(gpus=4, tp=2, precision="bf16", seq_len=128, micro_batch=1)),
    ("llama-32k", dict(gpus=4, tp=4, precision="amp-bf16", seq_len=128, micro_batch=1)),
]
_CONFIGS = {**TINY, "qwen2-32k": dict(TINY["qwen2"], vocab_size=32768), "llama-32k": dict(TINY["llama"], vocab_size=32768)}


def _id(fam: str, kw: dict) -> str:
    return f"{fam}-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("fam,kw", CASES, ids=[_id(f, k) for f, k in CASES])
def test_tp_estimate_matches_trace(fam: str, kw: dict) -> None:
    cmp = assert_matches_trace(spec_from_hf_config(_CONFIGS[fam], name=fam), make_setup(**{**_SHAPE, **kw}))


def test_tp_sequence_parallel_and_loss_parallel_show_in_the_trace() -> None:
    """SP shards the norms' saved tensors and loss parallel the logits: each lowers the traced peak."""
    from trainmem.trace import trace_step

    spec = spec_from_hf_config(TINY["llama"], name="llama")
    peak = {k: trace_step(spec, make_setup(**_SHAPE, gpus=2, tp=2, precision="bf16", **kw)).peak_allocated_bytes
            for k, kw in {"both": {}, "no_sp": dict(no_sp=True), "no_lp": dict(no_loss_parallel=True)}.items()}
    assert peak["both"] < peak["no_sp"] and peak["both"] < peak["no_lp"], peak


@pytest.mark.parametrize("fam,kw,why", [
    ("gemma", dict(gpus=2, tp=2), "gemma"),
    ("llama-gqa", dict(gpus=4, tp=4), "num_key_value_heads"),
    ("mixtral", dict(gpus=2, tp=2), "mixtral"),
])
def test_tp_trace_refuses_unverified_setups(fam: str, kw: dict, why: str) -> None:
    spec = spec_from_hf_config(TINY[fam], name=fam)
    with pytest.raises(UnsupportedError, match=rf"cannot trace tp.*{why}"):
        check_traceable(spec, make_setup(**_SHAPE, **kw))
