"""``trainmem.monitor``: the live per-step memory monitor (see :mod:`trainmem.doctor.monitor`)."""

from __future__ import annotations

from trainmem.doctor.monitor import LiveStorageTracker, MemoryMonitor, hf_callback, lightning_callback, monitor

__all__ = ["MemoryMonitor", "LiveStorageTracker", "hf_callback", "lightning_callback", "monitor"]
