"""``--lang zh``: every user-facing string goes through the message catalogue (issue 7, item 5).

Three nets, each failing with the English text that has no Chinese entry:

- the CLI run in-process on a representative set of commands (estimate table and ``--explain``, explain
  for every engine, LoRA/QLoRA/offload, ``--max-micro-batch``, a traced step when torch is here) and on
  bad inputs of every kind: no run of 3+ English words may be left once flag names, code spans, quoted
  values, identifiers, numbers, units and technical terms are taken out; full-width punctuation
  between Chinese characters;
- every message the library *can* produce, read from its source: the string of each
  ``raise ConfigError/UnknownModelError/UnsupportedError(...)`` (and the validators' ``ValueError``),
  of each ``notes.append(...)`` / ``emulations.append(...)``, of the assumption lists and note tables,
  with the holes of its f-string filled in, must match a catalogue entry — so a message another
  engineer adds fails here until it has one;
- every assumption, phase and explain line of a set of estimates.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from pathlib import Path

import pytest

import trainmem
from trainmem.api import build
from trainmem.cli import main
from trainmem.memory import estimate
from trainmem.report.explain import accountings, explain_lines
from trainmem.report.i18n import tr

from tests.test_bad_input import BAD_MODELS

PKG = Path(trainmem.__file__).resolve().parent

# --------------------------------------------------------------------------- what counts as English left

#: Technical words a Chinese engineer writes in Latin letters; they break a run like punctuation does.
TECH = {w.lower() for w in """
    ZeRO FSDP FSDP2 DeepSpeed Megatron Megatron-LM LoRA QLoRA PEFT AdamW Adam Adafactor SGD sgd momentum lion
    bf16 fp16 fp32 sdpa eager flash attention softcapping logit logits loss mlp norm embedding MoE GQA RoPE rope
    torch torchrun torchtitan transformers bitsandbytes Liger litgpt torchtune HF Hugging Face Hub Trainer TRL
    CUDA cuBLAS CPU GPU NVIDIA nvidia-smi DDP TP dtype param grad kernel kernel kernels tensor fake stream
    segment segments bucket buckets block GPT hidden state weight decay caching allocator reduce-scatter
    all-gather root micro-batch micro-batches trainer script none full selective chunked fused-linear hf amp
    trainmem estimate explain trace models gpus GradScaler CPUOffloadPolicy SequenceParallel FusedAdam
    DeepSpeedCPUAdam AccumulateGrad ZeRO-Offload Korthikanti Rajbhandari et al stage LM head ipg
    model_type foreach NF4 enable_input_require_grads main-grad max min ep tp pp cp dp vpp sp gpu lang device
    nn Linear router dim unit
""".split()}
_REMOVE = re.compile(r"`[^`]*`|https?://\S+|'[^']*'|\"[^\"]*\"|(?<![\w-])--?[A-Za-z][\w-]*")
_BREAK = re.compile(r"[,;:!?()\[\]{}]|\.(?=\s|$)")
_WORD = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*(?:'s)?")
_CJK = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"


def english_runs(text: str) -> list[str]:
    """Runs of 3+ English words left in ``text`` (one list entry per run)."""
    runs = []
    for line in text.splitlines():
        line = _BREAK.sub(" | ", _REMOVE.sub(" | ", line))
        run: list[str] = []
        for tok in [*line.split(), "|"]:
            if _WORD.fullmatch(tok) and tok.lower().removesuffix("'s") not in TECH:
                run.append(tok)
                continue
            if len(run) >= 3:
                runs.append(" ".join(run))
            run = []
    return runs


_ASCII_PUNCT_NEAR_CJK = re.compile(rf"[{_CJK}]\s*[;:,]|[;:,]\s*[{_CJK}]|[\u4e00-\u9fff][()]|[()][\u4e00-\u9fff]")


def ascii_punctuation_in_chinese(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if _ASCII_PUNCT_NEAR_CJK.search(ln)]


def run_zh(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "2000")  # one table row on one line: no word cut by wrapping
    rc = main([*args, "--lang", "zh"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_chinese(text: str) -> None:
    assert re.search(r"[\u4e00-\u9fff]", text), text
    left = english_runs(text)
    assert not left, "English left in the zh output (add entries to trainmem/report/messages_zh.py):\n" + \
        "\n".join(left) + "\n---\n" + text
    bad = ascii_punctuation_in_chinese(text)
    assert not bad, "ASCII ; : , ( ) next to Chinese characters:\n" + "\n".join(bad)


def test_detector() -> None:
    assert english_runs("峰值出现在: optimizer step; the model output is freed") == ["the model output is freed"]
    assert english_runs("梯度（`--micro-batch 2`，llama-3.1-8b，H100-SXM-80G，ZeRO-3 stage 2）") == []
    assert ascii_punctuation_in_chinese("放不下 H100 (79.6 GiB); 峰值出现在: x") != []
    assert ascii_punctuation_in_chinese("H100（79.6 GiB）放不下：还差 55.19 GiB；峰值出现在优化器更新阶段。") == []


def test_catalogue_is_well_formed() -> None:
    """Each Chinese template fills only holes its English pattern has; no entry is listed twice."""
    from trainmem.report import messages_zh as m
    from trainmem.report.i18n import _catalogue

    _catalogue("zh")  # compiles every pattern (a conversion in an English pattern raises)
    for en, zh in m.PATTERNS:
        holes = set(re.findall(r"\{(\w+)(?::\w)?\}", en))
        assert holes and set(re.findall(r"\{(\w+)(?:![tl])?\}", zh)) <= holes, (en, zh)
        assert not re.search(rf"[{_CJK}]", en) and re.search(rf"[{_CJK}]", zh), (en, zh)
    assert len({en for en, _ in m.PATTERNS}) == len(m.PATTERNS)
    assert all(re.search(rf"[{_CJK}]", zh) for zh in m.EXACT.values())


def test_long_messages_translate_quickly() -> None:
    """A 10,000-character model name or a message of many clauses: no regex blow-up (the fuzz test
    feeds such inputs through ``--lang zh``). The catalogue is compiled first: the bound is on matching."""
    import time
    from trainmem.report.i18n import _catalogue
    _catalogue("zh")
    start = time.perf_counter()
    for msg in ("unknown model '" + "x; " * 3000 + "'", "a; " * 2000 + "b", "(" * 5000 + ": " * 3000,
                "cannot read '" + "a/" * 5000 + "' as JSON: Extra data: line 1 column 9 (char 8)"):
        tr(msg, "zh")
    assert time.perf_counter() - start < 1.0


# --------------------------------------------------------------------------- the done-means command

def test_explain_deepspeed_zero2_is_all_chinese(capsys, monkeypatch) -> None:
    rc, out, err = run_zh(["explain", "llama-2-7b", "--engine", "deepspeed", "--zero", "2", "--gpus", "8"],
                          capsys, monkeypatch)
    assert rc == 0, err
    assert_chinese(out)
    assert "主权重" in out and "ZeRO 论文" in out and "激活值" in out


def test_result_line_reads_as_chinese(capsys, monkeypatch) -> None:
    rc, out, _ = run_zh(["estimate", "llama-2-7b", "--micro-batch", "8"], capsys, monkeypatch)
    assert rc == 0
    line = next(ln for ln in out.splitlines() if "放不下" in ln)
    assert re.fullmatch(r"H100-SXM-80G（[\d.]+ GiB）放不下：还差 [\d.]+ GiB；峰值出现在.+阶段；可训练参数 [\d,]+ 个。", line), line
    rc, out, _ = run_zh(["estimate", "qwen2.5-0.5b"], capsys, monkeypatch)
    assert re.search(r"（[\d.]+ GiB）放得下：余量 [\d.]+ GiB；", out), out


# --------------------------------------------------------------------------- representative commands

COMMANDS = [
    ["estimate", "llama-3.1-8b", "--explain"],
    ["estimate", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--seq-len", "4096", "--micro-batch", "2"],
    ["estimate", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--max-micro-batch"],
    ["estimate", "llama-3.2-1b", "--max-micro-batch", "--seq-len", "16", "--gpu-memory", "1000000GiB"],
    ["estimate", "llama-2-7b", "--gpu", "T4", "--precision", "amp-fp16", "--seq-len", "65536", "--max-micro-batch"],
    ["explain", "llama-2-7b", "--gpus", "4"],
    ["explain", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8"],
    ["explain", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--tp", "2", "--pp", "2"],
    ["explain", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "2", "--tp", "2"],
    *[["explain", "llama-2-7b", "--engine", "deepspeed", "--zero", str(z), "--gpus", "8"] for z in range(4)],
    ["explain", "llama-3.1-8b", "--engine", "megatron", "--gpus", "8", "--tp", "2", "--pp", "2", "--zero", "1"],
    ["explain", "mixtral-8x7b", "--engine", "megatron", "--gpus", "16", "--tp", "2", "--pp", "2", "--ep", "2",
     "--vpp", "2", "--sp"],
    ["explain", "llama-3.1-8b", "--lora-rank", "16", "--recompute", "full"],
    ["explain", "llama-3.1-8b", "--lora-rank", "16", "--qlora", "--lora-targets", "all-linear"],
    ["explain", "llama-2-7b", "--engine", "deepspeed", "--zero", "3", "--gpus", "8", "--offload", "optimizer+params"],
    ["explain", "llama-2-7b", "--engine", "deepspeed", "--zero", "2", "--gpus", "8", "--offload", "optimizer"],
    ["explain", "llama-2-7b", "--engine", "fsdp2", "--gpus", "8", "--offload", "optimizer+params"],
    ["explain", "llama-2-7b", "--engine", "megatron", "--gpus", "8", "--zero", "1", "--offload", "optimizer"],
    ["estimate", "gpt2"], ["estimate", "gemma-2-2b"], ["estimate", "roberta-base"],
    ["estimate", "llama3-8b", "--gpu-memory", "96GiB", "--attn", "flash"],
    ["estimate", "qwen2.5-7b-instruct", "--gpu", "a100-80gb", "--precision", "bf16", "--recompute", "full"],
    ["estimate", "llama3-8b-instruct", "--seq-len", "16384"],
    ["estimate", "7B", "--recompute", "selective", "--loss", "chunked", "--loop", "script"],
    ["estimate", "7B", "--loss", "fused-linear", "--optimizer", "sgd-momentum", "--precision", "fp32"],
    ["estimate", "7B", "--optimizer", "adamw-8bit", "--precision", "amp-fp16", "--gpu", "V100-32G"],
    ["estimate", "7B", "--optimizer", "adafactor", "--grad-accum", "4", "--micro-batch", "2"],
    ["estimate", "llama-2-7b", "--seq-len", "8192"],
    ["plan", "llama-3.2-1b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64", "--seq-len", "2048", "--top", "3"],
    ["plan", "qwen2.5-1.5b", "--cluster", "8xA100-SXM-80G,4xRTX-3090-24G", "--global-batch", "96", "--seq-len", "2048"],
    ["plan", "llama-3.1-8b", "--min-gpus", "--gpu", "A100-SXM-40G", "--global-batch", "32", "--seq-len", "4096"],
    ["compare", "llama-3.1-8b", "--engine", "deepspeed", "--zero", "1", "--gpus", "8", "--precision", "mixed-bf16"],
    ["compare", "llama-3.1-8b", "--engine", "fsdp2", "--gpus", "8", "--precision", "fp32"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_command_output_is_chinese(args: list[str], capsys, monkeypatch) -> None:
    rc, out, err = run_zh(args, capsys, monkeypatch)
    assert rc == 0, err
    assert_chinese(out)


# --------------------------------------------------------------------------- every kind of error

BAD_INPUTS = [
    ["estimate"], ["frobnicate"], ["estimate", "llama-2-7b", "--no-such-flag"], ["estimate", "llama-2-7b", "--seq"],
    ["estimate", "llama-2-7b", "--seq-len"], ["estimate", "llama-2-7b", "extra"],
    ["estimate", "llama-2-7b", "--micro-batch", "x"], ["estimate", "llama-2-7b", "--micro-batch", "0"],
    ["estimate", "llama-2-7b", "--engine", "foo"], ["estimate", "llama-2-7b", "--precision", "fp8"],
    ["estimate", "llama-2-7b", "--engine", "deepspeed", "--zero", "5"],
    ["estimate", "llama-2-7b", "--precision", "mixed-bf16"],
    ["estimate", "llama-2-7b", "--engine", "deepspeed", "--precision", "amp-bf16"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--dp", "3", "--tp", "2", "--gpus", "8"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--tp", "3", "--gpus", "8"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--tp", "3", "--gpus", "3"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--pp", "64", "--gpus", "64"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--ep", "2", "--gpus", "2"],
    ["estimate", "mixtral-8x7b", "--engine", "megatron", "--ep", "3", "--gpus", "3"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--tp", "2", "--cp", "3", "--gpus", "6", "--seq-len", "1000"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--pp", "2", "--vpp", "3", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "fsdp2", "--zero", "1", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--sp", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--sp"], ["estimate", "llama-2-7b", "--tp", "2", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "deepspeed", "--tp", "2", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--attn", "flash", "--precision", "fp32"],
    ["estimate", "llama-2-7b", "--offload", "optimizer"],
    ["estimate", "llama-2-7b", "--engine", "deepspeed", "--offload", "optimizer", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "deepspeed", "--zero", "2", "--offload", "optimizer+params", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "fsdp2", "--offload", "optimizer", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--offload", "optimizer", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "deepspeed", "--zero", "2", "--offload", "optimizer", "--optimizer",
     "adamw-8bit", "--gpus", "2"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--loss", "chunked"],
    ["estimate", "llama-2-7b", "--engine", "fsdp2", "--tp", "2", "--gpus", "2", "--loss", "chunked"],
    ["estimate", "llama-2-7b", "--engine", "megatron", "--loop", "script"],
    ["estimate", "llama-2-7b", "--qlora"], ["estimate", "llama-2-7b", "--engine", "megatron", "--lora-rank", "8"],
    ["estimate", "llama-2-7b", "--lora-rank", "8", "--qlora", "--precision", "fp32"],
    ["estimate", "llama-2-7b", "--loss-chunks", "4"],
    ["estimate", "llama-2-7b", "--engine", "fsdp2", "--tp", "2", "--gpus", "2", "--sp", "--no-sp"],
    ["estimate", "llama-2-7b", "--no-sp"], ["estimate", "llama-2-7b", "--no-loss-parallel"],
    ["estimate", "no-such-model"], ["estimate", "llama-3-7b"], ["estimate", "/nonexistent/config.json"],
    ["estimate", "llama-2-7b", "--gpu", "H999"], ["estimate", "llama-2-7b", "--gpu", "H10"],
    ["estimate", "llama-2-7b", "--gpu", "V100-32G", "--precision", "amp-bf16"], ["estimate", "llama-2-7b", "--gpu-memory", "12XB"],
    ["estimate", "llama-2-7b", "--gpu-memory", "0GB"],
    ["estimate", "llama-2-7b", "--lora-rank", "8", "--lora-targets", "foo"],
    ["estimate", "mixtral-8x7b", "--lora-rank", "8", "--lora-targets", "w1"],
    ["estimate", "qwen1.5-moe-a2.7b", "--lora-rank", "8", "--lora-targets", "gate"],
    ["estimate", "llama-2-7b", "--lora-rank", "100000"], ["estimate", "llama-2-7b", "--lora-rank", "8",
                                                          "--lora-targets", ","],
    ["estimate", "llama-2-7b", "--seq-len", "100000000"], ["estimate", "gemma-2-9b", "--attn", "sdpa"],
    ["estimate", "gpt2", "--seq-len", "4096"], ["estimate", "roberta-base", "--seq-len", "513"],
    ["estimate", "bert-large-uncased", "--engine", "megatron"],
    ["trace", "llama-2-7b", "--device", "tpu"], ["trace", "llama-2-7b", "--engine", "deepspeed"],
    ["trace", "llama-2-7b", "--gpus", "2"], ["trace", "llama-2-7b", "--engine", "fsdp2", "--tp", "2", "--pp", "2",
                                              "--gpus", "4"],
    ["trace", "llama-2-7b", "--optimizer", "adamw-8bit"], ["trace", "llama-2-7b", "--lora-rank", "8", "--qlora"],
    ["trace", "llama-2-7b", "--lora-rank", "8", "--engine", "fsdp2", "--gpus", "2"],
    ["trace", "llama-2-7b", "--attn", "flash"], ["trace", "llama-2-7b", "--recompute", "selective"],
    ["trace", "llama-2-7b", "--engine", "fsdp2", "--gpus", "2", "--precision", "amp-fp16"],
    ["trace", "llama-2-7b", "--engine", "fsdp2", "--gpus", "2", "--offload", "optimizer+params"],
    ["trace", "llama-2-7b", "--grad-accum", "4096"], ["trace", "roberta-base", "--loss", "chunked"],
]


@pytest.mark.parametrize("args", BAD_INPUTS, ids=lambda a: " ".join(a))
def test_error_line_is_chinese(args: list[str], capsys, monkeypatch) -> None:
    rc, out, err = run_zh(args, capsys, monkeypatch)
    assert rc == 2 and out == "", (rc, out, err)
    assert err.count("\n") == 1 and err.startswith("错误："), err
    assert_chinese(err)


@pytest.mark.parametrize("key", sorted(BAD_MODELS))
def test_impossible_model_error_is_chinese(key: str, tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(BAD_MODELS[key][0]))
    rc, out, err = run_zh(["estimate", str(path), "--seq-len", "128"], capsys, monkeypatch)
    assert rc == 2 and err.startswith("错误："), err
    assert_chinese(err)


def test_bad_json_errors_are_chinese(tmp_path, capsys, monkeypatch) -> None:
    for text in ("[" * 100_000 + "]" * 100_000, "[1, 2]", "{not json", "", '{"a": 1} x', '{"a": "\x01"}',
                 '{"model_type": "nope"}', "{}"):
        path = tmp_path / "config.json"
        path.write_text(text)
        rc, _, err = run_zh(["estimate", str(path)], capsys, monkeypatch)
        assert rc == 2, err
        assert_chinese(err.replace(str(path), "config.json"))
    path.write_bytes(b"\xff\xfe")
    rc, _, err = run_zh(["estimate", str(path)], capsys, monkeypatch)
    assert rc == 2 and "无法按" in err, err
    (tmp_path / "folder").mkdir()
    rc, _, err = run_zh(["estimate", str(tmp_path / "folder")], capsys, monkeypatch)
    assert rc == 2 and "没有 config.json" in err, err


# --------------------------------------------------------------------------- every message in the source

_ERRORS = {"ConfigError", "UnknownModelError", "UnsupportedError"}
_VALUE_ERROR_MODULES = {"setup.py", "units.py"}  # their ValueError becomes a ConfigError line
_LISTS = {"notes", "emulations"}


def _variants(node: ast.AST) -> list[str] | None:
    """The texts a string expression can produce, each hole filled with "8" or left empty."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        a, b = _variants(node.body), _variants(node.orelse)
        return (a or ["8"]) + (b or ["8"]) if (a or b) else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append([v.value])
            else:
                inner = _variants(v.value)  # type: ignore[attr-defined]
                parts.append(inner if inner else ["8", ""])
        return ["".join(p) for p in itertools.islice(itertools.product(*parts), 512)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _variants(node.left), _variants(node.right)
        if a is None and b is None:
            return None
        fill = ["8", "https://huggingface.co/x/config.json"]  # a value (spec.source: a URL or a path)
        return [x + y for x in (a or fill) for y in (b or fill)]
    return None


def _source_messages() -> list[tuple[str, list[str]]]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if "report" in path.parts:
            continue
        where = str(path.relative_to(PKG.parent))
        for node in ast.walk(ast.parse(path.read_text())):
            msg = None
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                name = getattr(node.exc.func, "id", None)
                if name in _ERRORS or (name == "ValueError" and path.name in _VALUE_ERROR_MODULES):
                    msg = _variants(node.exc.args[0])
            elif isinstance(node, ast.Call) and node.args:
                f = node.func
                if isinstance(f, ast.Name) and f.id == "_no" and path.name == "support.py":  # cannot trace ...
                    inner = _variants(node.args[0])
                    msg = [f"cannot trace {m}; use `trainmem estimate`" for m in inner] if inner else None
                elif (isinstance(f, ast.Attribute) and f.attr == "append" and isinstance(f.value, ast.Name)
                      and (f.value.id in _LISTS or (f.value.id == "out" and path.name == "estimate.py"))):
                    msg = _variants(node.args[0])
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.List, ast.Dict)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {getattr(t, "id", None) for t in targets}
                lists = _LISTS | ({"out"} if path.name == "estimate.py" else set())
                if isinstance(node.value, ast.List) and names & lists:
                    elts = node.value.elts
                elif isinstance(node.value, ast.Dict) and any(n and (n.endswith("NOTE") or n == "_NO_SDPA")
                                                              for n in names):
                    elts = node.value.values
                else:
                    elts = []
                found += [(f"{where}:{e.lineno}", v) for e in elts if (v := _variants(e))]
            elif isinstance(node, ast.FunctionDef) and ("note" in node.name or "assumption" in node.name):
                for ret in ast.walk(node):  # return [f"warning: ..."]
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.List):
                        found += [(f"{where}:{e.lineno}", v) for e in ret.value.elts if (v := _variants(e))]
            if msg:
                found.append((f"{where}:{node.lineno}", msg))
    return found


def test_every_message_in_the_source_has_a_chinese_entry() -> None:
    messages = _source_messages()
    assert len(messages) > 80  # the scan sees the raise sites and assumption lists
    missing = [f"{where}: {variants[0]!r}" for where, variants in messages
               if all(tr(v, "zh") == v for v in variants)]
    assert not missing, "no zh entry (add one to trainmem/report/messages_zh.py):\n" + "\n".join(missing)


# --------------------------------------------------------------------------- library output

SETUPS = [(c[1], c[2:]) for c in COMMANDS if c[0] in ("estimate", "explain") and "--max-micro-batch" not in c]


def _fields(flags: list[str]) -> dict:
    out, i = {}, 0
    while i < len(flags):
        key = flags[i].removeprefix("--").replace("-", "_")
        if key in ("explain",):
            i += 1
            continue
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out[key] = flags[i + 1]
            i += 2
        else:
            out[key] = True
            i += 1
    return out


def test_every_assumption_phase_and_explain_line_translates() -> None:
    missing = set()
    for model, flags in SETUPS:
        spec, setup = build(model, **_fields(flags))
        est = estimate(spec, setup)
        texts = [*est.assumptions, *(p for p, _ in est.timeline), est.peak_phase]
        for ln in explain_lines(spec, setup, est):
            texts += [ln.formula, ln.source]
        for name, _, why in accountings(spec, setup):
            texts += [name, why]
        missing |= {x for x in texts if tr(x, "zh") == x}
    assert not missing, "no zh entry:\n" + "\n".join(sorted(missing))


# --------------------------------------------------------------------------- a traced step (torch only)

def test_trace_and_compare_are_chinese(tmp_path, capsys, monkeypatch) -> None:
    """One traced step of a tiny model (amp-fp16: the GradScaler note too), shown as ``trace`` and
    ``trace --compare`` show it; the FSDP2 notes are checked from the source above (an FSDP2 trace
    takes 10 s more)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.tiny_configs import TINY
    from trainmem.report.trace_table import print_comparison, print_trace
    from trainmem.trace import trace_step
    from trainmem.trace.compare import compare

    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY["llama-gqa"]))
    monkeypatch.setenv("COLUMNS", "2000")
    spec, setup = build(str(path), seq_len=64, precision="amp-fp16")
    result = trace_step(spec, setup)
    print_trace(spec, setup, result, "zh")
    print_comparison(spec, setup, compare(spec, setup, trace=result), "zh")
    out = capsys.readouterr().out.replace(str(path), "config.json")
    assert "模拟：" in out and "说明：" in out and "估算 vs 追踪" in out
    assert_chinese(out)
