"""trainmem: per-GPU memory of one training step — estimate, trace, plan, diagnose."""

__version__ = "0.1.0"
