"""The OOM message parser on the corpus of pasted messages (tests/doctor/corpus/oom/index.json) and on messages
built from CUDACachingAllocator.cpp's format pieces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.doctor.conftest import CORPUS, cases
from trainmem.doctor.oom import parse_oom, parse_size_bytes_c10
from trainmem.doctor.run import read_error
from trainmem.errors import ConfigError
from trainmem.units import GiB, KiB, MiB

OOM_CASES = [c for c in cases("oom") if c["form"] is not None]


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    n, unit = text.split()
    return parse_size_bytes_c10(n, unit)


@pytest.mark.parametrize("case", OOM_CASES, ids=lambda c: c["file"])
def test_corpus_message_parses(case: dict) -> None:
    oom, where = read_error((CORPUS / "oom" / case["file"]).read_text(), case["file"])
    assert oom.form == case["form"]
    assert oom.era == case["era"]
    assert oom.tried_bytes == _size(case["tried"])
    assert oom.total_bytes == _size(case["total"])
    assert where.phase == case["phase"]


def test_hand_read_numbers() -> None:
    """pytorch/pytorch#99699's message, read by hand: 138 MiB asked, 15.90 GiB total, 8.44 MiB free, another process
    577 MiB, this one 15.32 GiB, 14.12 GiB allocated, 410.41 MiB reserved but unallocated."""
    o = parse_oom((CORPUS / "oom" / "unallocated_21_pr99699.txt").read_text())
    assert (o.tried_bytes, o.total_bytes) == (138 * MiB, round(15.90 * GiB))
    assert o.free_bytes == round(8.44 * MiB) and o.unallocated_bytes == round(410.41 * MiB)
    assert o.other_processes == ((1246069, 577 * MiB),) and o.process_bytes == round(15.32 * GiB)
    assert o.reserved_bytes == round(14.12 * GiB) + round(410.41 * MiB)


def test_old_form_reserved_is_total_and_cached_is_free() -> None:
    """≤ 2.0: 'reserved in total' is the whole reserve (unallocated = it − allocated); ≤ 1.4's 'cached' is the
    free cache itself (pytorch/pytorch#13751's glossary; #31252's lines keep allocated + cached constant)."""
    o = parse_oom((CORPUS / "oom" / "reserved_runtimeerror.txt").read_text())
    assert o.unallocated_bytes == round(11.21 * GiB) - round(10.79 * GiB)
    o = parse_oom((CORPUS / "oom" / "cached_warnings.txt").read_text())
    assert o.unallocated_bytes == round(5.54 * GiB)


def test_allowed_and_private_pools() -> None:
    o = parse_oom("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 1; 15.78 GiB "
                  "total capacity; 12.10 GiB already allocated; 373.44 MiB free; 8.00 GiB allowed; 14.10 GiB reserved "
                  "in total by PyTorch)")
    assert o.allowed_bytes == 8 * GiB and o.device == 1
    o = parse_oom((CORPUS / "oom" / "private_pools_24.txt").read_text())
    assert o.private_pool_bytes == 46 * MiB and o.era == "torch ≥ 2.4"


def test_not_an_oom_is_refused_with_its_error() -> None:
    with pytest.raises(ConfigError, match="mat1 and mat2 shapes cannot be multiplied.*not a memory problem"):
        read_error((CORPUS / "oom" / "not_oom_shape.txt").read_text(), "x")


def _c10(n: int) -> str:
    """c10's format_size (CUDACachingAllocator.cpp): bytes up to 1 KiB, then KiB/MiB/GiB with 2 decimals."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= MiB:
        return f"{n / KiB:.2f} KiB"
    if n <= GiB:
        return f"{n / MiB:.2f} MiB"
    return f"{n / GiB:.2f} GiB"


def _unit(n: int) -> float:
    return 1 if n <= 1024 else KiB if n <= MiB else MiB if n <= GiB else GiB


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**45), st.integers(1, 2**40), st.integers(0, 2**40), st.integers(0, 2**36),
       st.booleans(), st.lists(st.tuples(st.integers(1, 2**22), st.integers(0, 2**40)), max_size=3))
def test_unallocated_form_round_trips(tried: int, total: int, alloc: int, unalloc: int, me: bool,
                                      procs: list[tuple[int, int]]) -> None:
    """The 2.1+ message assembled as TORCH_CHECK_WITH does (proc_info, then allowed_info) parses back to its
    numbers within format_size's rounding."""
    info = "".join(f"Process {p} has {_c10(b)} memory in use. " for p, b in procs)
    info += f"Including non-PyTorch memory, this process has {_c10(total)} memory in use. " if me else ""
    msg = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_c10(tried)}. GPU 0 has a total capacity "
           f"of {_c10(total)} of which {_c10(total // 3)} is free. {info}Of the allocated memory {_c10(alloc)} is "
           f"allocated by PyTorch, and {_c10(unalloc)} is reserved by PyTorch but unallocated. If reserved but "
           "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    o = parse_oom(msg)
    for got, want in ((o.tried_bytes, tried), (o.total_bytes, total), (o.allocated_bytes, alloc),
                      (o.unallocated_bytes, unalloc)):
        assert abs(got - want) <= 0.005 * _unit(want) + 1
    assert [p for p, _ in o.other_processes] == [p for p, _ in procs]
    assert (o.process_bytes is not None) == me


def test_no_device_index_keeps_the_totals() -> None:
    """Some 2.x builds print "GPU  has a total capacity" with no index (a public DDP traceback, verbatim)."""
    o = parse_oom((CORPUS / "oom" / "gpu_no_index_ddp_sync.txt").read_text())
    assert o.form == "unallocated" and o.device is None
    assert (o.total_bytes, o.free_bytes) == (round(4.93 * GiB), round(137.69 * MiB))
    assert (o.allocated_bytes, o.unallocated_bytes) == (round(4.14 * GiB), round(35.88 * MiB))


@pytest.mark.parametrize("name,total,unalloc", [("cached_wrapped_80col.txt", 10.76, 5.54),
                                                ("reserved_wrapped_80col.txt", 31.75, 30.12 - 29.18)])
def test_old_form_wrapped_inside_words_keeps_its_totals(name: str, total: float, unalloc: float) -> None:
    o = parse_oom((CORPUS / "oom" / name).read_text())
    assert o.form in ("cached", "reserved") and o.total_bytes == round(total * GiB)
    assert abs(o.unallocated_bytes - unalloc * GiB) <= 0.01 * GiB


NCCL_CUCHECK_OOM = """torch.distributed.DistBackendError: NCCL error in: \
../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), \
NCCL version 2.21.5
ncclUnhandledCudaError: Call to CUDA function failed.
Last error:
Cuda failure 2 'out of memory'"""


@pytest.mark.parametrize("text", [
    NCCL_CUCHECK_OOM,  # CUCHECK (cudawrap.h): the CUresult code, CUDA_ERROR_OUT_OF_MEMORY = 2
    "NCCL WARN Cuda failure 2 'out of memory'",
    "misc/utils.cc:49 NCCL WARN Cuda failure 'out of memory'",  # CUDACHECK (checks.h): no code
])
def test_nccl_cuda_failure_out_of_memory_is_a_driver_level_oom(text: str) -> None:
    o = parse_oom(text)
    assert o is not None and o.form == "driver" and o.tried_bytes is None and o.total_bytes is None


def test_nccl_cuda_failure_that_is_not_memory_is_no_oom() -> None:
    """Near miss: the same NCCL line for another CUDA error (1 = CUDA_ERROR_INVALID_VALUE) holds no OOM."""
    assert parse_oom(NCCL_CUCHECK_OOM.replace("2 'out of memory'", "1 'invalid argument'")) is None
    assert parse_oom("NCCL WARN Cuda failure 'an illegal memory access was encountered'") is None
