"""Issue 19, items 2-3: the fixes compare has no row for (shorter sequences, a QLoRA base, the smallest bigger GPU,
freeing a stale copy at save or resume) — each with the bytes it saves as two estimates differ and ``fits``, each
offered only when relevant; the checkpoint save/resume cues and their false-positive guards; the near-capacity,
optimizer-step and held-more-than-estimated rules; the precision a GPU or an engine implies."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from trainmem.api import build
from trainmem.cli import main
from trainmem.doctor.case import Evidence, Expected
from trainmem.doctor.fixes import (MIN_SAVING, NOT_COMPARED, RESUME_ACTION, SAVE_ACTION, bigger_gpu_fix, extra_fixes,
                                   qlora_fix, shorter_seq_fix)
from trainmem.doctor.frames import Where, checkpoint_io, parse_frames, where
from trainmem.doctor.oom import OOMReport
from trainmem.doctor.rules import NEAR_CAPACITY, diagnose
from trainmem.doctor.run import precision_fields
from trainmem.hardware import get_gpu, list_gpus
from trainmem.memory import estimate
from trainmem.units import GiB, MiB

SITE = "/usr/lib/python3.11/site-packages"


@lru_cache(maxsize=None)
def _exp(model: str, **flags: object) -> Expected:
    spec, setup = build(model, **flags)
    return Expected(spec=spec, setup=setup, estimate=estimate(spec, setup))


def _peak(model: str, **flags: object) -> int:
    return _exp(model, **flags).estimate.peak_allocated_bytes


def _tb(*frames: tuple[str, int, str, str], extra: str = "") -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return extra + "\n".join(lines) + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB.\n"


TRAIN = ("/work/train.py", 80, "main", "trainer.train(resume_from_checkpoint=args.resume)")
FWD = [(f"{SITE}/transformers/trainer.py", 3018, "training_step", "loss = self.compute_loss(model, inputs)"),
       (f"{SITE}/torch/nn/modules/module.py", 1762, "_call_impl", "return forward_call(*args, **kwargs)"),
       (f"{SITE}/transformers/models/llama/modeling_llama.py", 160, "forward", "down_proj = self.down_proj(x)")]


# --- checkpoint save / resume cues ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("frames", "kind"), [
    ([TRAIN, (f"{SITE}/transformers/trainer.py", 2434, "_load_optimizer_and_scheduler",
              "self.optimizer.load_state_dict(torch.load(os.path.join(checkpoint, OPTIMIZER_NAME)))")], "resume"),
    ([TRAIN, (f"{SITE}/accelerate/accelerator.py", 3010, "load_state", "load_accelerator_state(...)")], "resume"),
    ([TRAIN, (f"{SITE}/deepspeed/runtime/engine.py", 2700, "load_checkpoint", "self._load_checkpoint(...)")],
     "resume"),
    ([TRAIN, (f"{SITE}/transformers/trainer.py", 2300, "_save_checkpoint", "self.save_model(output_dir)")], "save"),
    ([("/work/merge.py", 20, "main", "model = model.merge_and_unload()"),
      (f"{SITE}/peft/tuners/lora/model.py", 700, "merge_and_unload", "return self._unload_and_optionally_merge()")],
     "save"),
    ([(f"{SITE}/torch/nn/modules/module.py", 1900, "state_dict", "module.state_dict(...)"),
      (f"{SITE}/bitsandbytes/nn/modules.py", 268, "_save_to_state_dict", "self.weight.CB = ...")], "save"),
])
def test_checkpoint_frames(frames: list, kind: str) -> None:
    text = _tb(*frames)
    got, at, from_text = checkpoint_io(parse_frames(text), text)
    assert (got, from_text) == (kind, False) and at
    assert where(parse_frames(text), text).checkpoint == kind


@pytest.mark.parametrize(("line", "kind"), [
    ("    state = torch.load(path, map_location='cuda:0')", "resume"),
    ("    optimizer.load_state_dict(torch.load(opt_path))", "resume"),
    ("    model.save_pretrained(output_dir)", "save"),
    ("    torch.save(model.state_dict(), 'ckpt.pt')", "save"),
])
def test_checkpoint_from_text(line: str, kind: str) -> None:
    text = f"step 1000 loss 1.2\n{line}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB.\n"
    assert checkpoint_io([], text)[0::2] == (kind, True)


@pytest.mark.parametrize("text", [
    # every Trainer traceback carries resume_from_checkpoint=; a log line of an earlier save is no cue
    _tb(TRAIN, *FWD),
    _tb(*FWD, extra="Saving model checkpoint to out/checkpoint-500\n"),
    "    state = torch.load(path, map_location='cpu')\n    model.cuda()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB.\n",
    # nn.Module's own state_dict frames without a saver
    _tb((f"{SITE}/torch/nn/modules/module.py", 1900, "save_pretrained_like", "x = 1"), *FWD),
])
def test_no_checkpoint_cue(text: str) -> None:
    assert checkpoint_io(parse_frames(text), text)[0] == ""


def test_stale_copy_rule_sizes_the_copy_from_the_estimate() -> None:
    exp = _exp("llama-2-7b", lora_rank=8)
    oom = OOMReport(form="truncated", era="unknown", line="", tried_bytes=64 * MiB)
    c = exp.estimate.category_peak_bytes
    for kind, action, size in (("save", SAVE_ACTION, c.get("parameters", 0)),
                               ("resume", RESUME_ACTION, c.get("optimizer_states", 0) + c.get("master_weights", 0))):
        for from_text, like in ((False, 0.85), (True, 0.8)):
            ev = Evidence(oom=oom, where=Where(phase="unknown", checkpoint=kind, checkpoint_at="x.py:1 f",
                                               checkpoint_from_text=from_text))
            f = diagnose(ev, exp)[0]
            assert (f.cause, f.likelihood) == ("duplicate_fp32_copy", like)
            assert f.fixes[0].action == action and f.fixes[0].saves_bytes == size == f.expected_bytes
    # no OOM: a checkpoint frame alone is no finding
    ev = Evidence(where=Where(phase="unknown", checkpoint="save", checkpoint_at="x.py:1 f"))
    assert all(f.cause != "duplicate_fp32_copy" for f in diagnose(ev, exp))


# --- fixes compare has no row for ----------------------------------------------------------------------------------

def test_shorter_sequences_saves_the_difference_of_two_estimates() -> None:
    exp = _exp("llama-3.1-8b", micro_batch=8, seq_len=4096)
    f = shorter_seq_fix(exp)
    assert f is not None and "--seq-len 2048" in f.action
    half = _exp("llama-3.1-8b", micro_batch=8, seq_len=2048).estimate
    assert f.saves_bytes == exp.estimate.peak_allocated_bytes - half.peak_allocated_bytes > 0
    assert f.fits == half.fits and f.slowdown_pct == 0.0


def test_shorter_sequences_only_when_relevant() -> None:
    assert shorter_seq_fix(_exp("llama-3.1-8b", micro_batch=1, seq_len=256)) is None  # below 512: not halved
    # LoRA with full recompute at micro-batch 1: the frozen base dominates the peak
    exp = _exp("llama-2-7b", lora_rank=8, micro_batch=1, seq_len=1024, recompute="full")
    b = exp.estimate.breakdown_at_peak_bytes
    assert (b.get("activations", 0) + b.get("temporaries", 0)) < 0.25 * exp.estimate.peak_allocated_bytes
    assert shorter_seq_fix(exp) is None
    forced = shorter_seq_fix(exp, longer_than_stated=True)  # the OOM held more than the flags describe
    assert forced is not None and forced.saves_bytes > 0


def test_no_fix_that_saves_almost_nothing() -> None:
    """On a T4, halving llama-3.2-1b's sequences moves the peak to the optimizer step: 12 MiB of 23 GiB, no fix."""
    exp = _exp("llama-3.2-1b", gpu="T4-16G", precision="amp-fp16")
    half = _exp("llama-3.2-1b", gpu="T4-16G", precision="amp-fp16", seq_len=1024).estimate
    assert 0 < exp.estimate.peak_allocated_bytes - half.peak_allocated_bytes < MIN_SAVING * exp.estimate.peak_allocated_bytes
    assert shorter_seq_fix(exp) is None
    assert all(not f.action.startswith("shorter") for f in extra_fixes(exp, near_capacity=False))


def test_qlora_base() -> None:
    exp = _exp("llama-2-7b", lora_rank=8)
    f = qlora_fix(exp)
    q = _exp("llama-2-7b", lora_rank=8, qlora=True).estimate
    assert f is not None and f.action.startswith("quantized base, QLoRA (--qlora")
    assert f.saves_bytes == exp.estimate.peak_allocated_bytes - q.peak_allocated_bytes > 0 and f.fits == q.fits
    assert qlora_fix(_exp("llama-2-7b")) is None  # not LoRA
    assert qlora_fix(_exp("llama-2-7b", lora_rank=8, qlora=True)) is None  # already 4-bit


def test_bigger_gpu_is_the_smallest_that_fits() -> None:
    exp = _exp("llama-2-7b", lora_rank=8, seq_len=4096, micro_batch=4, gpu="A100-SXM-40G")
    assert not exp.estimate.fits
    f = bigger_gpu_fix(exp)
    assert f is not None and f.fits and f.saves_bytes == 0
    name = f.action.split("--gpu ")[1].rstrip(")")
    chosen = get_gpu(name)
    assert _exp("llama-2-7b", lora_rank=8, seq_len=4096, micro_batch=4, gpu=name).estimate.fits
    for g in list_gpus():
        if exp.estimate.gpu_memory_bytes < g.memory_bytes < chosen.memory_bytes and not g.name.startswith(
                ("MI", "Ascend")):
            assert not _exp("llama-2-7b", lora_rank=8, seq_len=4096, micro_batch=4, gpu=g.name).estimate.fits, g.name
    # known by its memory only: no step time to compare with
    mem = _exp("llama-2-7b", lora_rank=8, seq_len=4096, micro_batch=4, gpu_memory=40 * GiB)
    g2 = bigger_gpu_fix(mem)
    assert g2 is not None and NOT_COMPARED in g2.action and g2.slowdown_pct == 0.0


def test_bigger_gpu_only_near_or_over_capacity() -> None:
    roomy = _exp("qwen2.5-0.5b", gpu="H100-SXM-80G")
    assert roomy.estimate.fits
    assert all(not f.action.startswith("a bigger GPU") for f in extra_fixes(roomy, near_capacity=False))


# --- rules ---------------------------------------------------------------------------------------------------------

def _near(model: str, share: float, **flags: object) -> Expected:
    e = _exp(model, **flags).estimate
    return _exp(model, gpu_memory=int(e.device_total_bytes / share), **flags)


def test_an_estimate_within_its_error_of_the_gpu_predicts_the_overflow() -> None:
    exp = _near("llama-3.2-1b", 0.95, micro_batch=4, seq_len=2048)
    assert exp.estimate.fits and exp.estimate.device_total_bytes > (1 - NEAR_CAPACITY) * exp.estimate.gpu_memory_bytes
    ev = Evidence(oom=OOMReport(form="truncated", era="unknown", line="", tried_bytes=112 * MiB))
    f = diagnose(ev, exp)[0]
    assert f.cause == "activation_overflow" and f.likelihood == 0.7
    assert any("within 10%" in s for s in f.evidence)
    assert any(x.action.startswith("a bigger GPU") for x in f.fixes)
    far = _near("llama-3.2-1b", 0.7, micro_batch=4, seq_len=2048)
    assert diagnose(ev, far)[0].cause == "undetermined"


def test_optimizer_step_oom_is_static_even_when_the_estimate_fits() -> None:
    exp = _exp("qwen2.5-0.5b")
    assert exp.estimate.fits
    ev = Evidence(oom=OOMReport(form="truncated", era="unknown", line="", tried_bytes=64 * MiB),
                  where=Where(phase="optimizer_step", location="adamw.py:606 _multi_tensor_adamw"))
    f = diagnose(ev, exp)[0]
    assert f.cause == "static_overflow" and f.likelihood == 0.7
    assert any("while the estimate fits" in s for s in f.evidence)


def test_holding_more_than_the_estimate_is_activation_overflow() -> None:
    exp = _exp("llama-2-7b", lora_rank=8, micro_batch=1, seq_len=1024, recompute="full", gpu="H100-SXM-80G")
    e = exp.estimate
    held = int(1.6 * e.peak_allocated_bytes)
    ev = Evidence(oom=OOMReport(form="truncated", era="unknown", line="", tried_bytes=1 * GiB,
                                allocated_bytes=held, total_bytes=e.gpu_memory_bytes, free_bytes=20 * MiB))
    f = diagnose(ev, exp)[0]
    assert f.cause == "activation_overflow" and f.likelihood == 0.6
    assert any("over the estimate's peak" in s for s in f.evidence)
    assert any(x.action.startswith("shorter or truncated sequences") for x in f.fixes)


# --- precision ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "want", "noted"), [
    ({"gpu": "V100-SXM2-32G"}, "amp-fp16", True),
    ({"gpu": "T4-16G", "engine": "fsdp2"}, "amp-fp16", True),
    ({"gpu": "V100-SXM2-32G", "engine": "deepspeed"}, "mixed-fp16", True),
    ({"engine": "deepspeed", "precision": "bf16"}, "mixed-bf16", True),
    ({"engine": "megatron", "precision": "fp16"}, "mixed-fp16", True),
    ({"engine": "torch", "precision": "bf16"}, "bf16", False),
    ({"gpu": "H100-SXM-80G"}, None, False),
    ({"gpu": "no-such-gpu"}, None, False),
])
def test_precision_fields(fields: dict, want: str | None, noted: bool) -> None:
    notes: list[str] = []
    assert precision_fields(fields, notes).get("precision") == want
    assert bool(notes) == noted


@pytest.mark.parametrize("args", [
    ["llama-2-7b", "--gpu", "V100-SXM2-32G"],
    ["llama-3.2-1b", "--engine", "deepspeed", "--zero", "2", "--precision", "bf16", "--gpus", "2"],
])
def test_cli_takes_the_precision_other_commands_take(args: list[str], capsys) -> None:
    rc = main(["doctor", *args, "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    found = json.loads(out.out)["findings"]
    assert found and all("fits" in x for f in found for x in f["fixes"])
