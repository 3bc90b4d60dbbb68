"""Hub configs (trainmem/model/hub.py): the download is replaced, the network is never touched."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("huggingface_hub")

from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError, RepositoryNotFoundError  # noqa: E402

import trainmem.model.hub as hub  # noqa: E402
from trainmem.errors import UnknownModelError  # noqa: E402
from trainmem.model.resolve import resolve_model  # noqa: E402

LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 512}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    hub.clear_cache()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield
    hub.clear_cache()


def _serve(monkeypatch, tmp_path, calls, error=None):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))

    def download(repo_id, *, token, offline):
        calls.append((repo_id, token, offline))
        if error is not None:
            raise error
        return str(path)

    monkeypatch.setattr(hub, "_download", download)


def test_a_hub_id_is_fetched_once_with_the_token(monkeypatch, tmp_path):
    calls: list = []
    _serve(monkeypatch, tmp_path, calls)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    spec = resolve_model("someone/tiny-llama")
    assert spec.n_params > 0 and spec.source == "https://huggingface.co/someone/tiny-llama/blob/main/config.json"
    resolve_model("someone/tiny-llama")
    assert calls == [("someone/tiny-llama", "hf_secret", False)]  # cached: asked once


def test_offline_reads_the_cache_only(monkeypatch, tmp_path):
    calls: list = []
    _serve(monkeypatch, tmp_path, calls)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model("someone/tiny-llama").num_layers == 2
    assert calls == [("someone/tiny-llama", None, True)]


@pytest.mark.parametrize("offline", [True, False])
def test_not_cached_without_network_says_how_to_pass_the_file(monkeypatch, tmp_path, offline):
    _serve(monkeypatch, tmp_path, [], error=LocalEntryNotFoundError("no"))
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModelError) as err:
        resolve_model("someone/tiny-llama")
    msg = str(err.value)
    assert "\n" not in msg and "huggingface-cli download someone/tiny-llama config.json" in msg
    assert "pass the file's path" in msg and ("HF_HUB_OFFLINE=1" in msg) == offline


def test_a_connection_error_is_one_line(monkeypatch, tmp_path):
    _serve(monkeypatch, tmp_path, [], error=ConnectionError("down"))
    with pytest.raises(UnknownModelError) as err:
        resolve_model("someone/tiny-llama")
    assert "ConnectionError" in str(err.value) and "pass the file's path" in str(err.value)


def test_a_gated_repository_asks_for_hf_token(monkeypatch, tmp_path):
    import httpx

    response = httpx.Response(401, request=httpx.Request("GET", "https://huggingface.co/x"))
    _serve(monkeypatch, tmp_path, [], error=GatedRepoError("gated", response=response))
    with pytest.raises(UnknownModelError, match="gated repository: set HF_TOKEN") as err:
        resolve_model("meta-llama/some-gated-model")
    assert "\n" not in str(err.value)


def test_an_unknown_repository_is_an_unknown_model(monkeypatch, tmp_path):
    import httpx

    response = httpx.Response(404, request=httpx.Request("GET", "https://huggingface.co/x"))
    _serve(monkeypatch, tmp_path, [], error=RepositoryNotFoundError("nope", response=response))
    with pytest.raises(UnknownModelError, match="unknown model 'someone/nothing-here'; the hub has no such repository"):
        resolve_model("someone/nothing-here")


def test_no_network_answers_from_the_cache_at_once(monkeypatch, tmp_path):
    """Unreachable hub (the TCP check fails): only the cache is asked — huggingface_hub is never called with
    network allowed (it would retry for ~20 s) — and the unknown-model line says how to pass the file."""
    import huggingface_hub

    asked = []

    def fake_download(**kwargs):
        asked.append(kwargs["local_files_only"])
        raise LocalEntryNotFoundError("not cached")

    hub.clear_cache()
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(hub, "_hub_reachable", lambda timeout_s=3.0: False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake_download)
    cfg, why, how = hub.fetch_hub_config("someorg/some-model")
    assert cfg is None and asked == [True]
    assert "the hub cannot be reached" in how and "huggingface-cli download someorg/some-model config.json" in how
