"""``trainmem explain``: the formula and source behind every line, and why other accountings differ."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from trainmem.memory import accounting as acc
from trainmem.memory.activations import layer_saved
from trainmem.memory.estimate import MemoryEstimate
from trainmem.memory.loss import loss_buffers
from trainmem.model.spec import ModelSpec
from trainmem.report.i18n import t, tr
from trainmem.setup import TrainingSetup
from trainmem.units import GB, GiB

__all__ = ["ExplainLine", "explain_lines", "accountings", "print_explain"]


@dataclass(frozen=True, slots=True)
class ExplainLine:
    category: str
    bytes: int
    formula: str
    source: str


_PARAM_RULES = {
    "torch": "P · bytes(param dtype): fp32/amp 4, bf16/fp16 2; LoRA: frozen base 16-bit + fp32 adapters",
    "fsdp2": "P·bytes/dp sharded (DTensor dim-0) + units all-gathered in param_dtype while in flight (+ prefetch); root unsharded forward→backward",
    "deepspeed": "16-bit params 2P (ZeRO-3: 2P/dp + gathered layer + prefetch)",
    "megatron": "bf16 params 2P/(tp·pp) per rank; experts ÷ ep",
}
_SOURCES = {
    "parameters": "torch.nn.Module parameters; FSDP2 torch/distributed/fsdp/_fully_shard/_fsdp_param.py; DeepSpeed stage3.py",
    "master_weights": "ZeRO paper §3 (K=12); DeepSpeed stage_1_and_2.py single_partition_of_fp32_groups; Megatron distrib_optimizer.py",
    "gradients": "torch AccumulateGrad; FSDP2 sharded fp32 grads (reduce_dtype); DeepSpeed averaged_gradients partition; Megatron main_grad buffer",
    "optimizer_states": "torch/optim/adam.py exp_avg/exp_avg_sq in param dtype; sgd momentum_buffer; Adafactor row/col factors; bitsandbytes 8-bit",
    "activations": "derived from what transformers 5.24 modules save for backward (trainmem/memory/activations.py); loss_utils.py ForCausalLMLoss upcast",
    "temporaries": "foreach optimizer temporaries (torch/optim/adam.py _multi_tensor_adam: _foreach_sqrt); activation gradients in backward",
    "communication_buffers": "DDP reducer buckets (reducer.cpp); DeepSpeed ipg buffer reduce_bucket_size=5e8; FSDP2 reduce-scatter input",
    "other": "cuBLAS workspace (CublasHandlePool.cpp: 32 MiB on sm90+, 8.125 MiB before)",
}


_FOREACH_STEP = "optimizer step: one state-sized foreach temporary (adamw), + grad-sized (adam/sgd weight decay); "
_FUSED_STEP = "optimizer step: fused kernel, no temporaries; "
_FUSED_SOURCE = ("fused optimizer (torch/optim/adamw.py _fused_adamw: one multi-tensor kernel, in place); "
                 "activation gradients in backward")


def explain_lines(spec: ModelSpec, setup: TrainingSetup, est: MemoryEstimate) -> list[ExplainLine]:
    """One line per category at the peak: value, formula (with this run's numbers) and source."""
    s = setup
    T = s.micro_batch * s.seq_len
    per_layer = layer_saved(spec, s, 0)
    comp = ", ".join(f"{k} {v / (T * spec.hidden_size):.1f}" for k, v in per_layer.by_component().items())
    lb = loss_buffers(spec, s.for_target())
    formulas = {
        "parameters": _PARAM_RULES[s.engine],
        "master_weights": "fp32 copy 4P, ÷ dp with ZeRO ≥ 1 / Megatron distributed optimizer (÷ dp·cp)",
        "gradients": f"trainable params × grad dtype ({'fp32' if s.precision in ('fp32', 'amp-bf16', 'amp-fp16') else '16-bit'}); "
                     "earlier micro-batches' grads stay alive through later ones (torch, FSDP2)",
        "optimizer_states": f"{s.optimizer}: adamw/adam 2 states, sgd-momentum/lion 1, adamw-8bit 2 B/param; ÷ dp when sharded",
        "activations": (f"per layer per token, in units of h bytes: {comp} "
                        f"(= {per_layer.total_bytes / (T * spec.hidden_size):.1f}·s·b·h B); ×layers in flight; "
                        f"logits {lb.logits_bytes / GiB:.2f} GiB + loss kept {lb.kept_bytes / GiB:.2f} GiB "
                        f"(14 B per b·s·V element at the loss backward)"),
        "temporaries": (_FUSED_STEP if s.optimizer_impl == "fused" else _FOREACH_STEP)
                       + "backward: activation gradients ≈ r·T·h + 2·c·T·i",
        "communication_buffers": "DDP: a second copy of the gradients; DeepSpeed ZeRO-1/2: 16-bit ipg bucket of 5e8 elements; "
                                 "FSDP2: fp32 reduce-scatter input of one unit",
        "other": "cuBLAS workspace",
    }
    sources = dict(_SOURCES, temporaries=_FUSED_SOURCE) if s.optimizer_impl == "fused" else _SOURCES
    return [ExplainLine(cat, est.breakdown_at_peak_bytes.get(cat, 0), formulas[cat], sources[cat])
            for cat in formulas if est.breakdown_at_peak_bytes.get(cat, 0) > 0]


def accountings(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[str, int, str]]:
    """Model-state bytes per GPU under each published accounting, for this model and setup."""
    P = spec.n_params
    n = setup.dp
    stage = setup.zero if setup.engine == "deepspeed" else (3 if setup.engine == "fsdp2" else 0)
    return [
        ("seed article (FP32 master kept whole)", acc.seed_zero_bytes(P, stage, n),
         "16 B/param, ZeRO shards Adam (and grads, params) but not the FP32 master copy"),
        ("ZeRO paper (Rajbhandari et al. 2020)", acc.zero_paper_bytes(P, stage, n),
         "(2+2+12)Ψ; stage 2: 2Ψ + 14Ψ/N — the master copy is part of K and is sharded"),
        ("DeepSpeed estimate_zero2/3_model_states_mem_needs", acc.deepspeed_estimator_gpu_bytes(P, stage, n, spec.params.largest_layer),
         "2P + 18P/N: adds the fp32 gradient partition (4 B); stage 3: 4·largest layer + 18P/N"),
        ("Megatron theoretical_memory_usage.py", acc.megatron_theoretical_bytes(P, n, setup.zero == 1 and setup.engine == "megatron"),
         "18 B/param; 6 + 12/dp with the distributed optimizer (fp32 main grads)"),
    ]


def print_explain(spec: ModelSpec, setup: TrainingSetup, est: MemoryEstimate, lang: str = "en",
                  console: Console | None = None) -> None:
    con = console or Console()
    tab = Table(title=t("explain_title", lang), show_lines=True)
    for col in (t("category", lang), "GiB", t("formula", lang), t("source", lang)):
        tab.add_column(col, overflow="fold")
    for ln in explain_lines(spec, setup, est):
        tab.add_row(t(ln.category, lang), f"{ln.bytes / GiB:.2f}", _esc(tr(ln.formula, lang)),
                    _esc(tr(ln.source, lang)))
    con.print(tab)
    acc_tab = Table(title=t("acc_title", lang))
    for col in (t("accounting", lang), "GB (10⁹)", "GiB", t("why", lang)):
        acc_tab.add_column(col, overflow="fold")
    for name, b, why in accountings(spec, setup):
        acc_tab.add_row(_esc(tr(name, lang)), f"{b / GB:.2f}", f"{b / GiB:.2f}", _esc(tr(why, lang)))
    st = sum(est.breakdown_at_peak_bytes.get(k, 0) for k in ("parameters", "master_weights", "gradients", "optimizer_states"))
    why = "what the engine allocates, at the moment of the peak; buckets and activations listed separately"
    acc_tab.add_row(tr("trainmem (at the peak, this engine)", lang), f"{st / GB:.2f}", f"{st / GiB:.2f}", tr(why, lang))
    con.print(acc_tab)
    s = setup
    seed = acc.seed_activation_bytes(s.micro_batch, s.seq_len, spec.hidden_size, spec.num_layers)
    kor = acc.korthikanti_layer_activation_bytes(s.micro_batch, s.seq_len, spec.hidden_size,
                                                 spec.num_attention_heads) * spec.num_layers
    ours = layer_saved(spec, s, 0).total_bytes * spec.num_layers
    act = Table(title=t("act_title", lang))
    for col in (t("formula", lang), "GiB", t("note", lang)):
        act.add_column(col, overflow="fold")
    rows = [
        ("seed: b·s·h·L·2", seed, "one hidden state per layer: far too low (the seed's '512 MB' is 512 MiB)"),
        ("Korthikanti 2022: s·b·h·(34 + 5as/h)·L", kor,
         "GPT block without flash attention; HF blocks keep more per token but no s² with sdpa"),
        ("trainmem (this model, this recipe)", ours,
         "from what the transformers modules save; see the activations line above"),
    ]
    for formula, b, note in rows:
        act.add_row(_esc(tr(formula, lang)), f"{b / GiB:.2f}", _esc(tr(note, lang)))
    con.print(act)


def _esc(text: str) -> str:
    from rich.markup import escape
    return escape(text)
