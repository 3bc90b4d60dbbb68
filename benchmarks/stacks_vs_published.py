"""``--stack`` against the published points (benchmarks/published_points.json) of the frameworks that have a stack.

For each expressible point of such a source: the estimate of its hand-mapped setup (what benchmarks/published.py
estimates) and the estimate of ``--stack NAME`` given only the workload the publication states (model, GPU, GPUs
and parallel layout, engine, ZeRO/offload, sequence, batch, LoRA rank/targets, QLoRA), every other field from the
stack; and the fields where the stack's value differs from the hand mapping (each one a default the stack and the
point's notes disagree on: read both sources). A check of the stacks against mappings written by hand from the
frameworks' configs, not an independent measurement.

    python benchmarks/stacks_vs_published.py
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published import ESTIMATE_FIELD, evaluate, load_points, median, model_ref, relative_error  # noqa: E402

from trainmem.api import build  # noqa: E402
from trainmem.errors import TrainmemError  # noqa: E402
from trainmem.memory import estimate  # noqa: E402
from trainmem.setup import TrainingSetup  # noqa: E402

#: The stack of each source repository (points of other repositories have none).
STACK_OF_REPO = {"pytorch/torchtune": "torchtune", "Lightning-AI/litgpt": "litgpt", "modelscope/ms-swift": "ms-swift",
                 "axolotl-ai-cloud/axolotl": "axolotl", "unslothai/unsloth": "unsloth",
                 "hiyouga/LLaMA-Factory": "llama-factory", "pytorch/torchtitan": "torchtitan"}
#: What a publication states about its run (the rest is the framework's defaults or its config's).
WORKLOAD = ("gpu", "gpu_memory", "gpus", "dp", "tp", "pp", "cp", "engine", "zero", "offload", "seq_len", "micro_batch",
            "grad_accum", "lora_rank", "lora_targets", "qlora", "attn")


def stack_row(point: dict, stack: str) -> tuple[float | None, dict[str, tuple[object, object]]]:
    """(error of the stack's estimate, {field: (hand value, stack value)} where they differ)."""
    hand = {k: v for k, v in point["setup"].items() if k in TrainingSetup.model_fields and v is not None}
    given = {"lora_rank": 0, **{k: v for k, v in hand.items() if k in WORKLOAD}}  # (full fine-tuning is stated)
    try:
        spec, ts = build(model_ref(point["model"]), **given, stack=stack)
        est = estimate(spec, ts)
    except TrainmemError:
        return None, {}
    differ = {}
    for k, v in hand.items():
        mine = getattr(ts, k)
        v = tuple(v) if isinstance(v, list) else v
        if k not in WORKLOAD and mine != v:
            differ[k] = (v, mine)
    low, high = point["measured_bytes"]
    return relative_error(getattr(est, ESTIMATE_FIELD[point["metric"]]), low, high), differ


def main() -> int:
    rows = []
    for p in load_points():
        stack = STACK_OF_REPO.get(p["source"].get("repo"))
        if stack is None:
            continue
        r = evaluate(p)
        if not r.expressible:
            continue
        p = {**p, "measured_bytes": (r.low, r.high)}
        err, differ = stack_row(p, stack)
        rows.append((stack, p["id"], r.error, err, differ))
    print(f"{'stack':14s} {'point':44s} {'hand':>8s} {'stack':>8s}  fields the stack sets otherwise")
    for stack, pid, hand, err, differ in rows:
        d = ", ".join(f"{k} {a}->{b}" for k, (a, b) in sorted(differ.items()))
        print(f"{stack:14s} {pid[:44]:44s} {hand:+8.1%} {'' if err is None else f'{err:+8.1%}':>8s}  {d}")
    print()
    for stack in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == stack and r[3] is not None]
        hand = [abs(r[2]) for r in mine]
        st = [abs(r[3]) for r in mine]
        print(f"{stack:14s} {len(mine):3d} points: median |error| hand-mapped {median(hand):6.1%}, "
              f"--stack {median(st):6.1%}")
    fields = Counter(k for r in rows for k in r[4])
    print("fields the stacks set otherwise than the hand mappings:", dict(fields.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
