"""Keep transformers on its eager (CUDA-run) branches while the tensors are fake.

transformers treats a ``FakeTensor`` as "tracing" (``utils/import_utils.py: is_tracing``) and then
takes the branches meant for ``torch.compile``/export, which can differ in memory from an eager
CUDA run. The one that matters for training language models: ``masking_utils.
find_packed_sequence_indices`` cannot read the position ids, returns a packed-sequence mask, and
the model then builds an explicit ``[b, 1, s, s]`` boolean mask for SDPA instead of using
``is_causal=True`` — which would also push CUDA from the flash kernel to the memory-efficient one.
Our batches are never packed (position ids are ``arange``), so the eager answer is known: ``None``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["eager_branches"]


@contextlib.contextmanager
def eager_branches() -> Iterator[None]:
    """Patch ``transformers.masking_utils.find_packed_sequence_indices`` → ``None``; restored on exit."""
    from transformers import masking_utils

    orig = getattr(masking_utils, "find_packed_sequence_indices", None)
    if orig is None:  # pragma: no cover - other transformers versions
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = orig
