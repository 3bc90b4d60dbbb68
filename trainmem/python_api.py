"""trainmem's Python API: ``estimate``, ``plan``, ``compare`` and ``doctor`` as functions, whose results are
the CLI's ``--json`` objects (``docs/api.md``).

Each function takes the command's flags as keywords in snake_case (``seq_len=4096``, ``engine="fsdp2"``: the
fields of :class:`trainmem.setup.TrainingSetup`) and a model given as any of :data:`ModelRef`: a catalog name,
hub id, path or bare size (as on the command line), a ``config.json`` dict, a ``transformers.PretrainedConfig``,
or a live ``nn.Module`` / ``PreTrainedModel`` / ``PeftModel`` (read by :mod:`trainmem.live_model`: exact
parameter counts, dtypes, LoRA, 4-bit base, gradient checkpointing). Results are :class:`Result` objects whose
attributes are the ``--json`` keys and whose :meth:`Result.to_dict` is that very object
(``tests/test_python_api.py`` compares them with the CLI's stdout).

The JSON builders the CLI prints (:func:`estimate_json`, :func:`max_micro_batch_json`, :func:`plan_checks`,
:func:`plan_request`, :func:`plan_json`) live here, so the command line and the API cannot drift.

Bad input raises :class:`trainmem.errors.TrainmemError` subclasses with one line, as the CLI prints them.
Importing this module is light (no torch, no pydantic); each function imports what it needs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Union, overload

from trainmem.errors import ConfigError

if TYPE_CHECKING:
    from trainmem.memory.estimate import MemoryEstimate
    from trainmem.model.spec import ModelSpec
    from trainmem.plan.result import PlanResult
    from trainmem.plan.search import PlanRequest
    from trainmem.setup import TrainingSetup

__all__ = ["ModelRef", "Result", "Estimate", "MaxMicroBatch", "Plan", "Comparison", "Diagnosis", "estimate",
           "plan", "compare", "doctor", "build_model", "estimate_json", "explain_json", "max_micro_batch_json", "plan_checks", "plan_sizing", "PLAN_EXTRA_KEYS",
           "plan_request", "plan_json"]

ModelRef = Union[str, "os.PathLike[str]", Mapping[str, Any], Any]
"""A model: a catalog name, hub id, path to a config.json (or its folder) or bare size like ``"7B"``; a config
dict; a ``transformers.PretrainedConfig``; or a live ``torch.nn.Module`` (``PreTrainedModel``, ``PeftModel``)."""

_NOT_SETUP = ("notes",)


# --------------------------------------------------------------------------- results

class Result:
    """A command's ``--json`` object: its keys are attributes (``r.peak_allocated_bytes``), :meth:`to_dict`
    returns the object itself (a fresh copy), ``r["key"]`` reads one key."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any]) -> None:
        # through JSON, so that tuples are lists and the dict equals what `--json` prints, key for key
        object.__setattr__(self, "_data", json.loads(json.dumps(dict(data))))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key {name!r}; keys: {', '.join(self._data)}") from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._data))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._data == self._data  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def keys(self) -> list[str]:
        return list(self._data)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object of the same command (a copy)."""
        return json.loads(json.dumps(self._data))

    def __repr__(self) -> str:
        shown = [f"{k}={self._data[k]!r}" for k in self._repr_keys if k in self._data]
        return f"{type(self).__name__}({', '.join(shown)})"

    _repr_keys: tuple[str, ...] = ()


class Estimate(Result):
    """``trainmem estimate --json`` (README, "--json keys"): the peak of one step on the most loaded rank."""

    __slots__ = ()
    _repr_keys = ("model", "gpu", "peak_allocated_bytes", "peak_reserved_bytes", "fits")
    if TYPE_CHECKING:
        model: str
        gpu: str
        peak_allocated_bytes: int
        """Prediction of ``torch.cuda.max_memory_allocated()``."""
        peak_reserved_bytes: int
        device_total_bytes: int
        """What nvidia-smi shows: reserved + CUDA context + NCCL."""
        gpu_memory_bytes: int
        static_bytes: int
        breakdown_at_peak_bytes: dict[str, int]
        category_peak_bytes: dict[str, int]
        peak_phase: str
        host_memory_bytes: int
        fits: bool
        headroom_bytes: int
        timeline: list[dict[str, Any]]
        n_params: int
        n_trainable_params: int
        pipeline_stage: int
        activation_bytes_per_layer: int
        cuda_only_bytes: int
        paged_optimizer_bytes: int
        """bitsandbytes paged optimizers: state in CUDA managed memory, outside the allocator's figures."""
        device_map: dict[str, Any]
        """Only with ``device_map="auto"``: how transformers split the layers over the GPUs (``layers_per_gpu``, ``head_gpu``, ``most_loaded_gpu``, ...)."""
        assumptions: list[str]
        setup: dict[str, Any]
        explain: dict[str, Any]
        """Only with ``explain=True``: ``{"lines": [...], "accountings": [...]}``."""


class MaxMicroBatch(Result):
    """``trainmem estimate --max-micro-batch --json``: the largest micro-batch that fits."""

    __slots__ = ()
    _repr_keys = ("max_micro_batch", "gpu", "capped")
    if TYPE_CHECKING:
        max_micro_batch: int
        gpu: str
        capped: bool
        cap: int
        estimate: dict[str, Any] | None


class Plan(Result):
    """``trainmem plan --json``: the plans, best first (and ``min_gpus`` / ``gpus_for_deadline`` when asked)."""

    __slots__ = ()
    _repr_keys = ("search_seconds",)
    if TYPE_CHECKING:
        search_seconds: float
        plans: list[dict[str, Any]]
        min_gpus: dict[str, Any]
        gpus_for_deadline: dict[str, Any]

    def __repr__(self) -> str:
        best = self._data["plans"][0] if self._data.get("plans") else None
        brief = {k: best[k] for k in ("engine", "dp", "tp", "pp", "micro_batch", "tokens_per_second") if k in best} \
            if best else None
        return f"Plan(plans={len(self._data.get('plans', []))}, best={brief!r})"


class Comparison(Result):
    """``trainmem compare --json``: the baseline and what each technique saves and costs."""

    __slots__ = ()
    if TYPE_CHECKING:
        baseline: dict[str, Any]
        options: list[dict[str, Any]]
        not_applicable: list[Any]

    def __repr__(self) -> str:
        return f"Comparison(options={len(self._data.get('options', []))})"


class Diagnosis(Result):
    """``trainmem doctor --json``: the findings, most likely first."""

    __slots__ = ()
    if TYPE_CHECKING:
        findings: list[dict[str, Any]]

    def __repr__(self) -> str:
        return f"Diagnosis(causes={[f.get('cause') for f in self._data.get('findings', [])]!r})"


# --------------------------------------------------------------------------- the shared JSON builders

def estimate_json(spec: ModelSpec, ts: TrainingSetup, est: MemoryEstimate, *, explain: bool = False) -> dict:
    """The ``trainmem estimate --json`` object (``explain``: with the ``--explain`` lines as data). (The cheapest
    fix of a run that does not fit is not in it — it costs a ``compare``, ~0.1 s a start —: it is ``compare
    --json``'s first option, and :func:`trainmem.plan.compare.cheapest_fix`.)"""
    out = est.to_dict()
    if explain:
        out["explain"] = explain_json(spec, ts, est)
    return out


def explain_json(spec: ModelSpec, ts: TrainingSetup, est: MemoryEstimate) -> dict:
    """The ``explain`` member of ``trainmem estimate --explain --json``: one {category, bytes, formula, source}
    per line, and the other accountings."""
    from trainmem.report.explain import accountings, explain_lines
    return {"lines": [{"category": ln.category, "bytes": ln.bytes, "formula": ln.formula, "source": ln.source}
                      for ln in explain_lines(spec, ts, est)],
            "accountings": [{"name": n, "bytes": b, "why": why} for n, b, why in accountings(spec, ts)]}


def max_micro_batch_json(ts: TrainingSetup, best: int, est: MemoryEstimate | None) -> dict:
    """The ``trainmem estimate --max-micro-batch --json`` object (``capped``: the search stopped at its cap,
    larger micro-batches may fit too)."""
    from trainmem.memory.search import MICRO_BATCH_CAP
    return {"max_micro_batch": best, "gpu": ts.gpu, "capped": best >= MICRO_BATCH_CAP, "cap": MICRO_BATCH_CAP,
            "estimate": est.to_dict() if est else None}


def plan_checks(global_batch: int, cluster: str | None, gpu: str | None, min_gpus: bool, tokens: float | None,
                days: float | None) -> bool:
    """The checks ``trainmem plan`` makes before searching (one line each); True when a sizing question
    (``min_gpus``, ``tokens`` with ``days``) is asked."""
    if global_batch < 0:  # given, and wrong (0 is the flag's "not given")
        raise ConfigError(f"--global-batch must be ≥ 1, got {global_batch}")
    if global_batch < 1:
        raise ConfigError("--global-batch is required (sequences per optimizer step, ≥ 1)")
    sizing = min_gpus or tokens is not None or days is not None
    if sizing and not gpu:
        raise ConfigError("--min-gpus and --tokens/--days need --gpu TYPE")
    if (tokens is None) != (days is None):
        raise ConfigError("--tokens and --days go together")
    if not sizing and not cluster:
        raise ConfigError("--cluster is required (e.g. --cluster 8xH100-SXM-80G)")
    return bool(sizing)


#: The setup fields ``trainmem plan`` takes as its own flags (the request's ``extra``; unset or false ones are
#: dropped by :func:`plan_request`).
PLAN_EXTRA_KEYS = ("optimizer", "attn", "lora_rank", "qlora", "lora_targets", "attn_kernel", "grad_reduce_16bit",
                   "fp8_params", "async_tp", "offload_activations")


def plan_request(model: str | ModelSpec, cluster: str, global_batch: int, seq_len: int, precision: str,
                 margin: float, top: int, fix: str | None, extra: dict,
                 engines: tuple[str, ...] | None = None) -> PlanRequest:
    """The planner's request of ``trainmem plan`` (``margin`` in percent); the model and the fixed setup fields
    are validated once, as ``trainmem estimate`` validates them. ``model``: a reference or a resolved spec."""
    from trainmem.api import build, build_spec
    from trainmem.hardware import parse_cluster
    from trainmem.plan.search import PlanRequest, engine_neutral_extras
    from trainmem.plan.space import ENGINES, parse_fix

    pool = parse_cluster(cluster)
    fields = {k: v for k, v in extra.items() if v is not None and (v or k == "lora_rank")}
    checked_fields = dict(seq_len=seq_len, gpu=pool.groups[0].gpu.name, **engine_neutral_extras(fields, precision))
    spec, checked = build(model, **checked_fields) if isinstance(model, str) else build_spec(model, **checked_fields)
    fields.setdefault("attn", checked.attn)  # the model's default (eager for families without sdpa)
    fixed = parse_fix(fix) if fix else {}
    return PlanRequest(spec=spec, cluster=pool, global_batch=global_batch, seq_len=seq_len, precision=precision,
                       margin=margin / 100, top=top, fixed=fixed, engines=engines or ENGINES, setup_extra=fields)


def plan_sizing(req: PlanRequest, gpu: str | None, min_gpus: bool, tokens: float | None,
                days: float | None) -> dict:
    """The ``min_gpus`` / ``gpus_for_deadline`` members of ``trainmem plan --json`` (empty when not asked)."""
    out: dict = {}
    if not (min_gpus or tokens is not None):
        return out
    from trainmem.plan.sizing import gpus_for_deadline, min_gpus as find_min
    if min_gpus:
        out["min_gpus"] = find_min(req, gpu).to_dict()
    if tokens is not None:
        out["gpus_for_deadline"] = {**gpus_for_deadline(req, gpu, tokens, days).to_dict(), "tokens": tokens, "days": days}
    return out


def plan_json(result: PlanResult | None, sizing: dict) -> dict:
    """The ``trainmem plan --json`` object: the search's plans (none without a cluster) and the sizing answers."""
    d = result.to_dict() if result is not None else {"search_seconds": 0.0, "plans": []}
    d.update(sizing)
    return d


# --------------------------------------------------------------------------- model references

def _setup_fields(setup: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The keywords as setup fields; an unknown one is refused with the valid names."""
    from trainmem.setup import TrainingSetup
    valid = [f for f in TrainingSetup.model_fields if f not in _NOT_SETUP]
    for key in setup:
        if key not in valid:
            raise ConfigError(f"{where}() got an unknown setup keyword {key!r}; valid: {', '.join(valid)}")
    return dict(setup)


def build_model(model: ModelRef, **setup: Any) -> tuple[ModelSpec, TrainingSetup]:
    """The resolved model and the validated setup, for any :data:`ModelRef` (what every function here
    estimates). Keywords left out (or None) take the defaults; for a live model they take what the object
    says (LoRA, 4-bit base, dtype, gradient checkpointing, attention), each stated in ``setup.notes``."""
    from trainmem.api import build, build_spec

    from_file = setup.pop("from_file", None)
    fields = _setup_fields(setup, "estimate")
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    obj = _spec_of_object(model) if model is not None and not isinstance(model, str) else None
    if from_file is not None:  # ``--from FILE``: the keywords given win over the file (trainmem.frameworks.readers)
        from trainmem.frameworks.readers import merge_fields, read_config
        file = read_config(os.fspath(from_file))
        # (a regex of LoRA targets is matched on this model, as the CLI's MODEL: readers/peft_regex.py)
        fields = {**merge_fields(file, fields, obj[0] if obj is not None else model), "notes": tuple(file.notes())}
        if model is None and file.model is None:
            raise ConfigError(f"--from {from_file}: {file.model_error or 'the file names no model'}; give MODEL")
        if isinstance(model, str) and file.model is not None and file.model != model:  # (as readers.file_setup)
            fields["notes"] += (f"model {model}: given on the command line, not the file's {file.model}",)
        model = file.model if model is None else model
    if isinstance(model, str):
        return build(model, **fields)
    spec, live_fields, notes, check = obj  # type: ignore[misc]
    for k, v in live_fields.items():
        if fields.get(k) is None:
            fields[k] = v
        else:
            notes = [n for n in notes if n.split()[0].rstrip(":,") != k]  # each line starts with its field
    spec, ts = build_spec(spec, **fields)
    if check is not None:
        notes = notes + check(spec, ts)
    if notes:
        ts = ts.model_copy(update={"notes": tuple(ts.notes) + tuple(notes)})
    return spec, ts


def _spec_of_object(model: Any):  # noqa: ANN202 - (ModelSpec, fields, notes, check | None)
    """A config dict, a PretrainedConfig, or a live module → its spec, the setup fields it implies, notes."""
    from trainmem.model.hf import spec_from_hf_config

    if isinstance(model, Mapping):
        cfg = dict(model)
        name = str(cfg.get("_name_or_path") or "config dict")
        return spec_from_hf_config(cfg, name=name, source="a config dict"), {}, [], None
    if _is_torch_module(model):
        from trainmem.live_model import read_live_model
        live = read_live_model(model)
        return live.spec, live.fields, live.notes, live.check
    if callable(getattr(model, "to_dict", None)) and hasattr(model, "model_type"):  # transformers.PretrainedConfig
        cfg = model.to_dict()
        name = str(getattr(model, "name_or_path", "") or type(model).__name__)
        return spec_from_hf_config(cfg, name=name, source=f"a {type(model).__name__}"), {}, [], None
    raise ConfigError(f"model: expected a catalog name, a path, a config dict, a transformers PretrainedConfig or a "
                      f"torch.nn.Module, got {type(model).__name__}")


def _is_torch_module(obj: Any) -> bool:
    """True for a ``torch.nn.Module`` (checked without importing torch for anything else)."""
    import sys
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


# --------------------------------------------------------------------------- the functions

@overload
def estimate(model: ModelRef, *, explain: bool = ..., max_micro_batch: Literal[False] = ...,
             **setup: Any) -> Estimate: ...
@overload
def estimate(model: ModelRef, *, explain: bool = ..., max_micro_batch: Literal[True], **setup: Any) -> MaxMicroBatch: ...


def estimate(model: ModelRef, *, explain: bool = False, max_micro_batch: bool = False,
             **setup: Any) -> Estimate | MaxMicroBatch:
    """Peak GPU memory of one training step on the most loaded rank: ``trainmem estimate --json``.

    ``setup``: the CLI flags in snake_case (``seq_len``, ``micro_batch``, ``engine``, ``gpus``, ``zero``,
    ``lora_rank``, ``lora_targets``, ``gpu``, ... — the fields of :class:`trainmem.setup.TrainingSetup`).
    ``explain``: add the ``explain`` member (``--explain``); ``max_micro_batch``: the largest micro-batch that
    fits on ``gpu`` instead (``--max-micro-batch``, a :class:`MaxMicroBatch`)."""
    from trainmem.memory import estimate as run_estimate

    spec, ts = build_model(model, **setup)
    if max_micro_batch:
        from trainmem.memory.search import max_micro_batch as search
        best, est = search(spec, ts)
        return MaxMicroBatch(max_micro_batch_json(ts, best, est))
    return Estimate(estimate_json(spec, ts, run_estimate(spec, ts), explain=explain))


def compare(model: ModelRef, **setup: Any) -> Comparison:
    """What each technique (accumulation, precision, recompute, ZeRO/FSDP, offload, TP, PP) saves and costs
    against this setup: ``trainmem compare --json``."""
    from trainmem.plan.compare import compare as run_compare

    spec, ts = build_model(model, **setup)
    return Comparison(run_compare(spec, ts))


def plan(model: ModelRef, *, cluster: str | None = None, global_batch: int = 0, seq_len: int = 4096,
         precision: str = "bf16", margin: float = 5.0, top: int = 5, fix: str | Mapping[str, Any] | None = None,
         min_gpus: bool = False, gpu: str | None = None, tokens: float | None = None, days: float | None = None,
         optimizer: str | None = None, attn: str | None = None, lora_rank: int | None = None,
         lora_targets: str | list[str] | tuple[str, ...] | None = None, qlora: bool | None = None,
         attn_kernel: str | None = None, grad_reduce_16bit: bool = False, fp8_params: bool = False,
         async_tp: bool = False, stack: str | None = None, offload_activations: bool = False,
         host_memory: str | int | None = None) -> Plan:
    """The fastest configurations that fit a GPU pool, or how many GPUs the model needs: ``trainmem plan --json``
    (without ``--export`` / ``--report``, which write files). Keywords are ``trainmem plan``'s flags; ``fix`` may
    be ``"engine=megatron,tp=4"`` or ``{"engine": "megatron", "tp": 4}``. For a live model, LoRA, the 4-bit
    base and the attention are read from the object unless given. ``host_memory`` (``"512GiB"`` or bytes) is the
    node's host RAM offload plans are checked against (``--host-memory``; default: the cluster spec's, else the
    catalog's per GPU type)."""
    from dataclasses import replace

    from trainmem.plan.search import plan as search

    sizing = plan_checks(global_batch, cluster, gpu, min_gpus, tokens, days)
    if isinstance(fix, Mapping):
        fix = ",".join(f"{k}={v}" for k, v in fix.items())
    if isinstance(lora_targets, (list, tuple)):
        lora_targets = ",".join(lora_targets)
    extra: dict[str, Any] = {"optimizer": optimizer, "attn": attn, "lora_rank": lora_rank, "qlora": qlora or None,
                             "lora_targets": lora_targets, "attn_kernel": attn_kernel,
                             "grad_reduce_16bit": grad_reduce_16bit or None, "fp8_params": fp8_params or None,
                             "async_tp": async_tp or None, "offload_activations": offload_activations or None}
    ref: str | ModelSpec
    if isinstance(model, (str, os.PathLike)):
        ref = os.fspath(model)
    else:
        spec, live_fields, _notes, _check = _spec_of_object(model)
        for k in ("lora_rank", "lora_targets", "qlora", "attn"):
            if extra.get(k) is None and live_fields.get(k) is not None:
                value = live_fields[k]
                extra[k] = ",".join(value) if k == "lora_targets" else value
        ref = spec
    if extra["lora_rank"] is None:
        extra["lora_rank"] = 0
    engines = None
    if stack:  # ``trainmem plan --stack``: the framework's engines and defaults (trainmem.frameworks.plan_stack)
        from trainmem.frameworks import plan_stack
        from trainmem.hardware import parse_cluster
        extra, engines = plan_stack(stack, extra, seq_len, parse_cluster(cluster or f"1x{gpu}").total_gpus)
    req = plan_request(ref, cluster or f"1x{gpu}", global_batch, seq_len, precision, margin, top, fix, extra,
                       engines)
    if host_memory is not None:
        req = replace(req, host_memory_bytes=_host_memory_bytes(host_memory))
    result = search(req) if cluster else None
    return Plan(plan_json(result, plan_sizing(req, gpu, min_gpus, tokens, days) if sizing else {}))


def _host_memory_bytes(value: str | int) -> int:
    """``plan(host_memory=...)``: a size text (``512GiB``) or whole bytes, > 0; else the CLI's one line."""
    from trainmem.units import parse_size_bytes
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"--host-memory must be > 0, got {value!r}")
        return value
    try:
        return parse_size_bytes(str(value))
    except ValueError as err:
        raise ConfigError(f"--host-memory: {err}") from None


def doctor(model: ModelRef | None = None, *, error: str | os.PathLike[str] | None = None,
           log: str | os.PathLike[str] | list[str | os.PathLike[str]] | None = None,
           snapshot: str | os.PathLike[str] | None = None, nvidia_smi: str | os.PathLike[str] | None = None,
           config: str | os.PathLike[str] | None = None, lang: str = "en", **setup: Any) -> Diagnosis:
    """Diagnose an OOM, a leak or a slow run from its files, against the estimate of the run:
    ``trainmem doctor --json``. ``error``, ``log`` (one file, or a list of one per rank), ``snapshot``,
    ``nvidia_smi``, ``config`` are paths, as on the command line; ``setup`` the estimate flags. A model that is
    not a name or a path (a config dict, a PretrainedConfig, a live module) is written as a config.json to a
    private temporary folder, with the setup fields the object implies."""
    import tempfile

    from trainmem.doctor.report import to_json
    from trainmem.doctor.run import DoctorInputs, run_doctor
    from trainmem.report.i18n import check_lang

    check_lang(lang)
    flags = _setup_fields(setup, "doctor")
    logs = [log] if isinstance(log, (str, os.PathLike)) else list(log or [])
    paths = {k: (os.fspath(v) if v is not None else None)
             for k, v in {"error": error, "snapshot": snapshot, "nvidia_smi": nvidia_smi, "config": config}.items()}

    def run(model_ref: str | None, fields: dict, private: bool = False) -> Diagnosis:
        inp = DoctorInputs(error=paths["error"], logs=[os.fspath(p) for p in logs], snapshot=paths["snapshot"],
                           nvidia_smi=paths["nvidia_smi"], config=paths["config"], model=model_ref, flags=fields)
        res = run_doctor(inp)
        out = to_json(res.findings, lang, res.expected)
        if private:  # (the private config.json, named as trainmem.estimate names a config object)
            out = json.loads(json.dumps(out).replace(json.dumps(model_ref)[1:-1], "config dict"))
        return Diagnosis(out)

    if model is None or isinstance(model, (str, os.PathLike)):
        return run(None if model is None else os.fspath(model), flags)
    cfg, live_fields = _config_of_object(model)
    with tempfile.TemporaryDirectory(prefix="trainmem-api-") as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(cfg, fh)
        return run(path, {**{k: v for k, v in live_fields.items() if flags.get(k) is None}, **flags}, private=True)


def _config_of_object(model: Any) -> tuple[dict, dict]:
    """The config.json dict of a non-string model and the setup fields a live one implies."""
    if isinstance(model, Mapping):
        return dict(model), {}
    if _is_torch_module(model):
        from trainmem.live_model import read_live_model
        live = read_live_model(model)
        return live.config, live.fields
    if callable(getattr(model, "to_dict", None)) and hasattr(model, "model_type"):
        return model.to_dict(), {}
    _spec_of_object(model)  # raises the one-line type error
    raise AssertionError("unreachable")  # pragma: no cover
