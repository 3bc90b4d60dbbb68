"""The space of training configurations the planner searches, for one GPU type and world size.

A configuration is a :class:`Knobs`: engine, the parallel degrees, ZeRO/FSDP stage, recompute,
offload, micro-batch and accumulation. :func:`configurations` lists every one that the engines can
run and the estimator can validate, for a global batch that is preserved exactly
(``micro_batch · grad_accum · dp = global_batch``). The rules are the estimator's own validation
(``trainmem.setup`` and ``validate_for_model``) written as cheap integer tests, plus the planner's:

- tensor parallelism stays inside one node (``tp ≤ gpus_per_node`` and divides it), and divides the
  attention heads (and the kv heads, or is divided by them);
- pipeline stages may be uneven (Megatron's ``--decoder-first/last-pipeline-num-layers``,
  torchtitan's split points): any ``pp ≤ num_layers``; interleaving needs ``num_layers % (pp·vpp) == 0``,
  or, under Megatron, ``(num_layers + 2) % (pp·vpp) == 0`` with the embedding and the loss counted as layers
  (``--account-for-embedding/loss-in-pipeline-split``, :func:`knob_split`);
- context parallelism in powers of two up to 32, ``seq_len % (2·cp) == 0``;
- expert parallelism (MoE only) divides the experts and ``dp·cp·tp``;
- Megatron and FSDP2 run TP with sequence parallelism (Megatron ``--sequence-parallel``; torchtitan's
  SequenceParallel); DeepSpeed and the torch engine are data parallel only (as modelled);
- recompute none, selective or full, and under Megatron without interleaving also *block* recompute of a
  quarter, half or three quarters of a stage's layers (``block-N``: ``--recompute-method block
  --recompute-num-layers N``, the setup's ``recompute_layers``), between no recompute and full.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache

from trainmem.errors import ConfigError
from trainmem.memory.states import account_split, stage_layers, stage_ranges
from trainmem.model.spec import ModelSpec
from trainmem.setup import engine_precision  # (re-exported: the planner's name for it)

__all__ = ["Knobs", "KNOB_KEYS", "SpaceLimits", "configurations", "divisors", "engine_precision", "parse_fix", "is_root",
           "savers", "with_knobs", "knob_split", "knob_stage_layers", "block_levels", "recompute_fields", "recompute_rank",
           "ENGINES", "SETUP_PIN_KEYS"]

ENGINES = ("megatron", "fsdp2", "deepspeed", "torch")
KNOB_KEYS = ("engine", "dp", "tp", "pp", "vpp", "cp", "ep", "zero", "recompute", "offload", "micro_batch",
             "grad_accum")
_ZERO = {"torch": (0,), "fsdp2": (2, 3), "deepspeed": (0, 1, 2, 3), "megatron": (0, 1)}
_RECOMPUTE = ("none", "selective", "full")
_MAX_CP = 32
_MAX_VPP = 8
#: Shares of a stage's layers that block recompute levels checkpoint (Megatron only).
_BLOCK_SHARES = (0.25, 0.5, 0.75)


def block_levels(layers_per_stage: int) -> tuple[str, ...]:
    """The block-recompute levels of a stage of ``layers_per_stage`` layers, fewest checkpointed first:
    ``block-N`` for N a quarter, half and three quarters of them (0 < N < the stage's layers)."""
    ns = {max(1, round(layers_per_stage * f)) for f in _BLOCK_SHARES} - {layers_per_stage}
    return tuple(f"block-{n}" for n in sorted(ns))


def recompute_fields(recompute: str) -> dict[str, object]:
    """The TrainingSetup fields of a recompute knob: ``block-N`` = full recompute of N layers per stage."""
    if recompute.startswith("block-"):
        return {"recompute": "full", "recompute_layers": int(recompute[6:])}
    return {"recompute": recompute}


def recompute_rank(recompute: str) -> float:
    """Order of a recompute knob by how much it drops: none 0, selective 1, block-N in (1, 2) growing with
    N, full 2 (memory falls along none → block-N → full; selective is apart, see ``GroupSearch.implied_refused``)."""
    if recompute.startswith("block-"):
        return 1.0 + int(recompute[6:]) * 1e-6
    return {"none": 0.0, "selective": 1.0, "full": 2.0}[recompute]


@dataclass(frozen=True, slots=True)
class Knobs:
    engine: str
    dp: int
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    zero: int
    recompute: str
    offload: str
    micro_batch: int
    grad_accum: int

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def structure(self) -> tuple:
        """Everything but micro-batch, accumulation and recompute: the memory of a structure only
        grows with the micro-batch and with less recompute (``tests/memory/test_properties.py``)."""
        return (self.engine, self.dp, self.tp, self.pp, self.vpp, self.cp, self.ep, self.zero, self.offload)

    def setup_fields(self, spec: ModelSpec) -> dict[str, object]:
        """The TrainingSetup fields of this configuration of ``spec`` (its layer split: :func:`knob_split`)."""
        d = {"engine": self.engine, "dp": self.dp, "tp": self.tp, "pp": self.pp, "vpp": self.vpp, "cp": self.cp,
             "ep": self.ep, "zero": self.zero, **recompute_fields(self.recompute), "offload": self.offload,
             "micro_batch": self.micro_batch, "grad_accum": self.grad_accum, "gpus": self.gpus,
             "stage_layers": knob_split(spec, self)}
        if self.tp > 1 and self.engine == "megatron":
            d["sp"] = True
        return d


def knob_split(spec: ModelSpec, k: Knobs) -> tuple[int, ...] | None:
    """The explicit layer split a configuration runs (``TrainingSetup.stage_layers``), None for the even one.
    Megatron's account-for-embedding/loss split where the even split is not Megatron's to run: interleaving
    that does not divide the layers (Megatron-Bridge's Llama-3.1-405B recipe: 126 layers, pp 8, vpp 8), or an
    even split whose middle stages are uneven (what ``--decoder-first/last-pipeline-num-layers`` cannot express,
    trainmem.export.megatron.megatron_split)."""
    return _megatron_knob_split(spec.num_layers, k.pp, k.vpp) if k.engine == "megatron" else None


@lru_cache(maxsize=4096)
def _megatron_knob_split(num_layers: int, pp: int, vpp: int) -> tuple[int, ...] | None:
    """:func:`knob_split` of a Megatron configuration, memoised: it depends on the three counts only, and the
    space asks it for every configuration."""
    from trainmem.export.megatron import megatron_split
    if pp == 1 or num_layers % (pp * vpp) == 0:
        return None
    if vpp == 1 and megatron_split([len(stage_layers(num_layers, pp, j)) for j in range(pp)]) is not None:
        return None
    return account_split(num_layers, pp, vpp)


def knob_stage_layers(spec: ModelSpec, k: Knobs, stage: int) -> range:
    """The decoder layers of pipeline ``stage`` under ``k`` (its :func:`knob_split`, else the even split)."""
    split = knob_split(spec, k)
    return stage_ranges(split)[stage] if split else stage_layers(spec.num_layers, k.pp, stage)


def with_knobs(k: Knobs, **changes: object) -> Knobs:
    """``dataclasses.replace`` for :class:`Knobs`, without its per-call field introspection (the search
    derives tens of thousands of variants)."""
    g = changes.get
    return Knobs(g("engine", k.engine), g("dp", k.dp), g("tp", k.tp), g("pp", k.pp), g("vpp", k.vpp),  # type: ignore[arg-type]
                 g("cp", k.cp), g("ep", k.ep), g("zero", k.zero), g("recompute", k.recompute), g("offload", k.offload),
                 g("micro_batch", k.micro_batch), g("grad_accum", k.grad_accum))


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _recomputes(engine: str) -> tuple[str, ...]:
    """DeepSpeed runs HF models, whose gradient checkpointing is whole layers only (no selective)."""
    return ("none", "full") if engine == "deepspeed" else _RECOMPUTE


def _blocks(spec: ModelSpec, engine: str, pp: int, vpp: int) -> tuple[str, ...]:
    """Block-recompute levels of a configuration (Megatron without interleaving; its most-loaded stage's layer
    count under :func:`knob_split`)."""
    if engine != "megatron" or vpp > 1:
        return ()
    return _blocks_of_split(spec.num_layers, pp)


@lru_cache(maxsize=4096)
def _blocks_of_split(num_layers: int, pp: int) -> tuple[str, ...]:
    split = _megatron_knob_split(num_layers, pp, 1)
    return block_levels(max(split) if split else -(-num_layers // pp))


def _offloads(engine: str, zero: int) -> tuple[str, ...]:
    if engine == "deepspeed":
        return ("none",) if zero == 0 else ("none", "optimizer", "optimizer+params") if zero == 3 else ("none", "optimizer")
    if engine == "fsdp2":
        return ("none", "optimizer+params")
    if engine == "megatron":
        return ("none", "optimizer") if zero == 1 else ("none",)
    return ("none",)


def _tp_values(spec: ModelSpec, gpus_per_node: int, gpus: int) -> list[int]:
    a, kv = spec.num_attention_heads, spec.num_kv_heads
    return [t for t in divisors(gpus_per_node) if gpus % t == 0 and a % t == 0
            and (t == 1 or kv % t == 0 or t % kv == 0)]


def _cp_values(seq_len: int) -> list[int]:
    out, c = [], 1
    while c <= _MAX_CP:
        if c == 1 or seq_len % (2 * c) == 0:
            out.append(c)
        c *= 2
    return out


def _allowed(fixed: Mapping[str, object], key: str, values: list) -> list:
    """The values the search visits: a pinned value as it is (``--fix`` evaluates any value the estimator
    accepts, inside the planner's own space or not: vpp 10, tp across nodes, cp 3), else ``values``."""
    return [fixed[key]] if key in fixed else values


@dataclass(frozen=True, slots=True)
class SpaceLimits:
    """What the search may use: the world size, the node size and the global batch in sequences."""

    gpus: int
    gpus_per_node: int
    global_batch: int
    seq_len: int
    lora: bool = False
    fp8: bool = False


def configurations(spec: ModelSpec, lim: SpaceLimits, fixed: Mapping[str, object] | None = None,
                   engines: tuple[str, ...] = ENGINES, why: dict[str, str] | None = None) -> Iterator[Knobs]:
    """Every valid configuration of ``lim.gpus`` GPUs (see the module docstring); ``fixed`` pins knobs (a
    pinned value is taken as it is, for the estimator to validate). ``why`` collects, per rule, the first
    shape each pool or batch rule dropped (what ``--fix`` says when nothing is left)."""
    fixed = dict(fixed or {})
    for engine in [e for e in engines if fixed.get("engine", e) == e]:
        if lim.fp8 and engine not in ("megatron", "fsdp2"):
            continue
        if lim.lora and engine == "megatron":
            continue
        yield from _engine_configurations(spec, lim, fixed, engine, why)


def _note(why: dict[str, str] | None, rule: str, message: str) -> None:
    if why is not None:
        why.setdefault(rule, message)


def _parallel_shapes(spec: ModelSpec, lim: SpaceLimits, fixed: dict, engine: str,
                     why: dict[str, str] | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """(tp, pp, vpp, cp, ep) of one engine."""
    three_d = engine in ("megatron", "fsdp2")
    tps = _allowed(fixed, "tp", _tp_values(spec, lim.gpus_per_node, lim.gpus) if three_d else [1])
    pps = _allowed(fixed, "pp", [p for p in divisors(lim.gpus) if p <= spec.num_layers] if three_d else [1])
    cps = _allowed(fixed, "cp", _cp_values(lim.seq_len) if three_d else [1])
    eps = _allowed(fixed, "ep", [e for e in divisors(spec.num_experts) if e <= lim.gpus] if spec.is_moe else [1])
    for tp in tps:
        for pp in pps:
            for cp in cps:
                if lim.gpus % (tp * pp * cp):  # (not noted: pinned degrees the pool rules out are said up front,
                    continue                   # trainmem/plan/refusal.py check_pins; free ones are the space's)
                dp = lim.gpus // (tp * pp * cp)
                if "dp" in fixed and fixed["dp"] != dp:
                    continue
                vpps = [v for v in range(1, _MAX_VPP + 1)
                        if v == 1 or spec.num_layers % (pp * v) == 0 or account_split(spec.num_layers, pp, v)] if pp > 1 else [1]
                if engine != "megatron" or fixed.get("megatron_deepspeed"):
                    vpps = [1]  # interleaving: Megatron's schedule only (DeepSpeed's PipelineEngine runs plain 1F1B)
                for vpp in _allowed(fixed, "vpp", vpps):
                    for ep in eps:
                        if ep == 1 or (dp * cp * tp) % ep == 0:
                            yield tp, pp, vpp, cp, ep
                        else:
                            _note(why, "ep", f"ep({ep}) does not divide dp({dp}) × cp({cp}) × tp({tp}) = {dp * cp * tp}")


def _engine_configurations(spec: ModelSpec, lim: SpaceLimits, fixed: dict, engine: str,
                           why: dict[str, str] | None = None) -> Iterator[Knobs]:
    for tp, pp, vpp, cp, ep in _parallel_shapes(spec, lim, fixed, engine, why):
        dp = lim.gpus // (tp * pp * cp)
        if lim.global_batch % dp:
            _note(why, "batch", f"the global batch {lim.global_batch} is not divisible by dp({dp}) "
                                f"(= {lim.gpus} GPUs / (tp({tp}) × pp({pp}) × cp({cp})))")
            continue
        per_rank = lim.global_batch // dp
        if "micro_batch" in fixed and per_rank % int(fixed["micro_batch"]):  # type: ignore[call-overload]
            _note(why, "micro_batch", f"micro_batch({fixed['micro_batch']}) does not divide the {per_rank} sequences "
                                      f"per replica (global batch {lim.global_batch} / dp({dp}))")
            continue
        if "grad_accum" in fixed and "micro_batch" in fixed and \
                int(fixed["micro_batch"]) * int(fixed["grad_accum"]) != per_rank:  # type: ignore[call-overload]
            _note(why, "grad_accum", f"micro_batch({fixed['micro_batch']}) × grad_accum({fixed['grad_accum']}) × dp({dp}) = "
                                     f"{int(fixed['micro_batch']) * int(fixed['grad_accum']) * dp}, "  # type: ignore[call-overload]
                                     f"not the global batch {lim.global_batch}")
            continue
        for zero in _allowed(fixed, "zero", list(_ZERO[engine])):
            if engine == "fsdp2" and tp > 1 and dp * cp == 1 and zero == 3 and "zero" not in fixed:
                continue  # no fully_shard at dp = cp = 1 (torchtitan): zero 2 and 3 are the same run
            for offload in _allowed(fixed, "offload", list(_offloads(engine, zero))):
                recomputes = [*_recomputes(engine), *_blocks(spec, engine, pp, vpp)]
                for recompute in _allowed(fixed, "recompute", recomputes):
                    for mb in _allowed(fixed, "micro_batch", divisors(per_rank)):
                        ga = per_rank // mb
                        if "grad_accum" in fixed and fixed["grad_accum"] != ga:
                            _note(why, "grad_accum", f"grad_accum({fixed['grad_accum']}) does not divide the {per_rank} "
                                                     f"sequences per replica (global batch {lim.global_batch} / dp({dp}))")
                            continue
                        yield Knobs(engine, dp, tp, pp, vpp, cp, ep, zero, recompute, offload, mb, ga)


def is_root(k: Knobs, fixed: Mapping[str, object]) -> bool:
    """A configuration with the least recompute and no offload that ``fixed`` allows: the planner times
    these first and reaches the others through :func:`savers` only when memory refuses."""
    return (k.recompute == fixed.get("recompute", "none")) and (k.offload == fixed.get("offload", "none"))


def savers(k: Knobs, fixed: Mapping[str, object], spec: ModelSpec | None = None) -> list[Knobs]:
    """The next memory-saving variants of ``k``: one step more recompute, or offload (each slower by the
    performance model: ``tests/perf`` checks that neither ever speeds a step up). With ``spec``, Megatron's
    block levels too: none → selective → full and none → block-N₁ → … → full."""
    out = []
    rs = _recomputes(k.engine)
    blocks = _blocks(spec, k.engine, k.pp, k.vpp) if spec is not None else ()
    if "recompute" not in fixed and k.recompute in blocks:
        i = blocks.index(k.recompute)
        out.append(with_knobs(k, recompute=blocks[i + 1] if i + 1 < len(blocks) else "full"))
    elif "recompute" not in fixed and k.recompute in rs and k.recompute != rs[-1]:
        out.append(with_knobs(k, recompute=rs[rs.index(k.recompute) + 1]))
        if k.recompute == "none" and blocks:
            out.append(with_knobs(k, recompute=blocks[0]))
    if "offload" not in fixed and k.offload == "none":
        out.extend(with_knobs(k, offload=o) for o in _offloads(k.engine, k.zero) if o != "none")
    return out


#: ``--fix`` keys that are not :class:`Knobs` but setup fields (every flag ``trainmem estimate`` names, less the
#: pool's and the request's own: gpu, gpus, gpu_memory, seq_len, precision); they apply to every configuration
#: evaluated, as pinned (``no_sp=true`` is ``sp=false``; ``recompute_layers=N`` is ``recompute=block-N``).
SETUP_PIN_KEYS = ("sp", "megatron_deepspeed", "stage_layers", "optimizer", "optimizer_impl", "attn", "attn_kernel",
                  "backward_prefetch", "loop", "loss", "loss_chunks", "async_tp", "no_loss_parallel", "grad_reduce_16bit",
                  "fp8_params", "fp8_backend", "lora_rank", "lora_targets", "qlora", "qlora_impl", "adapter_dtype",
                  "offload_activations", "fsdp_version")
_REQUEST_KEYS = {"gpu": "--cluster", "gpus": "--cluster", "gpu_memory": "--cluster (a .toml with memory)",
                 "seq_len": "--seq-len", "precision": "--precision"}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _pin_value(key: str, value: str) -> object:
    """A setup field's ``--fix`` value, typed and checked as :class:`~trainmem.setup.TrainingSetup` types it."""
    from typing import get_args

    from pydantic import TypeAdapter, ValidationError

    from trainmem.setup import TrainingSetup
    ann = TrainingSetup.model_fields[key].annotation
    low = value.lower()
    if ann is bool or bool in get_args(ann):
        if low not in _TRUE + _FALSE:
            raise ConfigError(f"--fix: {key} takes true or false, got {value!r}")
        return low in _TRUE
    if key == "fsdp_version":  # (an int Literal: pydantic does not read it from a string)
        if value.strip() not in ("1", "2"):
            raise ConfigError(f"--fix: fsdp_version takes 1 or 2, got {value!r}")
        return int(value)
    if key in ("stage_layers", "lora_targets"):  # (',' separates the pins: the list is '/'-separated)
        parts = tuple(p.strip() for p in value.split("/") if p.strip())
        if key == "stage_layers":
            if not all(p.isdigit() for p in parts):
                raise ConfigError(f"--fix: stage_layers {value!r}: layer counts separated by '/', e.g. 15/16/16/15")
            return tuple(int(p) for p in parts)
        return parts
    try:
        got = TypeAdapter(ann).validate_strings(value)
    except ValidationError:
        options = [a for arg in get_args(ann) for a in (get_args(arg) or [arg]) if isinstance(a, str)]
        hint = f"one of {', '.join(options)}" if options else "a positive integer"
        raise ConfigError(f"--fix: {key} {value!r} is not {hint}") from None
    if isinstance(got, int) and got < 0:
        raise ConfigError(f"--fix: {key} must be ≥ 0, got {value!r}")
    return got


def parse_fix(text: str) -> dict[str, object]:
    """``--fix k=v,…`` → a dict of typed knob values (one-line ConfigError on a bad key or value): the
    :data:`KNOB_KEYS` and the setup fields of :data:`SETUP_PIN_KEYS`."""
    out: dict[str, object] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        key = key.strip().replace("-", "_")
        value = value.strip()
        if not sep or not value:
            raise ConfigError(f"--fix: {part!r} is not key=value")
        if key in _REQUEST_KEYS:
            raise ConfigError(f"--fix: {key} is the request's own; give it with {_REQUEST_KEYS[key]}")
        if key == "no_sp":
            key, value = "sp", "false" if value.lower() in _TRUE else "true"
        if key == "recompute_layers":
            if not value.isdigit() or int(value) < 1:
                raise ConfigError(f"--fix: recompute_layers must be a positive integer, got {value!r}")
            if out.get("recompute", "full") != "full" and not str(out.get("recompute")).startswith("block-"):
                raise ConfigError(f"--fix: recompute_layers needs recompute=full, got recompute={out['recompute']}")
            key, value = "recompute", f"block-{int(value)}"
        if key in SETUP_PIN_KEYS:
            out[key] = _pin_value(key, value)
            continue
        if key not in KNOB_KEYS:
            raise ConfigError(f"--fix: unknown knob {key!r}; knobs: {', '.join(KNOB_KEYS + SETUP_PIN_KEYS)}, "
                              "recompute_layers")
        if key == "engine":
            if value not in ENGINES:
                raise ConfigError(f"--fix: engine {value!r} is not one of {', '.join(ENGINES)}")
            out[key] = value
        elif key == "recompute":
            block = value.startswith("block-") and value[6:].isdigit() and int(value[6:]) >= 1
            if value not in _RECOMPUTE and not block:
                raise ConfigError(f"--fix: recompute {value!r} is not one of {', '.join(_RECOMPUTE)} (or block-N)")
            if str(out.get("recompute", "")).startswith("block-") and value != "full":
                raise ConfigError(f"--fix: recompute_layers needs recompute=full, got recompute={value}")
            if not (value == "full" and str(out.get("recompute", "")).startswith("block-")):
                out[key] = value
        elif key == "offload":
            if value not in ("none", "optimizer", "optimizer+params"):
                raise ConfigError(f"--fix: offload {value!r} is not one of none, optimizer, optimizer+params")
            out[key] = value
        else:
            if not value.isdigit() or (int(value) < 1 and key != "zero") or len(value) > 7:
                raise ConfigError(f"--fix: {key} must be a positive integer, got {value!r}")
            out[key] = int(value)
    return out
