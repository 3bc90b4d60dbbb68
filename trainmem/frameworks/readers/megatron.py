"""Megatron-LM argument files / launch scripts and NeMo recipe YAML → setup fields.

Megatron-LM (core_v0.19.0 megatron/training/arguments.py): a file of ``pretrain_gpt.py`` arguments — a plain
argument list, or a launch script as Megatron's examples write them (examples/llama/train_llama3_8b_h100_fp8.sh:
``NAME=value`` shell variables, bash arrays of arguments, ``\\`` continuations, ``torchrun --nproc_per_node N
--nnodes M``). Variables are substituted (``${NAME:-default}`` included); every ``--flag [value]`` of the file is
read, inside ``if`` blocks too (said so). Parallel degrees, ``--micro-batch-size``, ``--global-batch-size``
(accumulation = global ÷ (micro × dp) when the world size is known), ``--seq-length``, ``--recompute-*``,
``--use-distributed-optimizer`` (zero 1), ``--bf16``/``--fp16``/``--fp8-format``, ``--fp8-param-gather``,
``--grad-reduce-in-bf16``, ``--optimizer-cpu-offload``; the architecture flags (``--num-layers``,
``--hidden-size``, ``--ffn-hidden-size``, ``--num-attention-heads``, ``--num-query-groups``, ``--vocab-size``)
pick the catalog model of that shape.

NeMo 1.x Megatron YAML (NeMo examples/nlp/language_modeling/conf/megatron_llama_config.yaml): ``trainer.devices``
× ``trainer.num_nodes``, ``trainer.precision`` (bf16 / bf16-mixed / 16 / 32), and ``model.`` ``micro_batch_size``,
``global_batch_size``, ``tensor_model_parallel_size``, ``pipeline_model_parallel_size``,
``virtual_pipeline_model_parallel_size``, ``context_parallel_size``, ``sequence_parallel``, ``encoder_seq_length``,
``activations_checkpoint_granularity`` / ``_method`` / ``_num_layers``, ``optim.name`` (``distributed_fused_adam``
= the distributed optimizer), ``fp8``, and the architecture keys for the catalog match.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from trainmem.frameworks.readers._base import Reading

__all__ = ["read_megatron_args", "read_nemo", "is_megatron_text", "is_nemo", "parse_megatron_args", "match_shape"]

#: Megatron-LM core_v0.19.0 flags read here that take no value (store_true).
_SWITCHES = {"--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--fp16", "--fp8-param-gather",
             "--grad-reduce-in-bf16", "--optimizer-cpu-offload", "--untie-embeddings-and-output-weights",
             "--group-query-attention", "--swiglu", "--account-for-embedding-in-pipeline-split",
             "--account-for-loss-in-pipeline-split", "--accumulate-allreduce-grads-in-fp32", "--use-mcore-models",
             "--disable-bias-linear", "--cross-entropy-loss-fusion", "--overlap-grad-reduce", "--overlap-param-gather"}
_VALUED = {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
           "--expert-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
           "--virtual-pipeline-model-parallel-size", "--micro-batch-size", "--global-batch-size", "--seq-length",
           "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--fp8-format", "--optimizer",
           "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups",
           "--vocab-size", "--max-position-embeddings", "--num-experts", "--decoder-first-pipeline-num-layers",
           "--decoder-last-pipeline-num-layers", "--nproc_per_node", "--nproc-per-node", "--nnodes"}
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)")


def is_megatron_text(text: str) -> bool:
    return any(f in text for f in ("--tensor-model-parallel-size", "--micro-batch-size", "--num-layers ",
                                   "--pipeline-model-parallel-size", "pretrain_gpt.py"))


def is_nemo(cfg: dict) -> bool:
    model = cfg.get("model")
    return isinstance(cfg.get("trainer"), dict) and isinstance(model, dict) and (
        "tensor_model_parallel_size" in model or "micro_batch_size" in model)


def parse_megatron_args(text: str) -> tuple[dict[str, Any], list[str]]:
    """(flag → value or True, other flags) of a Megatron argument file or launch script: shell variables
    substituted, comments and continuations removed; the last occurrence of a flag wins."""
    env: dict[str, str] = {}
    flags: dict[str, Any] = {}
    other: list[str] = []
    joined = re.sub(r"\\\n", " ", text)
    for raw in joined.splitlines():
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        line = line.strip()
        if not line:
            continue
        assign = re.fullmatch(r"(?:export\s+)?(\w+)=(.*)", line)
        if assign and not assign[2].startswith("("):
            value = _subst(assign[2].strip(), env)
            try:
                value = " ".join(shlex.split(value))
            except ValueError:
                pass
            env[assign[1]] = value
            continue
        if assign:
            line = assign[2][1:]
        try:
            tokens = [t for tok in shlex.split(_subst(line, env)) for t in tok.split()]
        except ValueError:
            continue
        i = 0
        while i < len(tokens):
            tok = tokens[i]
            if tok.startswith("--"):
                name, _, inline = tok.partition("=")
                if name in _VALUED:
                    value = inline or (tokens[i + 1] if i + 1 < len(tokens) else "")
                    i += 0 if inline else 1
                    flags[name.replace("_", "-")] = value
                elif name in _SWITCHES:
                    flags[name] = True
                elif name not in other:
                    other.append(name)
            i += 1
    return flags, other


def _subst(s: str, env: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name = m[1] or m[3]
        if name in env:
            return env[name]
        return (m[2] or "").strip('"\'') if m[1] else m[0]
    return _VAR.sub(one, s)


def match_shape(r: Reading, shape: dict[str, int], where: str) -> None:
    """Name the catalog model with this architecture (layers, hidden, ffn, heads, query groups, vocab)."""
    from trainmem.model.catalog import list_models, load_catalog_spec

    need = ("num_layers", "hidden_size", "num_attention_heads")
    if not all(shape.get(k) for k in need):
        return
    hits = []
    for entry in list_models():
        s = load_catalog_spec(entry.name)
        have = {"num_layers": s.num_layers, "hidden_size": s.hidden_size, "num_attention_heads": s.num_attention_heads,
                "num_kv_heads": s.num_kv_heads, "intermediate_size": s.intermediate_size, "vocab_size": s.vocab_size}
        if all(have[k] == v for k, v in shape.items() if k in have and v):
            hits.append((s.max_position_embeddings == shape.get("max_position_embeddings"), entry.name))
    if not hits:
        desc = ", ".join(f"{k} {v}" for k, v in shape.items() if v)
        r.out.model_error = f"the architecture in {where} ({desc}) matches no catalog model"
        return
    hits.sort(key=lambda h: not h[0])
    name = hits[0][1]
    r.model(name, where + " (architecture" + (f"; also matches {', '.join(h[1] for h in hits[1:])}" if len(hits) > 1
                                             else "") + ")")


def read_megatron_args(r: Reading, text: str) -> None:
    flags, other = parse_megatron_args(text)
    r.use(*r.data)
    num = lambda k: _int(r, flags, k)  # noqa: E731
    r.set("engine", "megatron", "Megatron-LM arguments")
    shape = {"num_layers": num("--num-layers"), "hidden_size": num("--hidden-size"),
             "intermediate_size": num("--ffn-hidden-size"), "num_attention_heads": num("--num-attention-heads"),
             "num_kv_heads": num("--num-query-groups") if flags.get("--group-query-attention") else
             num("--num-attention-heads"), "vocab_size": num("--vocab-size"),
             "max_position_embeddings": num("--max-position-embeddings")}
    match_shape(r, shape, "--num-layers/--hidden-size/...")
    degrees = {}
    for flag, fld in (("--tensor-model-parallel-size", "tp"), ("--pipeline-model-parallel-size", "pp"),
                      ("--context-parallel-size", "cp"), ("--expert-model-parallel-size", "ep")):
        degrees[fld] = num(flag) or 1
        if num(flag):
            r.set(fld, num(flag), flag)
    world = (num("--nproc-per-node") or 0) * (num("--nnodes") or 1)
    if world:
        r.set("gpus", world, "torchrun --nproc_per_node × --nnodes")
    vpp = num("--virtual-pipeline-model-parallel-size")
    per_stage = num("--num-layers-per-virtual-pipeline-stage")
    if per_stage and shape["num_layers"]:
        vpp = shape["num_layers"] // (degrees["pp"] * per_stage)
    if vpp and vpp > 1:
        r.set("vpp", vpp, "--num-layers-per-virtual-pipeline-stage" if per_stage else "--virtual-pipeline-model-parallel-size")
    _batch(r, num("--micro-batch-size"), num("--global-batch-size"), world, degrees)
    if num("--seq-length"):
        r.set("seq_len", num("--seq-length"), "--seq-length")
    if flags.get("--sequence-parallel") and degrees["tp"] > 1:
        r.set("sp", True, "--sequence-parallel")
    elif flags.get("--sequence-parallel"):  # arguments.py validate_args: "Disabling sequence parallelism ..."
        r.out.statements.append("--sequence-parallel off: Megatron-LM disables it when tensor parallelism is 1")
    _recompute(r, str(flags.get("--recompute-granularity", "")), str(flags.get("--recompute-method", "uniform")),
               num("--recompute-num-layers"), "--recompute-")
    if flags.get("--use-distributed-optimizer"):
        r.set("zero", 1, "--use-distributed-optimizer")
    if flags.get("--fp8-format"):
        r.set("precision", "fp8", "--fp8-format")
    elif flags.get("--bf16"):
        r.set("precision", "mixed-bf16", "--bf16")
    elif flags.get("--fp16"):
        r.set("precision", "mixed-fp16", "--fp16")
    else:
        r.set("precision", "fp32", "neither --bf16 nor --fp16")
    for flag, fld in (("--fp8-param-gather", "fp8_params"), ("--grad-reduce-in-bf16", "grad_reduce_16bit")):
        if flags.get(flag):
            r.set(fld, True, flag)
    if flags.get("--optimizer-cpu-offload"):
        r.set("offload", "optimizer", "--optimizer-cpu-offload")
    opt = str(flags.get("--optimizer", "adam"))
    if opt not in ("adam", "sgd"):
        raise r.refuse(f"--optimizer {opt}: trainmem models adam and sgd under Megatron")
    r.set("optimizer", "adamw" if opt == "adam" else "sgd-momentum", "--optimizer" if "--optimizer" in flags
          else "Megatron-LM: --optimizer adam (AdamW)")
    for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                 "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"):
        if flag in flags:
            r.cannot("stage_layers", f"{flag}: give the split as --stage-layers")
    if "if [" in text or "if [[" in text:
        r.out.statements.append("the arguments inside the script's if blocks are read as if every condition held")
    r.out.ignored = sorted(other)


def _int(r: Reading, flags: dict, key: str) -> int | None:
    v = flags.get(key)
    if v in (None, ""):
        return None
    if not str(v).isdigit() or int(v) < 1:
        raise r.refuse(f"{key} must be a positive integer (got {v!r})")
    return int(v)


def _batch(r: Reading, mb: int | None, gb: int | None, world: int, degrees: dict[str, int]) -> None:
    if mb:
        r.set("micro_batch", mb, "micro-batch size")
    if not gb:
        return
    if not world:
        r.cannot("grad_accum", "the global batch size without the world size (the accumulation depends on it)")
        return
    dp = world // (degrees["tp"] * degrees["pp"] * degrees["cp"])
    if dp < 1 or gb % ((mb or 1) * dp):
        raise r.refuse(f"global batch size {gb} is not a multiple of micro-batch {mb or 1} × dp {dp}")
    r.set("grad_accum", gb // ((mb or 1) * dp), "global batch / (micro-batch × dp)")


def _recompute(r: Reading, granularity: str, method: str, layers: int | None, src: str) -> None:
    if granularity in ("", "None", "null"):
        return
    if granularity not in ("full", "selective"):
        raise r.refuse(f"recompute granularity {granularity}: full or selective")
    r.set("recompute", granularity, src + "granularity")
    if granularity == "full" and method == "block" and layers:
        r.set("recompute_layers", layers, src + "method block + num layers")
    elif granularity == "full" and method == "uniform" and layers not in (None, 1):
        r.cannot("recompute", f"recompute method uniform with {layers} layers per checkpoint is not modelled")


def read_nemo(r: Reading) -> None:
    m = "model."
    r.set("engine", "megatron", "NeMo (Megatron-Core)")
    shape = {"num_layers": r.int_(m + "num_layers"), "hidden_size": r.int_(m + "hidden_size"),
             "intermediate_size": r.int_(m + "ffn_hidden_size"),
             "num_attention_heads": r.int_(m + "num_attention_heads"),
             "num_kv_heads": r.int_(m + "num_query_groups") or r.int_(m + "num_attention_heads"),
             "max_position_embeddings": r.get(m + "max_position_embeddings")
             if isinstance(r.get(m + "max_position_embeddings"), int) else None}
    match_shape(r, shape, "model.num_layers/hidden_size/...")
    degrees = {}
    for key, fld in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                     ("context_parallel_size", "cp"), ("expert_model_parallel_size", "ep"),
                     ("virtual_pipeline_model_parallel_size", "vpp")):
        n = r.int_(m + key)
        degrees[fld] = n or 1
        if n and n > 1:
            r.set(fld, n, m + key)
    world = (r.int_("trainer.devices") or 1) * (r.int_("trainer.num_nodes") or 1)
    r.set("gpus", world, "trainer.devices × trainer.num_nodes")
    _batch(r, r.int_(m + "micro_batch_size"), r.int_(m + "global_batch_size"), world, degrees)
    seq = r.int_(m + "encoder_seq_length")
    if seq:
        r.set("seq_len", seq, m + "encoder_seq_length")
    if r.bool_(m + "sequence_parallel") and degrees["tp"] > 1:
        r.set("sp", True, m + "sequence_parallel")
    gran = r.get(m + "activations_checkpoint_granularity")
    _recompute(r, str(gran or ""), str(r.get(m + "activations_checkpoint_method") or "uniform"),
               r.int_(m + "activations_checkpoint_num_layers"), m + "activations_checkpoint_")
    precision = str(r.get("trainer.precision", 32))
    if r.bool_(m + "fp8"):
        r.set("precision", "fp8", m + "fp8")
    elif precision in ("bf16", "bf16-mixed", "bf16-true"):
        r.set("precision", "mixed-bf16", "trainer.precision")
    elif precision in ("16", "16-mixed"):
        r.set("precision", "mixed-fp16", "trainer.precision")
    elif precision in ("32", "32-true"):
        r.set("precision", "fp32", "trainer.precision")
    else:
        raise r.refuse(f"trainer.precision {precision}: bf16, 16 or 32")
    opt = str(r.get(m + "optim.name", "fused_adam"))
    if opt == "distributed_fused_adam":
        r.set("zero", 1, m + "optim.name distributed_fused_adam")
    elif opt not in ("fused_adam", "adam", "adamw"):
        raise r.refuse(f"model.optim.name {opt}: fused_adam or distributed_fused_adam")
    r.set("optimizer", "adamw", m + "optim.name")
    if r.bool_(m + "megatron_amp_O2") is False and precision.startswith("bf16"):
        r.out.statements.append("model.megatron_amp_O2 false: NeMo's O1 (autocast) bf16 is estimated as Megatron's "
                              "mixed-bf16 (O2: bf16 weights, fp32 main weights)")
    r.use("name", "restore_from_path", "trainer.devices", "trainer.num_nodes", "trainer.precision")
