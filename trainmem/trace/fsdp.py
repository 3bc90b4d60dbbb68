"""FSDP2 (``torch.distributed.fsdp.fully_shard``) as rank 0 of a fake world.

The world is a fake process group (``torch.testing._internal.distributed.fake_pg``): collectives
return at once and write nothing, but FSDP2 allocates its all-gather and reduce-scatter buffers
and its unsharded parameters exactly as on CUDA. Everything that reaches into FSDP2's private
modules is here, pinned to torch 2.13 (``fully_shard`` internals: ``_fsdp_param_group``'s
``foreach_all_gather``/``foreach_reduce``, ``FSDPParam.all_gather_outputs``/``_unsharded_param``/
``_sharded_param_data``); an upstream change fails here, loudly, with one message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainmem.errors import UnsupportedError

if TYPE_CHECKING:
    from trainmem.setup import TrainingSetup
    from trainmem.trace.tracker import StorageTracker

__all__ = ["fake_world", "shard_model", "tag_collectives", "fsdp_param_tensors", "decoder_layers"]

_PINNED = "2.13"


def _internals_error(what: str) -> UnsupportedError:
    return UnsupportedError(f"FSDP2 internals changed ({what}; pinned to torch {_PINNED}, found {torch.__version__});"
                            " use `trainmem estimate`")


@contextlib.contextmanager
def fake_world(world_size: int, tp: int = 1, cp: int = 1) -> Iterator[Any]:
    """Init a fake process group (rank 0 of ``world_size``) and a CPU device mesh; torn down on exit.
    With ``tp`` > 1 the mesh is 2-D, ``(dp_shard, tp)`` (torchtitan's axis names; trace/tp.py); with
    ``cp`` > 1, ``(dp_shard, cp)`` with ``dp_shard × cp`` flattened as ``dp_shard_cp`` (trace/cp.py).

    The mesh is built outside ``FakeTensorMode`` (it reads real rank tensors).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise UnsupportedError("a torch.distributed process group is already initialised; trace in a fresh process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        if tp > 1:
            yield init_device_mesh("cpu", (world_size // tp, tp), mesh_dim_names=("dp_shard", "tp"))
        elif cp > 1:
            mesh = init_device_mesh("cpu", (world_size // cp, cp), mesh_dim_names=("dp_shard", "cp"))
            mesh._flatten("dp_shard_cp")  # (built here, outside FakeTensorMode; cached on the mesh)
            yield mesh
        else:
            yield init_device_mesh("cpu", (world_size,))
    finally:
        dist.destroy_process_group()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated decoder/encoder blocks (transformers' ``GradientCheckpointingLayer``s)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    lists = [m for m in model.modules()
             if isinstance(m, nn.ModuleList) and len(m) and all(isinstance(c, GradientCheckpointingLayer) for c in m)]
    if lists and getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return [c for m in lists for c in m]  # (T5, BART: the encoder's and the decoder's layers, each a unit)
    if lists:
        return list(lists[0])
    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def shard_model(model: nn.Module, mesh: Any, setup: "TrainingSetup") -> None:
    """``fully_shard`` each decoder layer, then the root (torchtitan's wrapping)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": setup.zero == 3}
    if setup.precision == "amp-bf16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    elif setup.precision == "amp-fp16":
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    fully_shard(model, **kw)


def _stream_switch(tracker: "StorageTracker") -> Any:
    """A stand-in for ``torch.cpu.stream`` (FSDP2's ``device_handle.stream`` on the fake CPU world) that
    also sets ``tracker.stream`` inside the block: 0 for the default stream, 1, 2, … for the other
    streams in order of first use.

    Which buffers land where (torch 2.13, ``_fully_shard/_fsdp_collectives.py``): ``foreach_all_gather``
    casts the shards and allocates the flat all-gather output inside ``with
    device_handle.stream(all_gather_copy_in_stream)`` (in forward and pre-backward prefetch;
    ``FSDPCommContext.get_all_gather_streams`` hands the current stream otherwise); the copy-out into
    the unsharded parameters runs on the default stream; ``foreach_reduce`` allocates the
    reduce-scatter *input* on the current stream and the reduce-scatter output (which becomes the
    sharded gradients, cast to the parameter dtype on the same stream) inside ``with
    device_handle.stream(reduce_scatter_stream)``; HSDP's all-reduce stream allocates nothing new.
    """
    orig = torch.cpu.stream
    known: list[Any] = [torch.cpu.current_stream()]

    @contextlib.contextmanager
    def stream(s: Any) -> Iterator[None]:
        idx = tracker.stream if s is None else next((i for i, k in enumerate(known) if k is s), None)
        if idx is None:  # (None: ``StreamContext`` keeps the current stream)
            known.append(s)
            idx = len(known) - 1
        prev, tracker.stream = tracker.stream, idx
        try:
            with orig(s):
                yield
        finally:
            tracker.stream = prev

    return orig, stream


@contextlib.contextmanager
def tag_collectives(tracker: "StorageTracker") -> Iterator[None]:
    """Tag storages born inside FSDP2's all-gather and reduce-scatter as ``comm``, and each storage
    with the stream FSDP2 allocates it on (:func:`_stream_switch`)."""
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg
        originals = {name: getattr(pg, name) for name in ("foreach_all_gather", "foreach_reduce")}
    except (ImportError, AttributeError) as e:
        raise _internals_error(str(e)) from None
    orig_stream, stream = _stream_switch(tracker)

    def wrap(fn: Any) -> Any:
        def inner(*args: Any, **kwargs: Any) -> Any:
            prev, tracker.tag = tracker.tag, "comm"
            try:
                return fn(*args, **kwargs)
            finally:
                tracker.tag = prev
        return inner

    for name, fn in originals.items():
        setattr(pg, name, wrap(fn))
    torch.cpu.stream = stream
    try:
        yield
    finally:
        torch.cpu.stream = orig_stream
        for name, fn in originals.items():
            setattr(pg, name, fn)


def fsdp_param_tensors(model: nn.Module) -> list[torch.Tensor]:
    """Every tensor holding parameter data for FSDP2: local shards and unsharded parameters."""
    from torch.distributed.fsdp import FSDPModule

    out: list[torch.Tensor] = []
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        try:
            group = m._get_fsdp_state()._fsdp_param_group
            if group is None:
                continue
            for fp in group.fsdp_params:
                out.append(fp._sharded_param_data)
                out.extend(fp.all_gather_outputs)
                if hasattr(fp, "_unsharded_param"):
                    out.append(fp._unsharded_param)
        except AttributeError as e:
            raise _internals_error(str(e)) from None
    return out
