"""``trainmem doctor``: diagnose OOMs, leaks and slow runs from what the user has (an OOM message or traceback,
a per-step memory log, a ``torch.cuda.memory._snapshot()`` pickle, ``nvidia-smi`` output, a launch config),
against the estimate of the run, and prescribe fixes with the memory each saves for this run.

The live monitor that records the per-step log is :mod:`trainmem.doctor.monitor` (also ``trainmem.monitor``);
it imports torch when used, the rest of this package never does.
"""

from __future__ import annotations

from trainmem.doctor.case import CAUSES, Evidence, Expected, Finding, Fix
from trainmem.doctor.rules import RULES, diagnose
from trainmem.doctor.run import DoctorInputs, DoctorResult, run_doctor

__all__ = ["CAUSES", "Evidence", "Expected", "Finding", "Fix", "RULES", "diagnose", "DoctorInputs",
           "DoctorResult", "run_doctor"]
