"""Tiny ModelSpecs for tracer tests (only hf_config, architecture and model_type matter to the tracer)."""

from __future__ import annotations

from trainmem.model.spec import LayerParams, ModelSpec, ParamCounts

LLAMA_TINY = {
    "model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1024, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 512, "tie_word_embeddings": False,
}
LLAMA_7B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "rms_norm_eps": 1e-5,
    "max_position_embeddings": 4096, "tie_word_embeddings": False,
}


def make_spec(hf_config: dict, architecture: str = "LlamaForCausalLM", name: str = "tiny") -> ModelSpec:
    c = hf_config
    h, L = c.get("hidden_size", 64), c.get("num_hidden_layers", 1)
    heads = c.get("num_attention_heads", 1)
    layer = LayerParams(attention=0, norms=0, mlp=0)
    return ModelSpec(
        name=name, model_type=c["model_type"], architecture=architecture, hidden_size=h, num_layers=L,
        num_attention_heads=heads, num_kv_heads=c.get("num_key_value_heads", heads), head_dim=h // heads,
        v_head_dim=h // heads, intermediate_size=c.get("intermediate_size", 4 * h),
        vocab_size=c.get("vocab_size", 1000), tie_word_embeddings=c.get("tie_word_embeddings", False),
        mlp_gated=True, hidden_act="silu", norm="rmsnorm", position="rope",
        max_position_embeddings=c.get("max_position_embeddings", 2048),
        num_experts=c.get("num_local_experts", c.get("num_experts", c.get("n_routed_experts", 0))) or 0,
        params=ParamCounts(embedding=0, position_embedding=0, layers=(layer,) * L, final_norm=0, lm_head=0),
        hf_config=dict(c),
    )


def assert_matches_trace(spec: ModelSpec, setup, tol: float = 0.01):  # noqa: ANN001, ANN201 - a Comparison
    """The estimate-vs-trace check of the parallel-path tests: the peak within ``tol``, and parameters and
    optimizer states equal up to the trace's per-tensor 512-B rounding (and FSDP2's dim-0 shard padding)."""
    import pytest

    from trainmem.trace.compare import compare

    cmp = compare(spec, setup)
    assert abs(cmp.peak_error) < tol, cmp.to_dict()
    rows = {c: (e, t) for c, e, t, _ in cmp.rows()}
    for cat in ("parameters", "optimizer_states"):
        e, t = rows[cat]
        assert e == pytest.approx(t, rel=0.002, abs=16 * 1024), (cat, e, t)
    return cmp
