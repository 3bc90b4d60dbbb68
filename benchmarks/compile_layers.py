"""``--compile`` at real sizes: each catalog model's compiled decoder layer (also under torchtitan's op-level SAC),
partitioned by torch itself on fake tensors (``trainmem trace --compile``, trainmem/trace/compiled.py), against ``estimate --compile``'s layer.

Run: python benchmarks/compile_layers.py        (about 3 s a row on two cores; needs the ``trace`` extra)
"""

from __future__ import annotations

import sys

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.trace.compiled import trace_compiled_layer

MODELS = ("llama-2-7b", "llama-3.2-1b", "mistral-7b", "mistral-nemo-12b", "qwen2.5-0.5b", "qwen2.5-7b", "qwen3-0.6b",
          "qwen3-14b", "phi-4", "gpt2")
SETUPS = (dict(precision="bf16"), dict(), dict(engine="fsdp2", gpus=8, micro_batch=2),
          dict(precision="bf16", recompute="full"), dict(precision="bf16", seq_len=512, micro_batch=3),
          # torchtitan's op-level SAC inside the compiled block (biased linears run aten.addmm: recomputed)
          dict(engine="fsdp2", gpus=8, micro_batch=2, recompute="selective"))


def main() -> int:
    print(f"{'model':18s} {'setup':55s} {'partitioner B':>14s} {'estimate B':>14s} {'error':>8s}")
    worst, rows = 0.0, 0
    for name in MODELS:
        for kw in SETUPS:
            label = " ".join(f"{k}={v}" for k, v in kw.items()) or "defaults (amp-bf16, seq 2048)"
            try:
                spec, setup = build(name, compile=True, **kw)
            except ConfigError as e:
                print(f"{name:18s} {label:55s} refused: {e}")
                continue
            r = trace_compiled_layer(spec, setup).to_dict()
            worst, rows = max(worst, abs(r["relative_error"])), rows + 1
            print(f"{name:18s} {label:55s} {r['compiled_layer_saved_bytes']:>14,} {r['estimate_layer_bytes']:>14,} "
                  f"{100 * r['relative_error']:>+7.2f}%", flush=True)
    print(f"{rows} layers, largest |error| {100 * worst:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
