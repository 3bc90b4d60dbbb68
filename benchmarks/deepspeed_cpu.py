"""DeepSpeed itself against the deepspeed memory model: real tensors on DeepSpeed's CPU accelerator.

Each case runs a small Llama (``transformers.LlamaForCausalLM``) under ``deepspeed.initialize`` with the
``ds_config.json`` that ``trainmem export`` writes for the same setup (``trainmem.export.deepspeed.ds_config``),
on ``DS_ACCELERATOR=cpu`` with the gloo backend (world 1 or 2: one process per rank on localhost), for
three optimizer steps. A ``TorchDispatchMode`` (:class:`RealStorageTracker`, the tracer's
``StorageTracker`` without its fake-tensor shims) is entered before the model is built, so every
storage DeepSpeed allocates at init (flat buffers, master weights, reduce buckets) is counted; the peak
of live storage bytes (each rounded up to 512 B, as the CUDA caching allocator does) is recorded during
the last step, per phase (forward / backward / step of each micro-batch).

That peak is compared with ``trainmem.memory.estimate`` for the same setup, less ``cuda_only_bytes``
(the cuBLAS workspace, which a CPU run does not have). What differs between DeepSpeed on the CPU and on
CUDA, and how it is handled, is in docs/deepspeed_cpu.md.

    DS_ACCELERATOR=cpu .venv/bin/python benchmarks/deepspeed_cpu.py [--markdown] [--quick] [--knobs] [--json F]
        [--cases z2-bf16-w1-ga1-mb1-s256,...] [--breakdown]    (DSCPU_STACKS=1: tag each storage with its caller)

Needs ``deepspeed`` (0.19.5, ``DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed==0.19.5``); the CPU
FusedAdam op is JIT-built by DeepSpeed on first use (g++ and ninja).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The measured model: a small Llama (untied LM head), 11.4M parameters.
LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 256,
    "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
    "vocab_size": 16000, "rms_norm_eps": 1e-5, "max_position_embeddings": 1024,
    "tie_word_embeddings": False, "rope_theta": 10000.0, "hidden_act": "silu",
}
#: Models by name (``Case.model``): ``tiny`` (1.4M parameters) is the test's.
MODELS = {"small": LLAMA, "tiny": {**LLAMA, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
                                    "vocab_size": 4096}}
STEPS = 3
"""Optimizer steps run; the last one is measured (optimizer states exist from the first)."""


@dataclass(frozen=True)
class Case:
    zero: int
    precision: str = "mixed-bf16"  # or "fp32"
    world: int = 1
    grad_accum: int = 1
    micro_batch: int = 1
    seq_len: int = 256
    reduce_bucket: int | None = None
    """reduce_bucket_size / allgather_bucket_size in the config; None: the value trainmem writes (5e8)."""
    prefetch_bucket: int | None = None
    """stage3_prefetch_bucket_size; None: trainmem's (5e7)."""
    reuse_distance: int | None = None
    """stage3_max_reuse_distance; None: trainmem's (1e9)."""
    model: str = "small"
    """A key of MODELS."""

    @property
    def name(self) -> str:
        p = {"mixed-bf16": "bf16", "fp32": "fp32"}[self.precision]
        tail = f"-rb{self.reduce_bucket:.0e}" if self.reduce_bucket else ""
        tail += f"-pf{self.prefetch_bucket:.0e}" if self.prefetch_bucket is not None else ""
        tail += f"-rd{self.reuse_distance:.0e}" if self.reuse_distance is not None else ""
        head = "" if self.model == "small" else f"{self.model}-"
        return f"{head}z{self.zero}-{p}-w{self.world}-ga{self.grad_accum}-mb{self.micro_batch}-s{self.seq_len}{tail}"


def default_cases() -> list[Case]:
    out = []
    for prec in ("mixed-bf16", "fp32"):
        for z in (0, 1, 2, 3):
            for world in (1, 2):
                for ga in (1, 2):
                    out.append(Case(zero=z, precision=prec, world=world, grad_accum=ga))
    return out


def knob_cases() -> list[Case]:
    """DeepSpeed settings away from the defaults (the estimate's constants are swapped to match): a reduce
    bucket smaller than the model (several reductions per backward), and stage 3 releasing every
    parameter after use without prefetching (the per-layer gathering large models get)."""
    out = [Case(zero=z, world=2, grad_accum=ga, reduce_bucket=2_000_000) for z in (1, 2, 3) for ga in (1, 2)]
    out += [Case(zero=3, world=2, prefetch_bucket=0, reuse_distance=0),
            Case(zero=3, world=2, precision="fp32", prefetch_bucket=0, reuse_distance=0)]
    # short sequences and a bucket of about half the model: the end of backward (the stage 1/2 epilogue,
    # the gradients still in .grad next to the bucket and the partition) makes the peak
    out += [Case(zero=z, precision=p, world=w, seq_len=64, reduce_bucket=6_000_000)
            for z in (1, 2) for p in ("fp32", "mixed-bf16") for w in (1, 2)]
    return out


def quick_cases() -> list[Case]:
    return [Case(zero=z, world=w) for z in (0, 1, 2, 3) for w in (1, 2)]


# -- the estimate -----------------------------------------------------------------------------------
def setup_of(case: Case):  # noqa: ANN201 - TrainingSetup (trainmem imported lazily)
    from trainmem.setup import make_setup

    return make_setup(engine="deepspeed", zero=case.zero, precision=case.precision, gpus=case.world,
                      micro_batch=case.micro_batch, grad_accum=case.grad_accum, seq_len=case.seq_len,
                      attn="sdpa", loop="trainer")


class _PhaseTimeline:
    """Wraps the estimator's Timeline class so that each phase's peak is kept (the estimate reports
    the overall peak and one point per phase only)."""

    peaks: dict[str, int] = {}

    @classmethod
    def make(cls, **kw: Any):  # noqa: ANN206 - a trainmem Timeline
        from trainmem.memory.timeline import Timeline

        peaks = cls.peaks

        class PhaseTimeline(Timeline):
            def alloc(self, key: str, category: str, n_bytes: int, **kw: object) -> None:
                super().alloc(key, category, n_bytes, **kw)
                k = _phase_kind(self.phase)
                peaks[k] = max(peaks.get(k, 0), self.current)

        return PhaseTimeline(**kw)


def estimate_case(case: Case, cfg: dict | None = None) -> dict[str, Any]:
    """trainmem's estimate of the case: peak allocated less the CUDA-only bytes, and each phase's peak."""
    import importlib

    from trainmem.model.hf import spec_from_hf_config

    spec = spec_from_hf_config(cfg or MODELS[case.model], name=f"ds-cpu-llama-{case.model}")
    E = importlib.import_module("trainmem.memory.estimate")  # (trainmem.memory.estimate is also a function)
    _PhaseTimeline.peaks = {}
    D = importlib.import_module("trainmem.memory.engines.deepspeed")
    orig, E.Timeline = E.Timeline, _PhaseTimeline.make
    # (not setup fields: the estimate assumes DeepSpeed's defaults; the engine's constants are swapped here)
    saved = {k: getattr(D, k) for k in _KNOBS.values()}
    for field_name, const in _KNOBS.items():
        if getattr(case, field_name) is not None:
            setattr(D, const, getattr(case, field_name))
    try:
        est = E.estimate(spec, setup_of(case))
    finally:
        E.Timeline = orig
        for k, v in saved.items():
            setattr(D, k, v)
    cuda = est.cuda_only_bytes
    phases = dict(_PhaseTimeline.peaks)
    return {"peak": est.peak_allocated_bytes - cuda, "phases": phases, "peak_phase": est.peak_phase,
            "static": est.static_bytes - cuda, "breakdown": est.breakdown_at_peak_bytes}


#: Case field -> the deepspeed engine's constant it overrides (and the ds_config key it sets).
_KNOBS = {"reduce_bucket": "DS_REDUCE_BUCKET", "prefetch_bucket": "DS_PREFETCH_BUCKET",
          "reuse_distance": "DS_MAX_REUSE_DISTANCE"}


def _phase_kind(phase: str) -> str:
    """forward / backward / step (estimate: 'loss mb0' is forward, 'zero_grad' is step)."""
    p = phase.split()[0]
    if phase == "step start":
        return "static"
    return {"loss": "forward", "optimizer": "step", "zero_grad": "step", "step": "step"}.get(p, p)


# -- the measurement (one process per rank) ---------------------------------------------------------
def ds_config_of(case: Case) -> dict[str, Any]:
    from trainmem.export.deepspeed import ds_config

    cfg = ds_config(setup_of(case))
    cfg["steps_per_print"] = 10**9
    cfg["wall_clock_breakdown"] = False
    z = cfg["zero_optimization"]
    if case.reduce_bucket and case.zero:
        z["reduce_bucket_size"] = z["allgather_bucket_size"] = case.reduce_bucket
    if case.prefetch_bucket is not None and case.zero == 3:
        z["stage3_prefetch_bucket_size"] = case.prefetch_bucket
    if case.reuse_distance is not None and case.zero == 3:
        z["stage3_max_reuse_distance"] = case.reuse_distance
    return cfg


def _tracker_class():  # noqa: ANN202 - a StorageTracker subclass, built where torch is imported
    import torch
    from torch.utils._pytree import tree_flatten

    from trainmem.trace.tracker import StorageTracker, _is_mutable

    class RealStorageTracker(StorageTracker):
        """``StorageTracker`` on real tensors: no fake-tensor shims (``.item()`` returns the real value)."""

        def observe_storage(self, st: torch.UntypedStorage, changed: bool = False) -> int:
            if st.device.type == "meta":  # (DeepSpeed keeps meta tensors as shapes: no memory)
                return -1
            return super().observe_storage(st, changed)

        def __init__(self) -> None:
            super().__init__()
            self.stacks = bool(os.environ.get("DSCPU_STACKS"))
            self.in_comm = 0
            """> 0 inside a torch.distributed collective: what is born there is the gloo backend's own memory"""
            self.comm_now = 0
            self.comm_peak = 0
            self.comm_bytes: dict[int, int] = {}

        def _birth(self, key: int, size: int) -> None:
            if self.in_comm:
                self.comm_bytes[key] = size
                self.comm_now += size
                self.comm_peak = max(self.comm_peak, self.comm_now)
                size = 0
            super()._birth(key, size)

        def _death(self, key: int) -> None:
            if key in self.comm_bytes:
                self.comm_now -= self.comm_bytes.pop(key)
            super()._death(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            out = func(*args, **(kwargs or {}))
            changed = _is_mutable(func, self._mutable)
            self.tag = _where(func) if self.stacks else func.__name__
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.observe_storage(t.untyped_storage(), changed)
            self.tag = None
            return out

    return RealStorageTracker


def _where(func: Any) -> str:
    """The op and the innermost DeepSpeed / transformers frame that called it (DSCPU_STACKS=1, for debugging)."""
    import traceback

    if os.environ.get("DSCPU_STACKS") == "full":
        return func.__name__ + " " + " < ".join(f"{fr.filename.split('site-packages/')[-1]}:{fr.lineno}"
                                                 for fr in reversed(traceback.extract_stack(limit=14)[:-3]))
    for fr in reversed(traceback.extract_stack(limit=40)):
        if "/deepspeed/" in fr.filename or "/transformers/" in fr.filename:
            return f"{func.__name__} {fr.filename.split('site-packages/')[-1]}:{fr.lineno}"
    return func.__name__


#: Collectives DeepSpeed calls on buffers it allocated itself. ProcessGroupNCCL runs the NCCL kernel on the
#: given (contiguous) buffers; gloo allocates tensors of its own inside some of them (reduce_scatter_tensor
#: copies its input, twice at its peak), so storages born inside a collective are not counted.
_COLLECTIVES = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "reduce_scatter_single", "all_gather_single", "_reduce_scatter_base",
                "_all_gather_base", "all_to_all_single", "barrier", "all_reduce_coalesced")


def _exclude_collectives(tracker: Any) -> None:
    """Wrap torch.distributed's collectives (before DeepSpeed binds them) so that storages born inside one
    are recorded as zero bytes (their peak is kept in ``tracker.comm_peak``)."""
    import functools

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name in _COLLECTIVES:
        for mod in (dist, c10d):
            fn = getattr(mod, name, None)
            if fn is None or getattr(fn, "_dscpu", False):
                continue

            @functools.wraps(fn)
            def wrapped(*a: Any, _fn: Any = fn, **k: Any) -> Any:
                tracker.in_comm += 1
                try:
                    return _fn(*a, **k)
                finally:
                    tracker.in_comm -= 1

            wrapped._dscpu = True  # type: ignore[attr-defined]
            setattr(mod, name, wrapped)


def _named_storages(engine: Any, tracker: Any) -> dict[int, str]:
    """Tracker key -> a name, for the tensors the engine and its optimizer hold (one level of lists,
    tuples and dicts under each attribute; optimizer state by its key)."""
    import torch

    names: dict[int, str] = {}

    def add(t: Any, name: str) -> None:
        if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
            k = tracker.key_of(t.untyped_storage())
            if k is not None and name not in names.get(k, "").split("|"):
                names[k] = f"{names[k]}|{name}" if k in names else name

    for p in engine.module.parameters():
        add(p, "param")
        add(p.grad, "param.grad")
    opt = engine.optimizer
    objs = [("opt", opt)]
    inner = getattr(opt, "optimizer", None)
    if inner is not None:
        objs.append(("basic", inner))
    for o in (inner, opt):
        for st in (getattr(o, "state", None) or {}).values():
            for k, v in st.items():
                add(v, f"adam.{k}")
    for prefix, obj in objs:
        for attr, v in list(vars(obj).items()):
            vals = v if isinstance(v, (list, tuple)) else list(v.values()) if isinstance(v, dict) else [v]
            for x in vals:
                if isinstance(x, (list, tuple)):
                    for y in x:
                        add(y, f"{prefix}.{attr}")
                else:
                    add(x, f"{prefix}.{attr}")
    return names


def _big_lives(tracker: Any, start: int, least: int = 2**20) -> list[list]:
    """Storages of at least ``least`` bytes born in the recorded step: size, tag, birth and death phases."""
    phases = {}
    ev = start
    for ph, _ in tracker.timeline[1:]:
        ev += 1
        phases[ev] = ph
    return [[lf.nbytes, lf.tag or "", lf.phase, phases.get(lf.died, "after") if lf.died else "alive"]
            for lf in tracker.lives if lf.born > start and lf.nbytes >= least]


def _alive_at(tracker: Any, event: int) -> list[Any]:
    return [lf for lf in tracker.lives if lf.born <= event and (lf.died is None or lf.died > event)]


#: Environment switch of the workers (the test's choice): ``1`` builds none of DeepSpeed's C++ ops, which it
#: JIT-compiles on first use (minutes on a clean machine): FusedAdam runs on torch's fused CPU Adam kernel
#: (:class:`_TorchFusedAdamOp`) and the CPU backend's shared-memory op (``deepspeed_shm_comm``, built by
#: ``TorchBackend.__init__``, comm/torch.py:31-37, 109; used by ``inference_all_reduce`` only, comm/torch.py:186-195)
#: is not built. Neither changes what a training step allocates.
NO_JIT_ENV = "DSCPU_NO_JIT"


class _TorchFusedAdamOp:
    """Stands in for DeepSpeed's CPU ``fused_adam`` op (ops/csrc/cpu/adam/fused_adam.cpp: ``multi_tensor_adam``
    updates each (grad, param, exp_avg, exp_avg_sq) in place, allocating nothing) with torch's fused CPU
    kernel, also in place (``torch._fused_adamw_``; 512 B for the step scalar). DeepSpeed's FusedAdam class
    around it, and its state, are DeepSpeed's own."""

    @staticmethod
    def multi_tensor_adam(chunk_size: int, noop: Any, tensor_lists: list, lr: float, beta1: float, beta2: float,
                          eps: float, step: int, mode: int, bias_correction: int, weight_decay: float) -> None:
        import torch

        g, p, m, v = tensor_lists
        fn = torch._fused_adamw_ if mode == 1 else torch._fused_adam_
        fn(p, g, m, v, [], [torch.tensor(float(step)) for _ in p], lr=lr, beta1=beta1, beta2=beta2,
           weight_decay=weight_decay, eps=eps, amsgrad=False, maximize=False)


class _TorchFusedAdamBuilder:
    def load(self) -> type[_TorchFusedAdamOp]:
        return _TorchFusedAdamOp


def _run_steps(engine: Any, tracker: Any, case: Case, rank: int) -> tuple[int, int]:
    """STEPS optimizer steps (``loss = engine(...).loss``: the output dies before backward, as in HF
    Trainer); the last one is recorded. Returns (live bytes at its start, its first event)."""
    import torch

    g = torch.Generator().manual_seed(rank)
    batches = [torch.randint(0, MODELS[case.model]["vocab_size"], (case.micro_batch, case.seq_len), generator=g)
               for _ in range(case.grad_accum)]
    start_alloc = rec_start = 0
    for step in range(STEPS):
        if step == STEPS - 1:
            start_alloc = tracker.allocated
            rec_start = tracker.start_recording("step start")
        for mb, ids in enumerate(batches):
            tracker.phase = f"forward mb{mb}"
            loss = engine(input_ids=ids, labels=ids).loss
            tracker.phase = f"backward mb{mb}"
            engine.backward(loss)
            del loss
            tracker.phase = f"step mb{mb}"
            engine.step()  # (DeepSpeed steps at the accumulation boundary only)
        tracker.phase = "step end"
    tracker.stop_recording()
    return start_alloc, rec_start


def _lives_list(lives: list[Any], names: dict[int, str], least: int, top: int) -> list[list]:
    return sorted(([lf.nbytes, lf.phase, lf.tag or "", names.get(lf.key, "")] for lf in lives
                   if lf.nbytes >= least), reverse=True)[:top]


def _report(engine: Any, tracker: Any, case: Case, rank: int, start_alloc: int, rec_start: int) -> dict[str, Any]:
    """The recorded step: peak, phase peaks, what is alive at them (named where the engine holds it)."""
    names = _named_storages(engine, tracker)
    alive = _alive_at(tracker, tracker.peak_event)
    by_name: dict[str, int] = {}
    for lf in alive:
        nm = names.get(lf.key) or f"<{lf.phase.split()[0]}>"
        by_name[nm] = by_name.get(nm, 0) + lf.nbytes
    return {
        "case": asdict(case), "rank": rank, "peak": tracker.peak, "peak_phase": tracker.peak_phase,
        "step_start": start_alloc, "step_end": tracker.allocated,
        "phase_peak": dict(tracker.phase_peak), "at_peak": by_name,
        "peak_lives": _lives_list(alive, names, 0, 40),
        "phase_lives": {ph: _lives_list(_alive_at(tracker, ev), names, 2**16, 25)
                        for ph, ev in tracker.phase_peak_event.items()},
        "static_lives": _lives_list(_alive_at(tracker, tracker.event), names, 2**20, 40),
        "big_lives": _big_lives(tracker, rec_start),
        "gloo_internal_peak": tracker.comm_peak,
        "optimizer": type(engine.optimizer).__name__,
        "basic_optimizer": type(getattr(engine.optimizer, "optimizer", engine.optimizer)).__name__,
    }


def worker(case: Case, rank: int, port: int, out_path: str) -> None:
    """One rank of the case: the tracker is entered before the model is built, so DeepSpeed's init-time
    buffers are counted; STEPS steps run; the last one is written to ``out_path`` as JSON."""
    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), WORLD_SIZE=str(case.world), LOCAL_RANK=str(rank),
                      LOCAL_SIZE=str(case.world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import logging

    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tracker = _tracker_class()()
    _exclude_collectives(tracker)  # (before DeepSpeed imports torch.distributed's functions)
    import deepspeed
    from deepspeed.utils import logger as ds_logger
    from transformers import LlamaConfig, LlamaForCausalLM

    if os.environ.get(NO_JIT_ENV) == "1":
        import importlib

        # (by module name: ``deepspeed.comm.torch`` as an attribute is the torch package)
        importlib.import_module("deepspeed.ops.adam.fused_adam").FusedAdamBuilder = _TorchFusedAdamBuilder
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None

    ds_logger.setLevel(logging.WARNING)
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = {k: v for k, v in MODELS[case.model].items() if k not in ("model_type", "architectures")}
    with tracker:
        model = LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation="sdpa"))
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=ds_config_of(case))
        del model
        start_alloc, rec_start = _run_steps(engine, tracker, case, rank)
        result = _report(engine, tracker, case, rank, start_alloc, rec_start)
    tracker.close()
    Path(out_path).write_text(json.dumps(result))
    try:
        torch.distributed.destroy_process_group()
    except Exception:  # noqa: BLE001 - best effort at exit
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure_cases(cases: list[Case], timeout_s: float = 900, no_jit: bool = False) -> list[dict[str, Any]]:
    """Run every rank of every case at once, one subprocess each (what a rank measures does not depend on
    what runs beside it); per case, rank 0's record with ``peak_ranks`` (each rank's peak). ``no_jit``: build
    none of DeepSpeed's C++ ops (:data:`NO_JIT_ENV`)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore",
           NO_JIT_ENV: "1" if no_jit else "0"}
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for i, case in enumerate(cases):
            port = _free_port()
            for r in range(case.world):
                out = str(Path(tmp) / f"case{i}-rank{r}.json")
                proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker",
                                         json.dumps(asdict(case)), str(r), str(port), out],
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                runs.append((i, case, proc, out))
        logs = [proc.communicate(timeout=timeout_s)[0] for _, _, proc, _ in runs]
        for (_, case, proc, _), log in zip(runs, logs):
            if proc.returncode:
                raise RuntimeError(f"{case.name}: a rank failed (rc {proc.returncode}):\n{log[-4000:]}")
        per_case: dict[int, list[dict[str, Any]]] = {}
        for i, _, _, out in runs:
            per_case.setdefault(i, []).append(json.loads(Path(out).read_text()))
    results = []
    for i in range(len(cases)):
        res = per_case[i]
        results.append({**res[0], "peak_ranks": [r["peak"] for r in res]})
    return results


def measure_case(case: Case, timeout_s: float = 900, no_jit: bool = False) -> dict[str, Any]:
    return measure_cases([case], timeout_s, no_jit)[0]


# -- the table --------------------------------------------------------------------------------------
def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def _phase_peaks(measured: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for ph, b in measured.items():
        k = _phase_kind(ph)
        out[k] = max(out.get(k, 0), b)
    return out


def compare(case: Case, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """One row: the measured peak (the most loaded rank), the estimate, the error, per-phase peaks."""
    m = measured or measure_case(case)
    e = estimate_case(case)
    mp = _phase_peaks(m["phase_peak"])
    mp["static"] = m["step_start"]
    e["phases"]["static"] = e["static"]
    return {"case": case.name, "measured": max(m["peak_ranks"]), "estimate": e["peak"],
            "gloo_internal": m["gloo_internal_peak"],
            "error": e["peak"] / max(m["peak_ranks"]) - 1, "measured_phases": mp, "estimate_phases": e["phases"],
            "optimizer": f"{m['optimizer']}({m['basic_optimizer']})", "at_peak": m["at_peak"],
            "peak_phase": m["peak_phase"], "estimate_peak_phase": e["peak_phase"]}


def table(rows: list[dict[str, Any]], markdown: bool) -> str:
    head = ["setup", "optimizer", "measured MiB", "estimate MiB", "error", "gloo-only MiB", "static meas/est",
            "fwd meas/est", "bwd meas/est", "step meas/est"]
    lines = []
    for r in rows:
        ph = []
        for k in ("static", "forward", "backward", "step"):
            a, b = r["measured_phases"].get(k, 0), r["estimate_phases"].get(k, 0)
            ph.append(f"{_mib(a)} / {_mib(b)}")
        lines.append([r["case"], r["optimizer"], _mib(r["measured"]), _mib(r["estimate"]),
                      f"{100 * r['error']:+.2f} %", _mib(r.get("gloo_internal", 0)), *ph])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(x) + " |" for x in lines]
        return "\n".join(out)
    w = [max(len(h), *(len(x[i]) for x in lines)) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.rjust(w[i]) for i, c in enumerate(x)) for x in [head, *lines])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", nargs=4, metavar=("CASE", "RANK", "PORT", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--quick", action="store_true", help="bf16, grad_accum 1 only")
    ap.add_argument("--knobs", action="store_true", help="also the non-default bucket / prefetch cases")
    ap.add_argument("--cases", help="comma-separated case names (see the table)")
    ap.add_argument("--json", help="also write the rows (with the breakdown at the measured peak) here")
    ap.add_argument("--breakdown", action="store_true", help="print what is alive at each measured peak")
    ap.add_argument("--no-jit", action="store_true",
                    help="build none of DeepSpeed's C++ ops: FusedAdam on torch's fused CPU kernel, no shm comm op")
    a = ap.parse_args(argv)
    if a.worker:
        c, r, p, o = a.worker
        worker(Case(**json.loads(c)), int(r), int(p), o)
        return 0
    cases = (quick_cases() if a.quick else default_cases()) + (knob_cases() if a.knobs else [])
    if a.cases:
        want = set(a.cases.split(","))
        cases = [c for c in default_cases() + knob_cases() if c.name in want]
    rows = []
    for c in cases:
        rows.append(compare(c, measure_case(c, no_jit=a.no_jit)))
        print(f"# {c.name}: measured {_mib(rows[-1]['measured'])} MiB, estimate {_mib(rows[-1]['estimate'])} MiB",
              file=sys.stderr, flush=True)
        if a.breakdown:
            for k, v in sorted(rows[-1]["at_peak"].items(), key=lambda kv: -kv[1]):
                print(f"#   {v / 2**20:10.2f} MiB  {k}", file=sys.stderr)
    print(table(rows, a.markdown))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
