"""GPU catalog (data file ``gpus.json``, each row with its source)."""

from trainmem.hardware.catalog import GPU, get_gpu, list_gpus

__all__ = ["GPU", "get_gpu", "list_gpus"]
