"""``trainmem doctor`` end to end: the corpus (every case's first cause, "none" on healthy inputs), the JSON contract,
bad or mixed-up inputs (one line, exit 2), and Chinese output."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.doctor import snapshots as S
from tests.doctor.conftest import CORPUS, cases
from tests.report.test_zh import assert_chinese
from trainmem.cli import main

LOGS = CORPUS / "logs"
FSDP8 = ["llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--micro-batch", "2"]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["doctor", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def first_cause(args: list[str], capsys) -> str:
    rc, out, err = run([*args, "--json"], capsys)
    assert rc == 0, err
    return json.loads(out)["findings"][0]["cause"]


def _snap(tmp_path, obj: object) -> str:
    p = tmp_path / "snap.pickle"
    p.write_bytes(pickle.dumps(obj))
    return str(p)


INPUT_CASES = [
    *[([f"--error={CORPUS / 'oom' / c['file']}"], c["cause"]) for c in cases("oom") if c["cause"]],
    *[([f"--nvidia-smi={CORPUS / 'nvsmi' / c['file']}"], c["cause"]) for c in cases("nvsmi") if c["cause"]],
    ([f"--log={LOGS / 'healthy.jsonl'}"], "none"),
    ([f"--log={LOGS / 'leaking.jsonl'}"], "leak"),
    ([f"--log={LOGS / 'leak_then_oom.jsonl'}"], "leak"),
    ([f"--log={LOGS / 'eval_grad.jsonl'}"], "eval_without_no_grad"),
    ([f"--log={LOGS / 'eval_no_grad.jsonl'}"], "none"),
    ([f"--log={LOGS / f'multirank.rank{r}.jsonl'}" for r in range(4)], "rank_imbalance"),
    ([f"--log={LOGS / 'gpu_healthy.csv'}", *FSDP8], "none"),
    ([f"--log={LOGS / 'gpu_multirank.csv'}", *FSDP8], "rank_imbalance"),
    ([f"--log={LOGS / 'gpu_fragmentation.csv'}", *FSDP8], "fragmentation"),
    ([f"--log={LOGS / 'gpu_duplicate_fp32.csv'}", "qwen2.5-0.5b", "--micro-batch", "4"], "duplicate_fp32_copy"),
    ([f"--log={LOGS / 'gpu_offload.csv'}", "llama-2-7b", f"--config={CORPUS / 'configs' / 'training_args_ds.json'}",
      "--gpus", "8"], "offload_bottleneck"),
    (["llama-2-7b", "--gpus", "8", "--gpu", "H100-SXM-80G"], "static_overflow"),
    (["llama-2-7b", "--gpus", "8"], "undetermined"),  # 104 GiB of model states: fits an H200, not an H100; --gpu decides
    (["qwen2.5-0.5b"], "none"),
]


@pytest.mark.parametrize("args,cause", INPUT_CASES, ids=lambda x: " ".join(x)[-60:] if isinstance(x, list) else x)
def test_corpus_first_cause(args: list[str], cause: str, capsys) -> None:
    assert first_cause(args, capsys) == cause


@pytest.mark.parametrize("build,cause", [(S.training_peak, "none"), (S.fragmented, "fragmentation"),
                                         (S.eval_kept, "eval_without_no_grad"), (S.loader, "dataloader_memory")])
def test_snapshots(tmp_path, build, cause: str, capsys) -> None:
    assert first_cause(["--snapshot", _snap(tmp_path, build())], capsys) == cause


def test_json_contract(capsys) -> None:
    rc, out, err = run(["--error", str(CORPUS / "oom" / "unallocated_21_backward.txt"), "llama-2-7b", "--micro-batch",
                        "4", "--lora-rank", "16", "--json"], capsys)
    assert rc == 0 and err == ""
    d = json.loads(out)
    assert list(d) == ["findings", "setup", "assumptions"] and len(d["findings"]) >= 2  # (the last two: a MODEL)
    assert d["setup"]["micro_batch"] == 4 and isinstance(d["assumptions"], list)
    for f in d["findings"]:
        assert list(f) == ["cause", "evidence", "expected_bytes", "observed_bytes", "fixes", "likelihood"]
        assert isinstance(f["likelihood"], float) and 0 <= f["likelihood"] <= 1
        assert isinstance(f["evidence"], str) and f["evidence"]
        assert all(v is None or isinstance(v, int) for v in (f["expected_bytes"], f["observed_bytes"]))
        for x in f["fixes"]:
            assert list(x) == ["action", "saves_bytes", "slowdown_pct", "fits"]
            assert isinstance(x["saves_bytes"], int) and isinstance(x["slowdown_pct"], float)
            assert isinstance(x["fits"], bool)
    assert [f["cause"] for f in d["findings"]][:2] == ["fragmentation", "activation_overflow"]
    act = d["findings"][1]
    fits = [x["fits"] for x in act["fixes"] if " (--" in x["action"]
            and not x["action"].startswith(("shorter", "quantized base", "a bigger GPU"))]
    assert fits == sorted(fits, reverse=True)  # compare's order: the options that fit first


def test_stdin_error(monkeypatch, capsys) -> None:
    import io
    import sys
    text = (CORPUS / "oom" / "pin_memory_thread.txt").read_bytes()
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": io.BytesIO(text)})())
    assert first_cause(["--error", "-"], capsys) == "dataloader_memory"


def _bad_inputs(tmp_path) -> list[list[str]]:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    binary = tmp_path / "blob.pickle"
    binary.write_bytes(pickle.dumps(S.training_peak()))
    csv = LOGS / "gpu_healthy.csv"
    trace = CORPUS / "oom" / "unallocated_22_backward.txt"
    return [
        ["--snapshot", str(csv)], ["--snapshot", str(empty)], ["--error", str(binary)], ["--error", str(empty)],
        ["--log", str(binary)], ["--log", str(CORPUS / "nvsmi" / "query_gpu_imbalance.csv")], ["--log", str(trace)],
        ["--nvidia-smi", str(trace)], ["--nvidia-smi", str(CORPUS / "nvsmi" / "noheader.csv")],
        ["--config", str(csv)], ["--error", str(tmp_path / "missing.txt")], ["--error", str(tmp_path)],
        ["--error", str(csv)], [], ["--log", str(LOGS / "healthy.jsonl"), "--lang", "xx"],
        ["no-such-model", "--log", str(LOGS / "healthy.jsonl")],
    ]


@pytest.mark.parametrize("i", range(16))
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, i: int, lang: str) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    args = _bad_inputs(tmp_path)[i]
    rc, out, err = run([*args, *(["--lang", lang] if "--lang" not in args else [])], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1, (rc, out, err)
    if lang == "zh" and "xx" not in args:
        assert err.startswith("错误：")
        assert_chinese(err.replace(str(tmp_path), "/tmp/x").replace(str(CORPUS), "/c"))


ZH_RUNS = [
    ["--error", str(CORPUS / "oom" / "unallocated_21_backward.txt"), "llama-2-7b", "--micro-batch", "4", "--lora-rank", "16"],
    ["--error", str(CORPUS / "oom" / "unallocated_21_pr99699.txt")],
    ["--error", str(CORPUS / "oom" / "cached_pre15.txt")],
    ["--error", str(CORPUS / "oom" / "unallocated_23_large_request.txt")],
    ["--error", str(CORPUS / "oom" / "truncated_shape_bug.txt")],
    ["--error", str(CORPUS / "oom" / "model_load_accelerate.txt"), "llama-2-7b", "--gpus", "8"],
    ["--error", str(CORPUS / "oom" / "pin_memory_thread.txt")],
    ["--nvidia-smi", str(CORPUS / "nvsmi" / "rank0_contexts.txt")],
    ["--nvidia-smi", str(CORPUS / "nvsmi" / "query_leftover.csv")],
    ["--nvidia-smi", str(CORPUS / "nvsmi" / "query_gpu_imbalance.csv")],
    ["--log", str(LOGS / "leak_then_oom.jsonl"), "qwen2.5-0.5b"],
    ["--log", str(LOGS / "eval_grad.jsonl")],
    ["--log", str(LOGS / "gpu_duplicate_fp32.csv"), "qwen2.5-0.5b", "--micro-batch", "4"],
    ["--log", str(LOGS / "gpu_fragmentation.csv"), *FSDP8],
    ["--log", str(LOGS / "gpu_multirank.csv"), "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--pp", "2"],
    ["--log", str(LOGS / "gpu_offload.csv"), "llama-2-7b", "--config", str(CORPUS / "configs" / "training_args_ds.json"),
     "--gpus", "8"],
    ["--log", str(LOGS / "gpu_healthy.csv"), *FSDP8],
    ["qwen2.5-0.5b"],
    ["--nvidia-smi", str(CORPUS / "nvsmi" / "jupyter_on_job_gpu.txt")],
    ["--nvidia-smi", str(CORPUS / "nvsmi" / "other_user_gpu0.txt")],
    ["--error", str(CORPUS / "oom" / "ddp_siblings_gpu0.txt")],
    ["--error", str(CORPUS / "oom" / "ddp_one_sibling_rank_prefix.txt")],
    ["--error", str(CORPUS / "oom" / "private_pools_24.txt")],
    ["--error", str(CORPUS / "oom" / "pinned_to_cpu_wsl2.txt")],
    ["--error", str(CORPUS / "oom" / "adam_exp_avg_sq_no_frame.txt")],
    ["--error", str(CORPUS / "tb" / "nccl_timeout.txt")],
    ["--log", str(LOGS / "gpu_reserved_over_peak.csv")],
    # issue 19: stale copies at save / resume, the fixes compare has no row for, the precision a GPU or engine implies
    ["--error", str(CORPUS / "oom" / "ckpt_save_bnb8bit_rich.txt"), "llama-2-7b", "--lora-rank", "8"],
    ["--error", str(CORPUS / "oom" / "ckpt_resume_optimizer_trainer.txt"), "llama-2-7b", "--gpus", "8", "--engine",
     "fsdp2"],
    ["--error", str(CORPUS / "oom" / "ckpt_save_deepcopy_merge.txt")],
    ["--error", str(CORPUS / "oom" / "unallocated_small_backward.txt"), "llama-2-7b", "--lora-rank", "8", "--gpu",
     "A100-SXM-40G", "--seq-len", "4096"],
    ["llama-3.2-1b", "--gpu", "T4-16G"],
    ["llama-2-7b", "--gpu", "V100-SXM2-32G", "--engine", "deepspeed", "--zero", "2"],
    ["llama-3.2-1b", "--engine", "deepspeed", "--zero", "2", "--precision", "bf16", "--gpus", "2"],
]


@pytest.mark.parametrize("args", ZH_RUNS, ids=lambda a: " ".join(a)[-50:])
def test_report_is_chinese(args: list[str], tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    for extra in ([], ["--json"]):
        rc, out, err = run([*args, "--lang", "zh", *extra], capsys)
        assert rc == 0, err
        text = out if not extra else "\n".join(f["evidence"] + "\n" + "\n".join(x["action"] for x in f["fixes"])
                                               for f in json.loads(out)["findings"])
        assert_chinese(text.replace(str(CORPUS), "/c"))


def test_snapshot_reports_are_chinese(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    for build in (S.fragmented, S.eval_kept, S.loader):
        rc, out, _ = run(["--snapshot", _snap(tmp_path, build()), "--lang", "zh"], capsys)
        assert rc == 0
        assert_chinese(out)


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

_JUNK = st.one_of(st.binary(min_size=1, max_size=300), st.text(min_size=1, max_size=300).map(str.encode),
                  st.sampled_from([b"\x80\x04K\x01.", b"\x80\x04]\x94.", b'{"step": 1}', b"step\n1\n", b"[x]\na=1",
                                   b"|  0  N/A  N/A  1  C  python  12MiB |", b"CUDA out of memory. Tried to allocate"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_JUNK, st.sampled_from(["error", "logs", "nvidia_smi", "snapshot", "config"]))
def test_junk_inputs_never_crash(tmp_path, data: bytes, which: str) -> None:
    """Any bytes as any input: a report or one TrainmemError line, never another exception."""
    from trainmem.doctor.run import DoctorInputs, run_doctor
    from trainmem.errors import TrainmemError

    p = tmp_path / "junk"
    p.write_bytes(data)
    inp = DoctorInputs(**{which: [str(p)] if which == "logs" else str(p)})
    try:
        run_doctor(inp)
    except TrainmemError as e:
        assert "\n" not in str(e)
