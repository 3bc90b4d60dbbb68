"""Traceback frames → phase, on hand-written stacks of each phase and format."""

from __future__ import annotations

import pytest

from trainmem.doctor.frames import parse_frames, where

SITE = "/usr/lib/python3.11/site-packages"


def _tb(*frames: tuple[str, int, str, str]) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines += [f'  File "{path}", line {line}, in {func}', f"    {code}"]
    return "\n".join(lines) + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"


TRAIN = ("/work/train.py", 50, "train", "loss = compute_loss(model, batch)")
CALL = (f"{SITE}/torch/nn/modules/module.py", 1762, "_call_impl", "return forward_call(*args, **kwargs)")
CASES = {
    "forward": [TRAIN, CALL, (f"{SITE}/transformers/models/llama/modeling_llama.py", 302, "forward",
                              "hidden_states = self.mlp(hidden_states)"), CALL,
                (f"{SITE}/transformers/models/llama/modeling_llama.py", 160, "forward",
                 "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))"),
                CALL, (f"{SITE}/torch/nn/modules/linear.py", 125, "forward", "return F.linear(input, self.weight)")],
    "loss": [TRAIN, CALL, (f"{SITE}/transformers/models/llama/modeling_llama.py", 480, "forward",
                           "loss = self.loss_function(logits=logits, labels=labels)"),
             (f"{SITE}/transformers/loss/loss_utils.py", 67, "ForCausalLMLoss", "loss = fixed_cross_entropy(...)"),
             (f"{SITE}/torch/nn/functional.py", 3462, "cross_entropy", "return torch._C._nn.cross_entropy_loss(...)")],
    "backward": [TRAIN, (f"{SITE}/torch/_tensor.py", 630, "backward", "torch.autograd.backward("),
                 (f"{SITE}/torch/autograd/__init__.py", 364, "backward", "_engine_run_backward("),
                 (f"{SITE}/torch/autograd/graph.py", 829, "_engine_run_backward", "return Variable._execution_engine")],
    "optimizer_step": [TRAIN, (f"{SITE}/torch/optim/optimizer.py", 485, "wrapper", "out = func(*args, **kwargs)"),
                       (f"{SITE}/torch/optim/adamw.py", 606, "_multi_tensor_adamw", "torch._foreach_sqrt(...)")],
    "model_load": [("/work/train.py", 12, "main", "model = AutoModelForCausalLM.from_pretrained(name).cuda()"),
                   (f"{SITE}/torch/nn/modules/module.py", 1065, "cuda", "return self._apply(lambda t: t.cuda(device))"),
                   (f"{SITE}/torch/nn/modules/module.py", 942, "_apply", "param_applied = fn(param)"),
                   (f"{SITE}/torch/nn/modules/module.py", 1065, "<lambda>", "return self._apply(lambda t: t.cuda(device))")],
    "dataloader": [TRAIN, (f"{SITE}/torch/utils/data/dataloader.py", 733, "__next__", "data = self._next_data()"),
                   (f"{SITE}/torch/utils/data/_utils/collate.py", 212, "default_collate", "return torch.stack(batch)")],
}


@pytest.mark.parametrize("phase", sorted(CASES))
def test_phase(phase: str) -> None:
    text = _tb(*CASES[phase])
    w = where(parse_frames(text), text)
    assert w.phase == phase
    if phase == "forward":
        assert w.module == "mlp.down_proj" and w.location == "linear.py:125 forward"


def test_recomputation_in_backward_is_backward() -> None:
    """A forward re-run by activation checkpointing inside the backward is the backward's memory."""
    frames = [*CASES["backward"], (f"{SITE}/torch/utils/checkpoint.py", 1126, "unpack_hook", "frame.recompute_fn(*args)"),
              *CASES["forward"][1:]]
    assert where(parse_frames(_tb(*frames))).phase == "backward"


def test_evaluation_and_no_grad_markers() -> None:
    ev = [("/work/train.py", 90, "evaluate", "out = model(x)"), *CASES["forward"][1:]]
    w = where(parse_frames(_tb(*ev)))
    assert w.in_eval and not w.no_grad and w.phase == "forward"
    ng = [("/work/train.py", 90, "evaluate", "out = model(x)"),
          (f"{SITE}/torch/utils/_contextlib.py", 120, "decorate_context", "return func(*args, **kwargs)"),
          *CASES["forward"][1:]]
    assert where(parse_frames(_tb(*ng))).no_grad


def test_ipython_and_rank_prefixed_frames() -> None:
    text = ("File /opt/conda/lib/python3.10/site-packages/torch/optim/adamw.py:606, in _multi_tensor_adamw(params)\n"
            "    604 x = 1\n--> 606 exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)\n")
    f = parse_frames(text)
    assert f[0].func == "_multi_tensor_adamw" and f[0].line == 606 and "foreach_sqrt" in f[0].code
    text = "[rank3]:   File \"/x/torch/_tensor.py\", line 630, in backward\n[rank3]:     torch.autograd.backward(\n"
    w = where(parse_frames(text), text)
    assert w.phase == "backward" and w.rank == 3


@pytest.mark.parametrize("text,phase", [
    ("    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)\ntorch.OutOfMemoryError: CUDA out of memory.",
     "optimizer_step"),
    ("Loading checkpoint shards:  50%|#####     | 2/4 [00:12<00:12]\ntorch.OutOfMemoryError: CUDA out of memory.",
     "model_load"),
    ("Loading checkpoint shards: 100%|##########| 4/4 [00:24<00:00]\ntorch.OutOfMemoryError: CUDA out of memory.",
     "unknown"),
    ("    w_4bit, quant_state = bnb.functional.quantize_4bit(\nRuntimeError: CUDA out of memory.", "model_load"),
    ("    out = F.dequantize_4bit(B, state)\nRuntimeError: CUDA out of memory.", "unknown"),
])
def test_phase_from_text_without_frames(text: str, phase: str) -> None:
    w = where(parse_frames(text), text)
    assert w.phase == phase and w.from_text == (phase != "unknown")


def test_pinned_copy_is_a_copy_to_the_cpu_only() -> None:
    from trainmem.doctor.frames import pinned_copy
    assert pinned_copy('    x = h.to("cpu", non_blocking=True)\nRuntimeError: CUDA error: out of memory')
    assert not pinned_copy('    x = h.to("cuda", non_blocking=True)\nRuntimeError: CUDA error: out of memory')
