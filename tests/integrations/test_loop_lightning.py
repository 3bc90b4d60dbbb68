"""trainmem.preflight for a plain loop, and the Lightning PreflightCallback in a real ``lightning.pytorch.Trainer`` on
CPU (a tiny Llama): what each reads from the live objects, the JSON line written before step 1, and that the
prediction is trainmem.estimate's of the same run."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trainmem  # noqa: E402
from trainmem.errors import ConfigError, UnsupportedError  # noqa: E402
from trainmem.integrations.loop import batch_fields, optimizer_fields  # noqa: E402
from trainmem.integrations.preflight import PreflightOverflowError  # noqa: E402

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, max_position_embeddings=512)
SEQ = 24


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**TINY))


def _predicted(est) -> dict:
    return {"peak_allocated_bytes": est.peak_allocated_bytes, "peak_reserved_bytes": est.peak_reserved_bytes,
            "device_total_bytes": est.device_total_bytes}


# -- the plain loop ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "want"), [
    (lambda p: torch.optim.AdamW(p), {"optimizer": "adamw", "optimizer_impl": "foreach"}),
    (lambda p: torch.optim.AdamW(p, fused=True), {"optimizer": "adamw", "optimizer_impl": "fused"}),
    (lambda p: torch.optim.Adam(p), {"optimizer": "adam", "optimizer_impl": "foreach"}),
    (lambda p: torch.optim.SGD(p, lr=0.1), {"optimizer": "sgd"}),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), {"optimizer": "sgd-momentum"}),
])
def test_the_optimizer_is_read_from_its_class_and_defaults(make, want) -> None:
    assert optimizer_fields(make(torch.nn.Linear(2, 2).parameters())) == want


def test_an_optimizer_trainmem_does_not_model_is_refused_not_guessed() -> None:
    with pytest.raises(UnsupportedError, match="RMSprop, which trainmem does not model"):
        optimizer_fields(torch.optim.RMSprop(torch.nn.Linear(2, 2).parameters()))


def test_the_batch_gives_micro_batch_and_seq_len() -> None:
    ids = torch.zeros(3, 17, dtype=torch.long)
    assert batch_fields(ids) == batch_fields({"input_ids": ids}) == {"micro_batch": 3, "seq_len": 17}
    with pytest.raises(ConfigError, match=r"shape \(17,\)"):
        batch_fields(ids[0])


def test_preflight_equals_estimate_of_the_same_run_and_logs_it(tmp_path) -> None:
    model = _llama()
    model.activation_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    log = tmp_path / "pf.jsonl"
    result = trainmem.preflight(model, optimizer=opt, batch=torch.zeros(2, SEQ, dtype=torch.long), autocast="bf16",
                                log=log, gpu="H100-SXM-80G", grad_accum=4)
    want = trainmem.estimate(model, micro_batch=2, seq_len=SEQ, optimizer="adamw", optimizer_impl="fused",
                             precision="amp-bf16", grad_accum=4, gpu="H100-SXM-80G")
    assert result.estimate.to_dict() == want.to_dict()
    line = json.loads(log.read_text())
    assert line["predicted"] == _predicted(want) and line["measured"] is None and line["device"] == "cpu"
    s = line["setup"]
    assert (s["micro_batch"], s["seq_len"], s["recompute"], s["precision"], s["optimizer_impl"], s["grad_accum"]) == \
        (2, SEQ, "full", "amp-bf16", "fused", 4)


def test_preflight_raises_with_the_fixes_when_it_will_not_fit() -> None:
    with pytest.raises(PreflightOverflowError, match="will not fit"):
        trainmem.preflight(_llama(), optimizer="adamw", batch=torch.zeros(1, SEQ, dtype=torch.long),
                           on_overflow="raise", gpu_memory=2**20)


def test_preflight_takes_a_name_for_an_optimizer_it_cannot_read() -> None:
    r = trainmem.preflight(_llama(), optimizer="adamw-8bit", batch=torch.zeros(1, SEQ, dtype=torch.long))
    assert r.estimate.setup["optimizer"] == "adamw-8bit"


# -- Lightning ----------------------------------------------------------------------------------------------

pl = pytest.importorskip("lightning.pytorch")


class _Module(pl.LightningModule):
    def __init__(self, fused: bool = False) -> None:
        super().__init__()
        self.model, self.fused = _llama(), fused

    def training_step(self, batch, batch_idx):
        return self.model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=self.fused)


class _Probe(pl.Callback):
    def __init__(self, log) -> None:
        self.path, self.lines_at_batch = log, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.lines_at_batch.append(len(self.path.read_text().splitlines()) if self.path.exists() else 0)


def _fit(tmp_path, callback, module=None, **trainer_args):
    data = [{"input_ids": torch.randint(0, 256, (SEQ,))} for _ in range(8)]
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    probe = _Probe(tmp_path / "pf.jsonl")
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[callback, probe],
                         default_root_dir=str(tmp_path), **trainer_args)
    module = module if module is not None else _Module()
    trainer.fit(module, loader)
    return module, probe


def test_lightning_callback_logs_the_trainer_run_before_step_1(tmp_path) -> None:
    from trainmem.integrations.lightning import PreflightCallback

    log = tmp_path / "pf.jsonl"
    cb = PreflightCallback(log=log, gpu="H100-SXM-80G")
    module, probe = _fit(tmp_path, cb, accumulate_grad_batches=2, precision="bf16-mixed")
    assert probe.lines_at_batch[0] == 1  # written before the first batch, once on CPU
    line = json.loads(log.read_text())
    s = line["setup"]
    assert (s["micro_batch"], s["grad_accum"], s["seq_len"], s["precision"], s["optimizer"], s["optimizer_impl"]) == \
        (2, 2, SEQ, "amp-bf16", "adamw", "foreach")
    want = trainmem.estimate(module.model, micro_batch=2, grad_accum=2, seq_len=SEQ, precision="amp-bf16",
                             optimizer="adamw", optimizer_impl="foreach", gpus=1, gpu="H100-SXM-80G")
    assert line["predicted"] == _predicted(want)


def test_lightning_true_precision_and_a_module_without_a_model(tmp_path) -> None:
    from trainmem.integrations.lightning import PRECISIONS, hf_model_of

    assert PRECISIONS["bf16-true"] == "bf16" and PRECISIONS["16-mixed"] == "amp-fp16"

    class Bare(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(2, 2)

    with pytest.raises(UnsupportedError, match="holds no transformers model"):
        hf_model_of(Bare())
    assert hf_model_of(_Module()).__class__.__name__ == "LlamaForCausalLM"


def test_the_measured_line_reads_the_cuda_peaks(monkeypatch, tmp_path) -> None:
    """What the callbacks and loop.measure write after the steady step (CUDA stands in here)."""
    from trainmem.integrations import loop, preflight

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 5 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 6 * 2**30)
    assert preflight.cuda_peaks(2) == {"max_memory_allocated_bytes": 5 * 2**30, "max_memory_reserved_bytes": 6 * 2**30,
                                       "step": 2}
    result = trainmem.preflight(_llama(), optimizer="adamw", batch=torch.zeros(1, SEQ, dtype=torch.long))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert loop.measure(result, tmp_path / "pf.jsonl") is None and not (tmp_path / "pf.jsonl").exists()
