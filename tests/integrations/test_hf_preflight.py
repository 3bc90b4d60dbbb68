"""PreflightCallback in a real HF Trainer on CPU (a tiny Llama, random tokens, max_steps=1): the JSON line is
written before step 1, the setup is the Trainer's, the prediction is trainmem.estimate's, and an overflow warns
or raises with the fixes."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainmem  # noqa: E402
from trainmem.integrations.preflight import PreflightOverflowError  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, max_position_embeddings=512)
SEQ = 24


class _Probe(transformers.TrainerCallback):
    """Counts the preflight lines in the log when each step begins."""

    def __init__(self, log) -> None:
        self.log, self.lines_at_step = log, []

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        self.lines_at_step.append(len(self.log.read_text().splitlines()) if self.log.exists() else 0)


def _train(tmp_path, callback, model=None, **args):
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = model if model is not None else LlamaForCausalLM(LlamaConfig(**TINY))
    data = [{"input_ids": (ids := torch.randint(0, 256, (SEQ,)).tolist()), "labels": ids} for _ in range(4)]
    targs = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2,
                              report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                              disable_tqdm=True, **args)
    probe = _Probe(tmp_path / "preflight.jsonl")
    Trainer(model=model, args=targs, train_dataset=data, callbacks=[callback, probe]).train()
    return model, probe


def test_the_line_is_logged_before_step_1(tmp_path) -> None:
    log = tmp_path / "preflight.jsonl"
    cb = trainmem.PreflightCallback(log=log, gpu="H100-SXM-80G")
    model, probe = _train(tmp_path, cb, gradient_accumulation_steps=2, activation_checkpointing=True, optim="adamw_torch")
    assert probe.lines_at_step == [1]  # written before the first step began, and only once on CPU
    line = json.loads(log.read_text())
    assert set(line) >= {"setup", "predicted", "measured", "device", "versions"}
    assert line["measured"] is None and line["device"] == "cpu" and line["versions"]["torch"] == torch.__version__
    s = line["setup"]
    assert (s["micro_batch"], s["grad_accum"], s["seq_len"], s["recompute"], s["precision"], s["optimizer_impl"]) == \
        (2, 2, SEQ, "full", "fp32", "foreach")
    # the prediction is trainmem.estimate of the same run
    want = trainmem.estimate(model, micro_batch=2, grad_accum=2, seq_len=SEQ, recompute="full", precision="fp32",
                             optimizer="adamw", optimizer_impl="foreach", gpus=1, gpu="H100-SXM-80G")
    assert line["predicted"] == {"peak_allocated_bytes": want.peak_allocated_bytes,
                                 "peak_reserved_bytes": want.peak_reserved_bytes,
                                 "device_total_bytes": want.device_total_bytes}
    assert cb.result.estimate.n_trainable_params == sum(p.numel() for p in model.parameters())


def test_a_peft_model_in_the_trainer_is_read_from_the_object(tmp_path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    peft = get_peft_model(LlamaForCausalLM(LlamaConfig(**TINY)), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    cb = trainmem.PreflightCallback(log=tmp_path / "preflight.jsonl")
    _train(tmp_path, cb, model=peft)
    line = json.loads((tmp_path / "preflight.jsonl").read_text())
    assert line["setup"]["lora_rank"] == 4 and line["setup"]["lora_targets"] == ["q_proj", "v_proj"]
    assert cb.result.estimate.n_trainable_params == peft.get_nb_trainable_parameters()[0]


def test_an_overflow_warns_or_raises_with_the_fixes(tmp_path) -> None:
    with pytest.warns(UserWarning, match="will not fit.*(Fixes that fit|largest savings)"):
        _train(tmp_path, trainmem.PreflightCallback(gpu_memory="540MiB", on_overflow="warn"))
    from transformers import LlamaConfig, LlamaForCausalLM
    with pytest.raises(PreflightOverflowError, match="will not fit") as err:
        _train(tmp_path, trainmem.PreflightCallback(gpu_memory="540MiB", on_overflow="raise"),
               model=LlamaForCausalLM(LlamaConfig(**TINY)))
    assert isinstance(err.value, trainmem.TrainmemError) and "MiB" in str(err.value)
    with pytest.raises(trainmem.ConfigError, match="on_overflow"):
        trainmem.PreflightCallback(on_overflow="ignore")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _train(tmp_path, trainmem.PreflightCallback(gpu="H100-SXM-80G"))  # fits: no warning
