"""Typer's parameter coercion, deferred to the parameters a command line gives (start-up time).

typer 0.29 coerces every parameter's value — the unset ones too — through a pydantic ``TypeAdapter`` it builds
for that parameter on first use (``typer/core.py`` ``_TyperParameter.process_value`` → ``get_runtime_param`` →
``typer/_coercion.py`` ``build_runtime_param``): about 50 adapters for ``trainmem estimate``, ~0.2 s of a start.
An unset option's value is its default (None, or a plain int/float/str/bool) and needs no coercion: here each
parameter keeps that value as it is and builds typer's own adapter only for a value the command line gave, so
every given value is coerced, and refused, exactly as typer does. Where typer's internals differ (another
release), nothing is changed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["defer_coercion"]

_PLAIN = (bool, int, float, str)


class _Deferred:
    """Stands in for typer's ``RuntimeParam`` of one parameter until a given value needs it."""

    __slots__ = ("_param", "_real")

    def __init__(self, param: Any) -> None:
        self._param = param
        self._real = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None or (value is param.default and type(value) in _PLAIN):
            return value
        if type(value) is str and _is_text(param):  # a given text for a text parameter: pydantic's str is itself
            return value
        if self._real is None:
            from typer._coercion import build_runtime_param
            self._real = build_runtime_param(param.type_descriptor)
        return self._real.coerce(value, param=param, ctx=ctx)


def _is_text(param: Any) -> bool:
    """A ``str`` or ``Optional[str]`` parameter with no choices, no path or file routing (typer's descriptor)."""
    import typing

    desc = param.type_descriptor
    ann = desc.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    plain = ann is str or (typing.get_origin(ann) is typing.Union and args == [str])
    return plain and not (desc.is_choice or desc.is_path or desc.is_file or desc.file_annotation is not None)


def defer_coercion(command: Any) -> Any:
    """``command`` (a click command or group built by typer) with each plain single-value parameter's coercion
    deferred (see the module docstring); returns it."""
    for cmd in [command, *getattr(command, "commands", {}).values()]:
        for p in getattr(cmd, "params", ()):
            _defer(p)
        made = getattr(cmd, "get_help_option", None)
        if made is not None:  # --help is made per context, outside ``params``
            cmd.get_help_option = lambda ctx, _made=made: _defer(_made(ctx))
    return command


def _defer(p: Any) -> Any:
    if ("_runtime_param" in getattr(p, "__dict__", {}) and p._runtime_param is None
            and hasattr(p, "type_descriptor") and not p.multiple and p.nargs == 1):
        p._runtime_param = _Deferred(p)
    return p
