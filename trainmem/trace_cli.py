"""Registers ``trainmem trace`` on the CLI; the tracer itself (torch) is imported only when it runs."""

from __future__ import annotations

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:  # filled in by the trace issue
    return None
