"""Trace truth for ``--compile``: a whole training step of a small llama-shaped transformers model, each decoder
layer and the loss compiled with ``torch.compile(backend="inductor")`` (torchtitan's apply_compile: one
``torch.compile`` per block, and its compiled loss), run for real on the CPU; what the step's forward keeps for
backward (``saved_tensors_hooks``, by storage: the compiled layers' and loss's partitioned forward outputs, the eager
embedding, final norm and head) against ``estimate --compile``'s activations when the backward starts.

What the CPU run stands for (docs/accuracy.md): the same min-cut partition as CUDA inductor (the partitioner
runs before device lowering), SDPA's CPU flash kernel where CUDA runs FlashAttention (both save q, k, v, the
output and an fp32 logsumexp).
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.measure import _build  # noqa: E402
from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.memory.estimate import estimate  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402

CFG = dict(TINY["llama-gqa"], num_hidden_layers=1)  # (one block: one inductor compilation, ~40 s cold on 2 cores)
B, S = 2, 128


def _saved_by_compiled_step_bytes(backend: str = "inductor", checkpointed: bool = False,
                                  cfg: dict | None = None) -> tuple[int, float]:
    """(bytes the forward keeps for backward, seconds of the step including compilation): every decoder layer and
    the loss compiled with ``backend``, as the frameworks do (torchtitan: ``apply_compile`` per block and
    ``build_cross_entropy_loss``; torchtune: each layer and ``compile_loss``); transformers' ``ForCausalLMLoss``
    stands for the loss. ``checkpointed``: each block checkpointed inside its compiled region (torchtitan's
    apply_ac, then apply_compile). The model output is dropped before backward (--loop trainer)."""
    from tests.memory.compile_measure import _compile_layer, host_rng_state

    cfg = cfg or CFG
    torch._dynamo.reset()
    model = _build(cfg, "sdpa", torch.bfloat16)
    for layer in model.model.layers:
        _compile_layer(layer, backend, checkpointed)
    loss_fn = torch.compile(model.loss_function, backend=backend)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if not host_rng_state(t):  # (a compiled checkpoint's CPU generator state: host memory on a GPU run)
            st = t.untyped_storage()
            saved[st.data_ptr()] = st.nbytes()
        return t

    ids = torch.randint(0, cfg["vocab_size"], (B, S))
    t0 = time.perf_counter()
    # (one compile thread: on two cores inductor's worker pool costs more than it saves)
    with torch._inductor.config.patch(compile_threads=1), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(input_ids=ids, use_cache=False).logits
        loss = loss_fn(logits, ids, vocab_size=cfg["vocab_size"])
    del logits
    loss.backward()
    return sum(n for ptr, n in saved.items() if ptr not in params), time.perf_counter() - t0


def test_inductor_compiled_step_agrees_with_estimate_compile() -> None:
    measured, seconds = _saved_by_compiled_step_bytes()
    spec = spec_from_hf_config(CFG, name="llama-gqa")
    est = estimate(spec, make_setup(precision="bf16", seq_len=S, micro_batch=B, compile=True))
    at_backward = next(c["activations"] for (phase, _), c in zip(est.timeline, est.timeline_categories)
                       if phase.startswith("backward"))
    eager = estimate(spec, make_setup(precision="bf16", seq_len=S, micro_batch=B))
    eager_at_backward = next(c["activations"] for (phase, _), c in zip(eager.timeline, eager.timeline_categories)
                             if phase.startswith("backward"))
    assert at_backward == pytest.approx(measured, rel=0.03), (at_backward, measured)
    assert eager_at_backward > 1.2 * measured  # (the eager estimate would be far off: compile is modelled)
    print(f"inductor step {seconds:.0f} s (5 s with inductor's cache warm, ~70 s cold on two busy cores)")


def test_checkpointed_compiled_step_agrees_with_estimate_compile_full_recompute() -> None:
    """torchtitan's apply_ac + apply_compile on every block (the partitioner's cut, without inductor's kernels):
    the step keeps each block's input and the eager embedding, final norm, head and loss."""
    from tests.memory.compile_measure import PARTITION_BACKEND

    measured, _ = _saved_by_compiled_step_bytes(PARTITION_BACKEND, checkpointed=True)
    spec = spec_from_hf_config(CFG, name="llama-gqa")
    est = estimate(spec, make_setup(precision="bf16", seq_len=S, micro_batch=B, compile=True, recompute="full"))
    at_backward = next(c["activations"] for (phase, _), c in zip(est.timeline, est.timeline_categories)
                       if phase.startswith("backward"))
    assert at_backward == pytest.approx(measured, rel=0.03), (at_backward, measured)


# ------------------------------------------------------------------ trainmem trace --compile (trace/compiled.py)
REAL = [("llama-3.1-8b", dict(precision="bf16")), ("qwen3-8b", dict(seq_len=1024)),  # (amp: CPU autocast)
        ("gpt2", dict(precision="bf16")), ("llama-3.1-8b", dict(precision="bf16", recompute="full"))]


@pytest.mark.parametrize("name,kw", REAL, ids=[f"{n}-{'-'.join(map(str, kw.values()))}" for n, kw in REAL])
def test_trace_compile_partitions_the_real_sized_layer_as_estimated(name: str, kw: dict) -> None:
    """At the catalog model's real size (fake tensors), torch's partitioner keeps exactly what estimate --compile
    says: the tiny models' rules hold at 4096-wide layers (the min cut could have chosen otherwise)."""
    from trainmem.api import build
    from trainmem.trace.compiled import trace_compiled_layer

    spec, setup = build(name, compile=True, **kw)
    res = trace_compiled_layer(spec, setup)
    assert res.saved_bytes > 0 and res.estimate_bytes == res.saved_bytes, res.to_dict()


def test_trace_compile_cli(capsys) -> None:
    import json

    from trainmem.cli import main

    assert main(["trace", "gpt2", "--compile", "--precision", "bf16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["compiled_layer_saved_bytes"] == d["estimate_layer_bytes"] and d["relative_error"] == 0.0
    assert main(["trace", "gpt2", "--compile", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot trace --compile") and err.count("\n") == 1


def test_compiled_loss_step_agrees_with_estimate_compile() -> None:
    """A vocabulary that makes the loss count (8192): the compiled loss keeps the 16-bit logits and two fp32 values
    per token, no fp32 log-softmax (the eager-loss estimate is +69 % here)."""
    from tests.memory.compile_measure import PARTITION_BACKEND

    cfg = dict(CFG, num_hidden_layers=2, vocab_size=8192)
    measured, _ = _saved_by_compiled_step_bytes(PARTITION_BACKEND, cfg=cfg)
    est = estimate(spec_from_hf_config(cfg, name="llama-gqa"),
                   make_setup(precision="bf16", seq_len=S, micro_batch=B, compile=True))
    at_backward = next(c["activations"] for (phase, _), c in zip(est.timeline, est.timeline_categories)
                       if phase.startswith("backward"))
    assert at_backward == pytest.approx(measured, rel=0.03), (at_backward, measured)
