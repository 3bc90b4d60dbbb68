"""Issue 19: a run stated at a short --seq-len (below the 512 the halving fix needs) whose OOM holds far more than the
estimate at that length runs longer sequences than stated (a cutoff not applied, data cached at an earlier length:
ssbuild/chatglm3_finetuning#31): the fix is truncating to the stated length, freeing what the run held over the
estimate."""

from __future__ import annotations

from trainmem.api import build
from trainmem.doctor.case import Evidence, Expected
from trainmem.doctor.fixes import shorter_seq_fix
from trainmem.doctor.oom import parse_oom
from trainmem.doctor.rules import diagnose
from trainmem.memory import estimate
from trainmem.units import GiB

OOM = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 386.00 MiB. GPU 0 has a total capacty of "
       "22.02 GiB of which 165.19 MiB is free. Including non-PyTorch memory, this process has 21.86 GiB memory in use. "
       "Of the allocated memory 21.13 GiB is allocated by PyTorch, and 458.98 MiB is reserved by PyTorch but "
       "unallocated.")


def _exp(**flags: object) -> Expected:
    spec, setup = build("6B", lora_rank=8, qlora=True, gpu="A10-24G", **flags)
    return Expected(spec=spec, setup=setup, estimate=estimate(spec, setup))


def test_truncate_to_a_short_stated_length_when_the_run_holds_more() -> None:
    exp = _exp(seq_len=24)
    assert shorter_seq_fix(exp) is None and shorter_seq_fix(exp, True, 0) is None  # no evidence: nothing to offer
    fix = shorter_seq_fix(exp, True, 5 * GiB)
    assert fix is not None and "--seq-len 24" in fix.action and fix.saves_bytes == 5 * GiB and fix.fits


def test_the_doctor_offers_it_from_the_oom() -> None:
    exp = _exp(seq_len=24)
    oom = parse_oom(OOM)
    found = diagnose(Evidence(oom=oom), exp)
    assert found[0].cause == "activation_overflow"
    fix = next(x for x in found[0].fixes if x.action.startswith("shorter or truncated"))
    # what the OOM held over the estimate's peak at the stated length
    assert fix.saves_bytes == oom.allocated_bytes - exp.estimate.peak_allocated_bytes > 15 * GiB
