"""trainmem inside a user's training run: checks before the first step, records after it.

- :mod:`trainmem.integrations.preflight`: the check itself (no transformers): estimate the run from the live
  model and its setup, say whether it fits and which fixes would make it fit, write one JSON line.
- :mod:`trainmem.integrations.hf`: :class:`~trainmem.integrations.hf.PreflightCallback`, the check as an HF
  ``TrainerCallback`` (also ``trainmem.PreflightCallback``), with the setup read from ``TrainingArguments``.

Nothing here is imported by ``import trainmem``.
"""
