"""Issue 19: only the setup given, the estimate does not fit — the overflow is predicted (not observed), the part
read from the estimate's breakdown at its peak; and a GPU that is neither given nor in the evidence is never the
default GPU of a fit judgement (``--gpu`` is what decides; the OOM message's total capacity is used when there)."""

from __future__ import annotations

import json
from pathlib import Path

from trainmem.cli import main
from trainmem.doctor.rules import THRESHOLD

LF_FULL = str(Path(__file__).resolve().parents[1] / "frameworks" / "configs" / "llamafactory_qwen3_full_sft.yaml")
OOM_24G = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity "
           "of 23.69 GiB of which 100.00 MiB is free. Including non-PyTorch memory, this process has 23.58 GiB memory "
           "in use. Of the allocated memory 22.90 GiB is allocated by PyTorch, and 300.00 MiB is reserved by PyTorch "
           "but unallocated.\n")
LORA_7B = ["llama-2-7b", "--lora-rank", "8", "--micro-batch", "4", "--seq-len", "4096", "--precision", "amp-fp16",
           "--recompute", "full"]  # thread lf-781's setup: 24.6 GiB with context; an 80 GB GPU fits it, a 24 GB one not


def _findings(capsys, *args: str) -> list[dict]:
    assert main(["doctor", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["findings"]


def test_full_sft_config_that_does_not_fit_is_a_predicted_static_overflow(capsys) -> None:
    """Qwen3-4B full SFT, ZeRO-3 on 1 GPU (LLaMA-Factory's example): 86.7 GiB with context on a 79.2 GiB H100, the
    peak in the optimizer step (16 B/param of states + the update's temporaries): static_overflow, as a prediction."""
    f = _findings(capsys, "--config", LF_FULL, "--gpu", "H100-SXM-80G")
    top = f[0]
    assert top["cause"] == "static_overflow" and THRESHOLD <= top["likelihood"] < 0.7  # below an observed OOM's
    assert top["evidence"].startswith("predicted, not observed (no OOM given)")
    assert "optimizer step" in top["evidence"] and top["observed_bytes"] is None
    assert top["fixes"] and any(x["fits"] for x in top["fixes"])
    assert any("offload" in x["action"] for x in top["fixes"] if x["fits"])  # compare's rows, with fits


def test_same_config_without_gpu_is_undetermined_and_asks_for_gpu(capsys) -> None:
    f = _findings(capsys, "--config", LF_FULL)
    assert f[0]["cause"] == "undetermined" and "would decide: --gpu" in f[0]["evidence"]
    assert "the whole traceback" not in f[0]["evidence"]  # nothing failed: no traceback to ask for
    assert f[1]["cause"] == "static_overflow" and f[1]["likelihood"] < THRESHOLD
    assert "not judged against the default H100-SXM-80G" in f[1]["evidence"]


def test_same_config_on_a_gpu_it_fits_is_none(capsys) -> None:
    assert [x["cause"] for x in _findings(capsys, "--config", LF_FULL, "--gpu", "H200-SXM-141G")] == ["none"]


def test_activation_peak_is_a_predicted_activation_overflow(capsys) -> None:
    f = _findings(capsys, *LORA_7B, "--gpu", "A10-24G")
    assert f[0]["cause"] == "activation_overflow" and f[0]["likelihood"] >= THRESHOLD
    assert "the step's dynamic memory overflows" in f[0]["evidence"]
    assert _findings(capsys, *LORA_7B, "--gpu", "A100-SXM-80G")[0]["cause"] == "none"


def test_oom_without_gpu_is_not_judged_against_the_default(capsys, tmp_path) -> None:
    """A bare OOM line: no capacity anywhere. Before, "the estimate fits" was said of the default 80 GB GPU."""
    err = tmp_path / "e.txt"
    err.write_text("torch.cuda.OutOfMemoryError: CUDA out of memory.\n")
    f = _findings(capsys, "--error", str(err), *LORA_7B)
    text = " ".join(x["evidence"] for x in f)
    assert f[0]["cause"] == "undetermined" and "would decide: --gpu" in f[0]["evidence"]
    assert "the estimate fits" not in text and "not judged against the default" in text


def test_oom_message_capacity_is_the_gpu(capsys, tmp_path) -> None:
    """The OOM's "total capacity of 23.69 GiB": the estimate (24.6 GiB) is judged against it and overflows."""
    err = tmp_path / "e.txt"
    err.write_text(OOM_24G)
    f = _findings(capsys, "--error", str(err), *LORA_7B)
    assert f[0]["cause"] == "activation_overflow" and f[0]["likelihood"] >= THRESHOLD
    assert "--gpu" not in " ".join(x["evidence"] for x in f)
