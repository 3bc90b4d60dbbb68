"""``--compile --recompute selective``: a compiled block under torchtitan's op-level SAC policy, partitioned by torch
itself (trainmem/trace/compiled.py: the block checkpointed with ``torchtitan_op_sac_context`` as its
``context_fn``, compiled with ``aot_eager_decomp_partition`` — inductor's decompositions and min-cut partition —
one forward on fake tensors, every saved storage recorded), against the estimate's kept bytes per layer
(memory/plan.py ``_torchtitan_op_sac`` less memory/compile.py ``compiled_op_sac_unread_width``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.memory.compile import compiled_op_sac_unread_width  # noqa: E402
from trainmem.memory.plan import kept_per_layer  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.trace.compiled import trace_compiled_layer  # noqa: E402

CASES = [("llama", dict(precision="amp-bf16")),
         ("llama", dict(engine="fsdp2", gpus=8, precision="amp-bf16")), ("qwen3", dict(precision="bf16")),
         ("phi3", dict(precision="bf16")), ("qwen2", dict(precision="bf16")), ("qwen2", dict(precision="amp-bf16")),
         ("gpt2", dict(precision="bf16"))]  # (qwen2's q/k/v and GPT-2's Conv1D run aten.addmm: recomputed)


@pytest.mark.parametrize("fam,kw", CASES, ids=[f"{f}-{'-'.join(map(str, k.values()))}" for f, k in CASES])
def test_compiled_op_sac_matches_the_partitioner(fam: str, kw: dict) -> None:
    spec = spec_from_hf_config(TINY[fam], name=fam)
    setup = make_setup(seq_len=128, micro_batch=2, compile=True, recompute="selective", **kw)
    r = trace_compiled_layer(spec, setup)
    assert r.estimate_bytes == r.saved_bytes, r.to_dict()["saved_tensors"]


def test_compiled_op_sac_by_hand() -> None:
    """Llama-3.1-8B block (h 4096, 32 heads of 128, 8 kv heads, i 14336), bf16, 2 x 8192 tokens: the policy saves
    mm 1, 3, 5, 7 (q, v, gate, down) and the flash output + logsumexp; compiled, down_proj's output (the 7th, read
    by no backward node) is not kept: 4096 x 2 B per token less than eager SAC."""
    widths = [4096, 1024, 1024, 4096, 14336, 14336, 4096]
    assert compiled_op_sac_unread_width(widths) == 4096
    assert compiled_op_sac_unread_width([3 * 4096, 4096, 2 * 8192, 4096]) == 0  # (fused qkv, fused gate_up)
    from trainmem.api import build
    spec, eager = build("llama-3.1-8b", engine="fsdp2", gpus=8, precision="amp-bf16", seq_len=8192, micro_batch=2,
                        recompute="selective")
    compiled = eager.model_copy(update={"compile": True})
    T = 2 * 8192
    per_token = 2 * 4096 + 2 * (4096 + 1024 + 14336) + 2 * 32 * 128 + 4 * 32
    assert kept_per_layer(spec, compiled)[0] == T * per_token
    assert kept_per_layer(spec, eager)[0] - kept_per_layer(spec, compiled)[0] == T * 2 * 4096
