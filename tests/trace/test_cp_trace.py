"""fsdp2 + context parallelism, estimate against trace: rank 0 of torch's ring attention over SDPA
(``_templated_ring_attention[_backward]`` run as they are, trace/cp.py) with torchtitan's head-tail sharded
batch, on a fake process group: cp alone and cp × dp (FSDP2 over the flattened dp_shard × cp mesh)."""

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

_SHAPE = dict(engine="fsdp2", precision="bf16")
# vocabulary 64: the loss is small, so the peak falls in the last layer's ring-attention backward
_CONFIGS = {**TINY, "llama-v64": dict(TINY["llama"], vocab_size=64)}
CASES = [
    ("llama-gqa", dict(gpus=2, cp=2, seq_len=1024, micro_batch=2)),                     # peak at the loss
    ("llama", dict(gpus=4, cp=4, seq_len=1024, micro_batch=1, precision="amp-bf16")),   # 16-bit param_dtype
    ("qwen2", dict(gpus=4, cp=2, seq_len=1024, micro_batch=2, zero=2)),                 # cp × dp, tied
    ("llama-v64", dict(gpus=2, cp=2, seq_len=2048, micro_batch=2)),                     # ring backward peak
    ("qwen3", dict(gpus=2, cp=2, seq_len=1024, micro_batch=1, grad_accum=2)),
    ("llama-v64", dict(gpus=2, cp=2, seq_len=2048, micro_batch=2, recompute="full")),  # recomputed ring
]


def _id(fam: str, kw: dict) -> str:
    return f"{fam}-" + "-".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("fam,kw", CASES, ids=[_id(f, k) for f, k in CASES])
def test_cp_estimate_matches_trace(fam: str, kw: dict) -> None:
    cmp = assert_matches_trace(spec_from_hf_config(_CONFIGS[fam], name=fam), make_setup(**{**_SHAPE, **kw}))
    assert any("ring attention" in e for e in cmp.trace.emulations)


def test_ring_attention_replay_matches_the_traced_ring() -> None:
    """memory/context_parallel.py's closed forms against torch's ring functions on fake tensors: the peak
    above the call's start, forward and backward, rank 0 (GQA, MHA, MQA; b > 1; cp 2, 3, 4)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.memory.context_parallel import RingShape, ring_backward_peak, ring_forward_peak
    from trainmem.trace import cp as cpm
    from trainmem.trace.fsdp import fake_world
    from trainmem.trace.tracker import StorageTracker

    shapes = [(1, 2048, 8, 2, 32, 2), (2, 1024, 8, 8, 32, 4), (1, 768, 8, 1, 32, 2), (3, 1536, 4, 2, 64, 3)]
    for b, s, a, kv, d, n in shapes:
        peaks: dict[str, int] = {}
        with fake_world(n, cp=n) as mesh, FakeTensorMode():
            tr = StorageTracker()
            with tr, cpm.ring_attention(mesh):
                leaves = [torch.empty(b, s // n, h, d, dtype=torch.bfloat16, requires_grad=True) for h in (a, kv, kv)]
                q, k, v = ((leaves[0] * 1).transpose(1, 2), (leaves[1] * 1).transpose(1, 2), leaves[2].transpose(1, 2))
                base = tr.allocated
                tr.start_recording("f")
                o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != a)
                peaks["forward"] = tr.peak - base
                o = o.transpose(1, 2).contiguous()
                g = torch.empty_like(o)
                base = tr.allocated
                tr.start_recording("b")
                o.backward(g)
                peaks["backward"] = tr.peak - base  # (the leaves' gradients come after the ring's peak)
        r = RingShape(b, s // n, a, kv, d, n)
        want = (ring_forward_peak(r), ring_backward_peak(r))
        assert (peaks["forward"], peaks["backward"]) == want, (b, s, a, kv, d, n)


@pytest.mark.parametrize("fam,kw,why", [
    ("mistral-window", dict(gpus=2, cp=2), "sliding window"),
    ("llama", dict(gpus=4, cp=2, tp=2), "tp"),
    ("llama", dict(gpus=2, cp=2, precision="fp32"), "flash"),
    ("mixtral", dict(gpus=2, cp=2), "mixtral"),
])
def test_cp_trace_refuses_unverified_setups(fam: str, kw: dict, why: str) -> None:
    spec = spec_from_hf_config(TINY[fam], name=fam)
    with pytest.raises(UnsupportedError, match=rf"cannot trace cp.*{why}"):
        check_traceable(spec, make_setup(**{**_SHAPE, "seq_len": 512, **kw}))
