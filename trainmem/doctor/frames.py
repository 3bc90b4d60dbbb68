"""Traceback frames → where the out-of-memory happened (model load, forward of which module, loss, backward,
optimizer step, dataloader), in the traceback formats users paste:

* CPython: ``File "path", line N, in func`` then the code line (3.11+ adds ``^^^^`` / ``~~^~~`` markers);
* IPython / Jupyter: ``File path:N, in func(args)`` (or the older ``path in func(args)``) then numbered code
  lines, the failing one marked ``-->`` / ``->``;
* rich (``rich.traceback``, Typer, Accelerate): ``│ path:N in func │`` then a boxed listing, the failing
  line marked ``❱``;
* every line possibly prefixed ``[rank3]:`` by ``torchrun``.

The phase is read innermost frame first: the first frame that belongs to a data loader (``torch/utils/data``),
an optimizer (``torch/optim``, DeepSpeed ZeRO ``step``), the autograd engine (``Tensor.backward``,
``torch.autograd``), a loss (``torch.nn.functional.cross_entropy``, ``transformers/loss``) or model loading
(``Module.to/cuda/_apply``, ``from_pretrained``, ``torch.load``) decides; a forward frame decides unless an
outer frame is the backward (activation recomputation). Evaluation functions (``evaluate``,
``validation_step``, ...) mark the stack as evaluation; ``torch.utils._contextlib.decorate_context`` (the
``@torch.no_grad()`` / ``@torch.inference_mode()`` decorator) and the evaluation loops known to run under
``no_grad`` (HF ``Trainer.prediction_step``, Lightning's evaluation loop) mark it as gradient-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Frame", "Where", "PHASES", "parse_frames", "where", "oom_frames", "frame_phase", "is_eval_func",
           "text_phase", "pinned_copy", "checkpoint_io"]

PHASES = ("model_load", "forward", "loss", "backward", "optimizer_step", "dataloader", "unknown")

_PREFIX = r"^\s*(?:\[(?:rank|default)\d*\]:)?\s*"
_PY = re.compile(_PREFIX + r'File "([^"]+)", line (\d+), in (\S+)')
_IPY = re.compile(_PREFIX + r"File ([^\s,][^,]*?):(\d+), in ([\w.<>]+)")
_IPY_OLD = re.compile(_PREFIX + r"(\S+\.py) in ([\w.<>]+)\(")
_RICH = re.compile(r"^\s*[│┃]\s+(\S+\.py):(\d+) in ([\w.<>]+)\s*[│┃]?\s*$")
_RICH_PATH_PART = re.compile(r"^\s*[│┃]\s+(\S*/\S*)\s*[│┃]\s*$")
"""A long path that rich wrapped: its first part alone on a box line, ``file.py:N in func`` on the next."""
_CODE_MARK = re.compile(r"^\s*(?:[│┃]\s*)?(?:❱|-+>)\s*(\d+)\s*[│┃]?\s*(.*?)\s*[│┃]?\s*$")
_TB_START = re.compile(r"Traceback \(most recent call last\)|Original Traceback")
_SELF_CALL = re.compile(r"self\.([A-Za-z_]\w*)\s*\(")
_EVAL = re.compile(r"(?i)^(?:.*\.)?(evaluate|evaluation_loop|prediction_step|validation_step|test_step|predict|"
                   r"predict_step|eval_step|val_step|validate|run_eval\w*|_?evaluate\w*|eval_loop|eval_epoch|"
                   r"validation|evaluation|eval)$")


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    func: str
    code: str = ""

    @property
    def path(self) -> str:
        return self.file.replace("\\", "/").lower()

    @property
    def short(self) -> str:
        return f"{self.file.replace(chr(92), '/').rsplit('/', 1)[-1]}:{self.line} {self.func}"


@dataclass(frozen=True, slots=True)
class Where:
    """Where an error was raised, read from its frames."""

    phase: str
    """One of :data:`PHASES`."""
    module: str = ""
    """Forward: the submodule path read from the ``self.x(...)`` calls (``model.layers.mlp.down_proj``)."""
    location: str = ""
    """``file.py:line func`` of the deciding frame."""
    in_eval: bool = False
    no_grad: bool = False
    """A gradient-free decorator or a known no-grad evaluation loop is on the stack."""
    rank: int | None = None
    frames: int = 0
    world_seen: int | None = None
    """The number of ranks the text shows: 1 + the largest ``[rankN]:`` prefix (None: no prefix)."""
    from_text: bool = False
    """The phase was read from a code line or a progress bar, no frame decided (:func:`text_phase`)."""
    pinned: str = ""
    """The code line of a copy into pinned host memory before the error (:func:`pinned_copy`), or ""."""
    wsl: bool = False
    """The text shows a WSL2 machine (its kernel name or its ``/usr/lib/wsl`` driver path)."""
    checkpoint: str = ""
    """``save`` or ``resume`` when the error was raised while saving or resuming a checkpoint
    (:func:`checkpoint_io`), else ""."""
    checkpoint_at: str = ""
    """The frame (``file.py:line func``) or the line that shows the checkpoint save or resume."""
    checkpoint_from_text: bool = False


def _code_after(lines: list[str], i: int) -> str:
    """The code line that follows a CPython frame header (skipping caret lines)."""
    for j in range(i + 1, min(i + 3, len(lines))):
        s = re.sub(_PREFIX, "", lines[j]).strip()
        if not s or s.startswith(("File ", "^", "~")) or set(s) <= set("^~ "):
            continue
        return s
    return ""


def _marked_code(lines: list[str], i: int) -> str:
    for j in range(i + 1, min(i + 14, len(lines))):
        if _IPY.match(lines[j]) or _RICH.match(lines[j]) or _PY.match(lines[j]):
            return ""
        m = _CODE_MARK.match(lines[j])
        if m:
            return m.group(2)
    return ""


def parse_frames(text: str) -> list[Frame]:
    """Every frame of ``text``, outermost first within each traceback, tracebacks in text order."""
    lines = text.splitlines()
    out: list[Frame] = []
    for i, ln in enumerate(lines):
        m = _PY.match(ln)
        if m:
            out.append(Frame(m.group(1), int(m.group(2)), m.group(3), _code_after(lines, i)))
            continue
        m = _IPY.match(ln) or _RICH.match(ln)
        if m:
            file = m.group(1).strip()
            head = _RICH_PATH_PART.match(lines[i - 1]) if i and _RICH.match(ln) else None
            if head and "/" not in file:
                file = head.group(1) + file
            out.append(Frame(file, int(m.group(2)), m.group(3), _marked_code(lines, i)))
            continue
        m = _IPY_OLD.match(ln)
        if m:
            out.append(Frame(m.group(1), 0, m.group(2), _marked_code(lines, i)))
    return out


def oom_frames(text: str, oom_at: int | None) -> list[Frame]:
    """The frames of the traceback that ends at the out-of-memory line (character offset ``oom_at``)."""
    if oom_at is None:
        return parse_frames(text)
    head = text[:oom_at]
    starts = [m.start() for m in _TB_START.finditer(head)]
    return parse_frames(head[starts[-1]:] if starts else head)


def _func(f: Frame) -> str:
    return f.func.rsplit(".", 1)[-1]


_LOAD_MODULE_FUNCS = {"_apply", "to", "cuda", "convert", "half", "bfloat16", "float", "type", "to_empty",
                      "load_state_dict", "_load_from_state_dict", "xpu"}
_CALL_FUNCS = {"_call_impl", "_wrapped_call_impl", "__call__"}
_LOSS_FUNCS = {"cross_entropy", "nll_loss", "log_softmax", "binary_cross_entropy", "kl_div", "mse_loss",
               "binary_cross_entropy_with_logits", "softmax_cross_entropy"}


def _framework_phase(p: str, fn: str) -> str | None:
    """Phases of torch's, DeepSpeed's, Accelerate's and transformers' own frames."""
    if "torch/utils/data/" in p:
        return "dataloader"
    if "torch/optim/" in p or "/bitsandbytes/optim/" in p or p.endswith("amp/grad_scaler.py") \
            or (p.endswith("accelerate/optimizer.py") and fn == "step"):
        return "optimizer_step"
    if (p.endswith("torch/_tensor.py") and fn == "backward") or ("torch/autograd/" in p and fn in (
            "backward", "grad", "_engine_run_backward", "run_backward")) or ("torch/utils/checkpoint.py" in p and fn in (
            "backward", "recompute_fn", "unpack_hook", "_checkpoint_hook")) or (fn == "backward" and (
            p.endswith("accelerate/accelerator.py") or "deepspeed/runtime/" in p)):
        return "backward"
    if "deepspeed/runtime/zero/" in p:
        return "optimizer_step" if "step" in fn else ("model_load" if fn.startswith(("__init__", "_create", "initialize"))
                                                      else "backward")
    if (p.endswith("torch/nn/functional.py") and fn in _LOSS_FUNCS) or "transformers/loss/" in p \
            or p.endswith("torch/nn/modules/loss.py") or "liger_kernel" in p:
        return "loss"
    if ("bitsandbytes/functional.py" in p and fn.startswith("quantize")) or ("bitsandbytes/nn/modules.py" in p and fn in (
            "_quantize", "cuda", "to", "from_prequantized")) or ("torch/nn/parallel/distributed.py" in p and fn == "__init__") \
            or ("torch/distributed/utils.py" in p and fn.startswith("_sync")):
        return "model_load"  # 4-bit quantization on the way to the GPU; DDP's broadcast of the module states
    if (p.endswith("torch/nn/modules/module.py") and fn in _LOAD_MODULE_FUNCS) or p.endswith("torch/serialization.py") \
            or (p.endswith("transformers/modeling_utils.py") and ("load" in fn or fn == "from_pretrained")) \
            or p.endswith("accelerate/utils/modeling.py") or "safetensors" in p \
            or (p.endswith("accelerate/accelerator.py") and fn.startswith(("prepare", "_prepare"))) \
            or p.endswith("deepspeed/__init__.py") or (p.endswith("deepspeed/runtime/engine.py") and fn.startswith(
                ("__init__", "_configure"))):
        return "model_load"
    if p.endswith("torch/nn/modules/module.py"):
        return "forward" if fn in _CALL_FUNCS else None  # Module.__call__; its other methods (lambdas) decide nothing
    if "torch/nn/modules/" in p or p.endswith("torch/nn/functional.py") or "transformers/generation/" in p:
        return "forward"
    return None


def is_eval_func(name: str) -> bool:
    """An evaluation function's name (``evaluate``, ``validation_step``, ``Trainer.prediction_step`` ...)."""
    return _EVAL.match(name.rsplit(".", 1)[-1]) is not None


def frame_phase(f: Frame) -> str | None:
    """The phase one frame belongs to, or None (user code that names no phase)."""
    return _phase_of(f)


def _phase_of(f: Frame) -> str | None:
    p, fn = f.path, _func(f)
    phase = _framework_phase(p, fn)
    if phase is not None:
        return phase
    if "loss" in fn.lower() and fn not in ("compute_loss", "training_step"):
        return "loss"
    if fn == "forward":
        return "forward"
    if fn in ("from_pretrained", "load_checkpoint", "load_model"):
        return "model_load"
    return None


def _no_grad_frame(f: Frame) -> bool:
    p, fn = f.path, _func(f)
    return (fn == "decorate_context" and (p.endswith("torch/utils/_contextlib.py") or p.endswith(
        "torch/autograd/grad_mode.py"))) or (p.endswith("transformers/trainer.py") and fn in (
            "prediction_step", "evaluation_loop", "prediction_loop")) or (
        ("lightning" in p) and ("loops/evaluation_loop.py" in p or "loops/prediction_loop.py" in p))


def _module_path(frames: list[Frame]) -> str:
    """Submodule names from the ``self.x(...)`` calls of the model's own frames, outermost first."""
    names = []
    for f in frames:
        p = f.path
        if "site-packages/torch/" in p or "/torch/nn/" in p or "accelerate/" in p:
            continue
        m = _SELF_CALL.search(f.code)
        if m and m.group(1) not in ("forward", "compute_loss", "model_forward", "_call_impl"):
            names.append(m.group(1))
    return ".".join(names[-6:])


def _rank(text: str) -> int | None:
    ranks = {int(r) for r in re.findall(r"\[rank(\d+)\]:", text)}
    return ranks.pop() if len(ranks) == 1 else None


def _world_seen(text: str) -> int | None:
    ranks = [int(r) for r in re.findall(r"\[rank(\d+)\]:", text)]
    return max(ranks) + 1 if ranks else None


_OOM_LINE = re.compile(r"out of memory|OutOfMemoryError|_ALLOC_FAILED", re.I)
_TEXT_MARKS = (
    ("optimizer_step", re.compile(r"\b(?:max_)?exp_avg(?:_sq)?s?\b.*\b(?:mul_|add_|addcmul_|lerp_|sqrt|zeros_like)|"
                                  r"\b_foreach_(?:mul|add|addcmul|addcdiv|lerp|sqrt|div)_?\(|"
                                  r"\b(?:optimizer|optim|opt|scaler)\.step\(")),
    ("backward", re.compile(r"\.backward\(")),
    ("model_load", re.compile(r"\bquantize_4bit\b|\bParams4bit\b|\bfrom_pretrained\(|\bload_state_dict\(|"
                              r"\btorch\.load\(")),
)
_SHARDS = re.compile(r"Loading checkpoint shards:\s*\d+%.*?\|\s*(\d+)/(\d+)")


_PINNED = re.compile(r"""\.(?:to|cpu)\((?:[^()]|\([^()]*\))*non_blocking\s*=\s*True""")
_PIN_CALL = re.compile(r"\.pin_memory\(\)|cudaHostAlloc|CachingHostAllocator")
_CPU_TARGET = re.compile(r"""["']cpu["']|\.cpu\(|device\(["']cpu""")
_WSL = re.compile(r"microsoft-standard-WSL2|/usr/lib/wsl/|\bWSL ?2\b", re.I)


def pinned_copy(text: str) -> str:
    """The code line, among the 60 before the error, that copies into pinned host memory: ``.to("cpu",
    non_blocking=True)`` (or ``.cpu(non_blocking=True)``), a ``.pin_memory()`` outside the DataLoader, or the
    host allocator's own name; "" when there is none. (A ``non_blocking`` copy *to* the GPU allocates on the GPU.)"""
    m = _OOM_LINE.search(text)
    head = (text[:m.start()] if m else text).splitlines()[-60:]
    for ln in reversed(head):
        code = re.sub(_PREFIX, "", ln).strip()
        if (_PINNED.search(code) and _CPU_TARGET.search(code)) or (_PIN_CALL.search(code)
                                                                   and "torch/utils/data" not in code):
            return code[:80]
    return ""


_SAVE_FUNCS = {"save_pretrained", "save_pretrained_merged", "save_model", "_save_checkpoint", "_save", "save_checkpoint",
               "_save_model", "save_state", "merge_and_unload", "get_peft_model_state_dict", "full_optim_state_dict",
               "unsloth_save_model", "_save_to_state_dict"}
_RESUME_FUNCS = {"_load_optimizer_and_scheduler", "_load_from_checkpoint", "_load_rng_state", "deepspeed_load_checkpoint",
                 "load_state", "_load_checkpoint"}
_SAVE_TEXT = re.compile(r"\.save_pretrained(?:_merged)?\(|\bsave_model\(|\btorch\.save\(|\bmerge_and_unload\(|"
                        r"保存模型|模型保存")
"""(``trainer.train(resume_from_checkpoint=...)`` is on every Trainer traceback and a "Saving model checkpoint" log
line can precede an OOM in a later step: neither is a cue.)"""
_RESUME_TEXT = re.compile(r"\boptimizer\.load_state_dict\(|_load_optimizer_and_scheduler|\bload_state\(|"
                          r"torch\.load\([^)]*map_location\s*=\s*(?![\"']cpu)")


def checkpoint_io(frames: list[Frame], text: str = "") -> tuple[str, str, bool]:
    """(``save`` | ``resume`` | "", where, read from text) — the error raised while a checkpoint was saved (HF
    ``save_pretrained`` / ``Trainer._save_checkpoint``, ``torch.save``, PEFT ``merge_and_unload``, Unsloth's merged
    save, FSDP's full optimizer state dict) or resumed (``Trainer._load_optimizer_and_scheduler``, DeepSpeed's and
    Accelerate's ``load_state``/``load_checkpoint``, a ``torch.load`` whose ``map_location`` is a GPU): frames first,
    innermost first; else the call among the 60 lines before the error (or a report saying so: 保存模型)."""
    for f in reversed(frames):
        fn = _func(f)
        if fn in _SAVE_FUNCS and ("torch/nn/modules/module.py" not in f.path or fn == "_save_to_state_dict"):
            return "save", f.short, False
        if (fn in _RESUME_FUNCS and (fn != "load_state" or "accelerate/" in f.path)) or (
                fn == "load_checkpoint" and "deepspeed/runtime/" in f.path):
            return "resume", f.short, False
    if not text:
        return "", "", False
    m = _OOM_LINE.search(text)
    head = (text[:m.start()] if m else text).splitlines()[-60:]
    for ln in reversed(head):
        code = re.sub(_PREFIX, "", ln).strip()
        for kind, rx in (("save", _SAVE_TEXT), ("resume", _RESUME_TEXT)):
            hit = rx.search(code)
            if hit:
                return kind, code[max(0, hit.start() - 20):hit.end() + 40].strip()[:80], True
    return "", "", False


def text_phase(text: str) -> tuple[str, str] | None:
    """(phase, the line that shows it) from the 60 lines before the out-of-memory line, when no frame decides:
    an Adam update's source line (``exp_avg_sq.mul_(beta2).addcmul_(...)``) or ``optimizer.step(`` → optimizer
    step; ``.backward(`` → backward; bitsandbytes' ``quantize_4bit`` / ``Params4bit``, ``from_pretrained(``,
    ``load_state_dict(``, ``torch.load(`` → model load, as is a "Loading checkpoint shards" progress bar that did
    not reach its last shard (one that did says loading had finished). The marker nearest the error decides."""
    m = _OOM_LINE.search(text)
    head = (text[:m.start()] if m else text).splitlines()[-60:]
    best: tuple[int, str, str] | None = None
    for i, ln in enumerate(head):
        for phase, rx in _TEXT_MARKS:
            if rx.search(ln):
                best = (i, phase, ln.strip())
        for sm in _SHARDS.finditer(ln):
            if int(sm.group(1)) < int(sm.group(2)):
                best = (i, "model_load", "Loading checkpoint shards " + f"{sm.group(1)}/{sm.group(2)}")
            elif best is not None and best[1] == "model_load" and best[2].startswith("Loading checkpoint shards"):
                best = None  # the last shard loaded: loading is over
    if best is None:
        return None
    return best[1], re.sub(_PREFIX, "", best[2]).strip()[:80]


def where(frames: list[Frame], text: str = "") -> Where:
    """The phase (and module, for a forward) of the innermost deciding frame of ``frames`` (outermost first)."""
    phase, at = "unknown", None
    for f in reversed(frames):
        ph = _phase_of(f)
        if ph is None:
            continue
        if ph == "forward":
            if phase == "unknown":
                phase, at = "forward", f
            continue
        if phase == "unknown":
            phase, at = ph, f
            break
        if ph == "backward":  # a forward run by the backward: activation recomputation
            phase = "backward"
            break
        # a forward inside a loss helper, an optimizer closure or a loader: the forward is where it ran
    in_eval = any(_EVAL.match(_func(f)) for f in frames)
    module = _module_path(frames) if phase in ("forward", "loss", "backward") else ""
    location, from_text = (at.short if at else ""), False
    if phase == "unknown" and text:
        hit = text_phase(text)
        if hit is not None:
            (phase, location), from_text = hit, True
    ckpt, ckpt_at, ckpt_text = checkpoint_io(frames, text)
    return Where(phase=phase, module=module, location=location, in_eval=in_eval,
                 no_grad=any(_no_grad_frame(f) for f in frames), rank=_rank(text), frames=len(frames),
                 world_seen=_world_seen(text), from_text=from_text, pinned=pinned_copy(text) if text else "",
                 wsl=bool(_WSL.search(text)) if text else False, checkpoint=ckpt, checkpoint_at=ckpt_at,
                 checkpoint_from_text=ckpt_text)
