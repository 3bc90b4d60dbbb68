"""``trainmem`` command line: a thin shell over the library.

It catches only :class:`trainmem.errors.TrainmemError` (and click's usage errors), prints one line on
stderr and exits with code 2; nothing is written to stdout on error.
"""

from __future__ import annotations

import json
import os
import sys

# The CLI process does not need pydantic's plugin discovery (an entry-point scan on every start).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


class _NoPluginLoader:
    """With every pydantic plugin disabled, the plugin loader pydantic imports for its first model is not needed.

    pydantic 2.14 ``plugin/_schema_validator.py`` ``create_schema_validator`` imports ``plugin/_loader.py``, whose
    ``get_plugins()`` returns ``()`` when ``PYDANTIC_DISABLE_PLUGINS`` is ``__all__`` — but that module imports
    ``importlib.metadata`` first (with ``email``, ``zipfile``, ``csv``: ~25 ms of a CLI start). This import hook
    (only when plugins are off: a value the user set is kept) gives that module as one whose ``get_plugins()``
    returns ``()``; any other name asked of it loads pydantic's own module.
    """

    NAME = "pydantic.plugin._loader"

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> object:
        if fullname != self.NAME or os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__":
            return None
        from importlib.machinery import ModuleSpec
        return ModuleSpec(fullname, self)

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: object) -> None:
        module.get_plugins = lambda: ()  # type: ignore[attr-defined]
        module.__getattr__ = self._real  # type: ignore[attr-defined]

    def _real(self, attr: str) -> object:
        if attr.startswith("__"):  # the import system's probes (``__path__``, ...)
            raise AttributeError(attr)
        import importlib
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        sys.modules.pop(self.NAME, None)
        return getattr(importlib.import_module(self.NAME), attr)


if "pydantic.plugin._loader" not in sys.modules and not any(type(f).__name__ == "_NoPluginLoader" for f in sys.meta_path):
    sys.meta_path.insert(0, _NoPluginLoader())

import typer

from trainmem import cli_options as opt
from trainmem.errors import TrainmemError

# Plain click help (rich_markup_mode=None): it wraps long option lists instead of cutting them with "…".
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Per-GPU memory of one training step: estimate, trace, explain, plan, compare, doctor, report, serve, validate.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version
        try:
            print(f"trainmem {version('trainmem')}")
        except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
            print("trainmem (not installed)")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Per-GPU memory of one training step: estimate, trace, explain."""


# `trainmem estimate` and `trainmem explain` (estimate_cli: the web API parses with the same commands)
from trainmem.estimate_cli import register as _register_estimate  # noqa: E402

_register_estimate(app)


@app.command("models")
def models_cmd(as_json: bool = typer.Option(False, "--json")) -> None:
    """List the bundled model catalog."""
    from trainmem.model.catalog import list_models, load_catalog_spec

    rows = [(m.name, load_catalog_spec(m.name)) for m in list_models()]
    if as_json:
        print(json.dumps([{"name": n, "model_type": s.model_type, "n_params": s.n_params, "source": s.source}
                          for n, s in rows]))
        return
    from rich.console import Console
    from rich.table import Table
    tab = Table(title="trainmem model catalog")
    for col in ("name", "type", "parameters", "source"):
        tab.add_column(col, overflow="fold")
    for n, s in rows:
        tab.add_row(n, s.model_type, f"{s.n_params:,}", s.source)
    Console().print(tab)


@app.command("gpus")
def gpus_cmd() -> None:
    """List the GPU catalog."""
    from rich.console import Console
    from rich.table import Table
    from trainmem.hardware import list_gpus
    from trainmem.units import GiB

    tab = Table(title="trainmem GPU catalog")
    for col in ("name", "memory (GiB)", "bf16 TFLOP/s", "host RAM/node (GiB)", "source"):
        tab.add_column(col, overflow="fold")
    for g in list_gpus():
        host = "n/a" if g.host_memory_bytes is None else f"{g.host_memory_bytes / GiB:,.0f}" + (" assumed" if g.host_memory_assumed else "")
        tab.add_row(g.name, f"{g.memory_bytes / GiB:.1f}", "n/a" if g.bf16_tflops is None else f"{g.bf16_tflops:g}", host, g.source)
    Console().print(tab)


# `trainmem trace` lives beside the tracer's CLI glue; torch is imported only when a trace runs.
from trainmem.trace_cli import register as _register_trace  # noqa: E402

_register_trace(app)

from trainmem.plan_cli import register as _register_plan  # noqa: E402

_register_plan(app)

from trainmem.doctor_cli import register as _register_doctor  # noqa: E402

_register_doctor(app)

from trainmem.report_cli import register as _register_report  # noqa: E402

_register_report(app)

from trainmem.validate_cli import register as _register_validate  # noqa: E402

_register_validate(app)


def _argv_lang(argv: list[str]) -> str:
    """``--lang`` as given on the command line (known before click parses, for the error line)."""
    for i, a in enumerate(argv):
        if a == "--lang" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--lang="):
            return a.split("=", 1)[1]
    return "en"


def _print_error(message: str, lang: str) -> None:
    from trainmem.report.i18n import LANGS, t, tr
    lang = lang if lang in LANGS else "en"
    sep = "：" if lang == "zh" else ": "
    print(f"{t('error', lang)}{sep}{tr(message, lang)}", file=sys.stderr)


def _group(argv: list[str]) -> typer.core.TyperGroup:
    """The click group that runs ``argv``: when ``argv`` starts with a command's name, a group of that command alone.

    typer builds every parameter of every command of the group it is given (``typer/main.py``
    ``get_group_from_info``, typer 0.29: a signature and type hints per command, ~50 options each): ~40 ms of a
    start, for commands that do not run. The command alone parses, runs and refuses exactly as in the whole group
    (same root options, same context); anything else (``--help``, ``--version``, a misspelt command and its
    suggestion) gets the whole group.
    """
    import copy

    def name(info: typer.models.CommandInfo) -> str:  # typer's own naming (typer/main.py get_command_name)
        return info.name or info.callback.__name__.lower().replace("_", "-")  # type: ignore[union-attr]

    chosen = [c for c in app.registered_commands if argv and name(c) == argv[0]]
    if len(chosen) != 1 or app.registered_groups:
        return typer.main.get_command(app)  # type: ignore[return-value]
    one = copy.copy(app)
    one.registered_commands = chosen
    return typer.main.get_command(one)  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and exit code 2 for any bad input (in ``--lang``'s language)."""
    lang = _argv_lang(sys.argv[1:] if argv is None else argv)
    try:
        from trainmem.cli_coercion import defer_coercion
        defer_coercion(_group(sys.argv[1:] if argv is None else argv)).main(args=argv, standalone_mode=False)
    except TrainmemError as e:
        _print_error(str(e), lang)
        return 2
    except Exception as e:  # click's own (typer vendors click; match by shape, not by import path)
        names = {c.__name__ for c in type(e).__mro__}
        if "Exit" in names:
            return int(getattr(e, "exit_code", 0))
        if "Abort" in names:
            _print_error("aborted", lang)
            return 2
        if "NoArgsIsHelpError" in names:  # bare `trainmem`: the help is the answer, not an error
            print(e.format_message())  # type: ignore[attr-defined]
            return 0
        if "ClickException" in names:
            _print_error(e.format_message(), lang)  # type: ignore[attr-defined]
            return 2
        raise
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
