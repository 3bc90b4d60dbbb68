"""The web page's own labels (English; Chinese through the catalogue, ``trainmem/report/zh/web.py``)."""

from __future__ import annotations

from trainmem.report.i18n import LANGS, t, tr

__all__ = ["UI", "ui_strings", "FIELD_HELP"]

#: key → English label, as the page shows it.
UI: dict[str, str] = {
    "title": "trainmem — GPU memory of one training step",
    "subtitle": "Estimate, compare, plan and diagnose; every number updates as you edit.",
    "tab_estimate": "Estimate", "tab_compare": "Compare", "tab_plan": "Plan", "tab_doctor": "Doctor",
    "language": "Language",
    "model": "Model", "model_catalog": "from the catalog", "model_paste": "paste a config.json",
    "model_other": "or a name, path or size (e.g. 7B)",
    "paste_here": "Paste the model's config.json here",
    "config_not_json": "this is not valid JSON",
    "gpu": "GPU", "gpu_memory": "GPU memory (e.g. 96GiB)",
    "setup": "Training setup", "parallelism": "Parallelism", "more": "More settings",
    "cluster": "GPU pool (e.g. 8xH100-SXM-80G)", "global_batch": "global batch (sequences)", "top": "plans to show",
    "fix": "fixed knobs (e.g. engine=megatron,tp=2)",
    "oom_message": "Paste the CUDA out-of-memory message (or the whole traceback)",
    "log": "Per-step memory log (CSV or the monitor's JSONL), optional",
    "nvidia_smi": "nvidia-smi output, optional",
    "diagnose": "Diagnose",
    "doctor_missing": "The doctor is not available in this trainmem.",
    "working": "computing…", "default": "default",
    "api_docs": "API (OpenAPI)",
    "charts_offline": "Charts are drawn locally by the bundled plotly.js; nothing is sent anywhere.",
}

#: Field → label (the CLI flag is shown beside it).
FIELD_HELP: dict[str, str] = {
    "seq_len": "tokens per sequence", "micro_batch": "sequences per micro-batch", "grad_accum": "micro-batches per step",
    "precision": "precision recipe", "optimizer": "optimizer", "recompute": "activation recompute",
    "attn": "attention kernel", "loop": "training loop", "loss": "loss kernel", "engine": "engine",
    "gpus": "GPUs (world size)", "dp": "data parallel", "tp": "tensor parallel", "pp": "pipeline parallel",
    "cp": "context parallel", "ep": "expert parallel", "vpp": "virtual pipeline chunks", "zero": "ZeRO stage",
    "offload": "offload", "lora_rank": "LoRA rank (0 = full fine-tuning)", "lora_targets": "LoRA target modules",
    "qlora": "QLoRA (NF4 base weights)", "sp": "sequence parallel", "loss_chunks": "loss chunks",
    "stack": "framework defaults",
}

_CATEGORY_KEYS = ("parameters", "master_weights", "gradients", "optimizer_states", "activations", "temporaries",
                  "communication_buffers", "other", "peak_allocated", "peak_reserved", "device_total", "static_total")


def ui_strings(lang: str = "en") -> dict[str, str]:
    """Every label of the page in ``lang`` (``field.<name>`` for the setup fields)."""
    lang = lang if lang in LANGS else "en"
    out = {k: tr(v, lang) for k, v in UI.items()}
    out.update({f"field.{k}": tr(v, lang) for k, v in FIELD_HELP.items()})
    out.update({f"cat.{k}": t(k, lang) for k in _CATEGORY_KEYS})
    return out
