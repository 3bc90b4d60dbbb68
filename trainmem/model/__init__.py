"""Model descriptions: ``ModelSpec`` with exact parameter counts, from HF configs, the bundled
catalog, a path or a bare size. Pure Python: importing this package never imports torch."""

from trainmem.model.catalog import list_models
from trainmem.model.hf import spec_from_hf_config
from trainmem.model.resolve import resolve_model
from trainmem.model.spec import LayerParams, ModelSpec, ParamCounts

__all__ = ["ModelSpec", "ParamCounts", "LayerParams", "resolve_model", "spec_from_hf_config", "list_models"]
