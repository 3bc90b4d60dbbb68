"""``trainmem trace``: the CLI contract (same flags as estimate, --compare, --json, exit code 2)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.memory.tiny_configs import TINY  # noqa: E402
from trainmem.cli import main  # noqa: E402


@pytest.fixture()
def tiny_config(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY["llama-gqa"]))
    return str(p)


def test_trace_compare_json(tiny_config, capsys) -> None:
    rc = main(["trace", tiny_config, "--seq-len", "256", "--micro-batch", "2", "--precision", "bf16",
               "--compare", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    d = json.loads(out)
    tr, cmp = d["trace"], d["comparison"]
    assert sum(tr["breakdown_at_peak_bytes"].values()) == tr["peak_allocated_bytes"]
    assert cmp["trace_peak_allocated_bytes"] == tr["peak_allocated_bytes"]
    assert abs(cmp["peak_relative_error"]) < 0.01
    assert {c["category"] for c in cmp["categories"]} >= {"parameters", "activations", "optimizer_states"}


def test_trace_table(tiny_config, capsys) -> None:
    rc = main(["trace", tiny_config, "--seq-len", "128", "--engine", "fsdp2", "--gpus", "4"])
    out = capsys.readouterr().out
    assert rc == 0 and "peak allocated" in out and "communication buffers" in out


@pytest.mark.parametrize("args,needle", [
    (["--engine", "deepspeed"], "cannot trace the deepspeed engine"),
    (["--engine", "megatron", "--tp", "2", "--gpus", "2"], "cannot trace"),
    (["--device", "cuda"], "no CUDA device"),
    (["--device", "tpu"], "device"),
])
def test_trace_refuses_in_one_line(tiny_config, args, needle, capsys) -> None:
    rc = main(["trace", tiny_config, *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err
