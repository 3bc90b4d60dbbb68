"""CUDA autocast's op lists read from torch at run time (trainmem/trace/autocast_policy.py, issue 17 item 4)
against the hand copies of aten/src/ATen/autocast_mode.h (torch 2.13) in trainmem/trace/autocast.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainmem.trace import autocast as A  # noqa: E402
from trainmem.trace.autocast_policy import probe_cuda_autocast  # noqa: E402

HAND = {name: policy for policy, names in (("lower_precision_fp", A.LOWER), ("fp32", A.FP32),
                                            ("fp32_set_opt_dtype", A.FP32_SET_OPT_DTYPE), ("promote", A.PROMOTE))
        for name in names}
#: Registered by torch 2.13's autocast_mode.cpp but not in the hand lists.
TORCH_ONLY = {"_upsample_bicubic2d_aa": "fp32", "_upsample_bilinear2d_aa": "fp32", "_upsample_nearest_exact1d": "fp32",
              "_upsample_nearest_exact2d": "fp32", "_upsample_nearest_exact3d": "fp32",
              "cudnn_convolution": "lower_precision_fp", "cudnn_convolution_transpose": "lower_precision_fp"}
#: Python-level names (no aten autocast op) and kernels generic arguments cannot run: the hand lists only.
HAND_ONLY = {"cross_entropy", "square", "vector_norm", "matrix_norm", "multi_dot", "vecdot",
             "einsum", "gru_cell", "lstm_cell", "prelu", "cosine_embedding_loss"}


@pytest.fixture(scope="module")
def read() -> dict[str, str]:
    return probe_cuda_autocast()


def test_known_policies_of_autocast_mode_h(read: dict[str, str]) -> None:
    """A few ops of each list of autocast_mode.h (torch 2.13), read from the kernels themselves."""
    want = {"mm": "lower_precision_fp", "linear": "lower_precision_fp", "bmm": "lower_precision_fp",
            "scaled_dot_product_attention": "lower_precision_fp", "exp": "fp32", "layer_norm": "fp32",
            "rms_norm": "fp32", "nll_loss": "fp32", "pow": "fp32", "softmax": "fp32_set_opt_dtype",
            "log_softmax": "fp32_set_opt_dtype", "sum": "fp32_set_opt_dtype", "cumsum": "fp32_set_opt_dtype",
            "addcmul": "promote", "index_put": "promote", "dot": "promote", "norm": "fp32_set_opt_dtype"}
    assert {k: read.get(k) for k in want} == want
    assert "add" not in read and "relu" not in read  # no CUDA autocast kernel: run in the input's dtype


def test_the_reading_equals_the_hand_lists_but_where_stated(read: dict[str, str]) -> None:
    differ = {n: (read.get(n), HAND.get(n)) for n in set(read) | set(HAND) if read.get(n) != HAND.get(n)}
    expected = {**{n: (p, None) for n, p in TORCH_ONLY.items()}, **{n: (None, HAND[n]) for n in HAND_ONLY},
                "norm": ("fp32_set_opt_dtype", "fp32")}  # fp32_append_dtype: fp32 compute, no fp32 input copy
    assert differ == expected


def test_the_emulation_applies_torchs_reading() -> None:
    policy = A.CudaAutocastMode().policy
    assert policy["norm"] == "fp32_set_opt_dtype" and policy["cudnn_convolution"] == "lower_precision_fp"
    assert policy["cross_entropy"] == "fp32" and policy["einsum"] == "lower_precision_fp"  # hand-kept names
    x = torch.randn(4, 4, dtype=torch.bfloat16)
    with A.cuda_autocast(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert x.norm().dtype == torch.float32 and torch.mm(x.float(), x.float()).dtype == torch.bfloat16
