"""A model given as a path that is not there says so (it said "unknown model '/nonexistent/config.json'"); with
``local_paths=False`` (the web API without --allow-paths) no file is looked at."""

from __future__ import annotations

import json

import pytest

from trainmem.cli import main
from trainmem.errors import UnknownModelError
from trainmem.model.resolve import names_a_file, resolve_model


@pytest.mark.parametrize("ref", ["/nonexistent/config.json", "./nope/config.json", "../nope", "~/nope/config.json",
                                 "nope.json", "C:\\models\\config.json"])
def test_a_missing_file_is_not_found(ref: str, capsys) -> None:
    assert names_a_file(ref)
    with pytest.raises(UnknownModelError, match=r"^no such file .* \(a model given as a path is a config\.json"):
        resolve_model(ref)
    assert main(["estimate", ref]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no such file") and err.count("\n") == 1


@pytest.mark.parametrize("ref", ["llama-3.1-8b", "7B", "Qwen/Qwen2.5-7B-Instruct", "llama3-8b", "nosuchmodel"])
def test_names_that_are_not_paths(ref: str) -> None:
    assert not names_a_file(ref)


def test_local_paths_off_reads_no_file(tmp_path, monkeypatch) -> None:
    cfg = dict(resolve_model("qwen2.5-0.5b").hf_config)
    (tmp_path / "7B").mkdir()
    (tmp_path / "7B" / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    assert resolve_model("7B").model_type == "qwen2"            # the folder wins, as the CLI reads it
    assert resolve_model("7B", local_paths=False).model_type == "llama"  # the bare size: no file looked at
