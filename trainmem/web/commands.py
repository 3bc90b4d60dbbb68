"""The web API's commands: a JSON object in, the CLI's ``--json`` object out.

A request's keys are the command's options in snake_case (``seq_len``, ``micro_batch``, …, ``lang``)
plus ``model``. They are turned into the command line the CLI would get and parsed by the CLI's own
click command, so a value is converted, and refused, exactly as on the command line (the same one-line
message). The result is built as the CLI builds its ``--json`` object (``tests/web/test_api.py``
checks they are equal). ``model`` may also be a pasted ``config.json`` object.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainmem.errors import ConfigError, TrainmemError
from trainmem.report.i18n import check_lang

__all__ = ["COMMANDS", "parse", "run", "request_schema", "doctor_available"]

COMMANDS = ("estimate", "compare", "plan", "doctor")
#: Options of the CLI that write files or only change the text output: not taken by the API.
_REFUSED = {"export": "export", "out_dir": "output", "report": "report"}
_IGNORED = ("as_json", "json")
_DOCTOR_TEXT = ("error", "log", "nvidia_smi", "config", "snapshot")


@lru_cache(maxsize=None)
def _click_command(name: str):  # noqa: ANN202 - a click command
    import typer

    from trainmem import doctor_cli, estimate_cli, plan_cli

    # the CLI's own commands, registered on an app of the web's (importing trainmem.cli would import `serve`,
    # which imports this module)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    for module in (estimate_cli, plan_cli, doctor_cli):
        module.register(app)
    group = typer.main.get_command(app)
    cmd = group.commands.get(name)  # type: ignore[attr-defined]
    if cmd is None:
        raise ConfigError(f"{name}: this trainmem has no such command")
    return cmd


def _plan_api_defaults() -> dict[str, object]:
    """``trainmem.plan``'s keyword defaults: the values ``trainmem plan`` uses for what is not given."""
    import inspect

    from trainmem.python_api import plan
    return {k: p.default for k, p in inspect.signature(plan).parameters.items()
            if type(p.default) in (int, float, str)}


def command_defaults() -> dict[str, dict[str, object]]:
    """Each command's option defaults — the CLI's: what its click command declares, and for ``plan`` what it
    fills in for an unset flag (``--seq-len`` 4096, ``trainmem.plan``'s defaults); ``estimate``'s unset,
    model-dependent ones left out. The page shows these."""
    out: dict[str, dict[str, object]] = {}
    for name in COMMANDS:
        cmd = _click_command(name)
        out[name] = {p.name: p.default for p in cmd.params
                     if type(p.default) in (int, float, str) and p.param_type_name == "option"}
    plan_params = {p.name for p in _click_command("plan").params}
    out["plan"].update({k: v for k, v in _plan_api_defaults().items() if k in plan_params and k not in out["plan"]})
    return out


def _params(cmd) -> dict[str, Any]:  # noqa: ANN001
    return {p.name: p for p in cmd.params if p.name != "help"}


def _argv(cmd, body: dict[str, Any]) -> list[str]:  # noqa: ANN001
    params = _params(cmd)
    args: list[str] = []
    model: list[str] = []
    for key, value in body.items():
        if key in _IGNORED:
            continue
        if key in _REFUSED:
            raise ConfigError(f"{key}: not available in the web API (it writes files); use the command line")
        if key == "from_file":  # --from FILE reads a local file: the API reads none (paste the config instead)
            raise ConfigError("from_file: not available in the web API (it reads a local file); give the model and "
                              "the flags, or use the command line")
        p = params.get(key)
        if key == "model" or (p is not None and p.param_type_name == "argument"):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{key}: expected a string, got a JSON {_json_type(value)}")
            model = ["--", value] if value is not None else []
            continue
        if p is None:
            raise ConfigError(f"No such option: --{key.replace('_', '-')}")
        flag = p.opts[0]
        if getattr(p, "is_flag", False):
            if value is True:
                args.append(flag)
            elif value not in (False, None):
                raise ConfigError(f"{key}: expected true or false, got {value!r}")
            continue
        if value is None:
            continue
        if isinstance(value, (dict, list)):
            raise ConfigError(f"Invalid value for '{flag}': expected a number or a string, got a JSON {_json_type(value)}")
        args += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
    return args + model


def _json_type(value: object) -> str:
    return {dict: "object", list: "array", bool: "boolean", int: "number", float: "number"}.get(type(value), "value")


def parse(command: str, body: dict[str, Any]) -> dict[str, Any]:
    """The command's arguments for a request body, converted by the CLI's click command (its errors as
    :class:`ConfigError`, the CLI's one line). A pasted config (``model`` an object) is kept as it is."""
    cmd = _click_command(command)
    pasted = body.get("model") if isinstance(body.get("model"), dict) else None
    if pasted is not None:
        body = {**body, "model": "pasted-config"}
    try:
        ctx = cmd.make_context(command, _argv(cmd, body))
    except TrainmemError:
        raise
    except Exception as exc:  # click's own errors (typer vendors click: matched by shape)
        fmt = getattr(exc, "format_message", None)
        if fmt is None:
            raise
        raise ConfigError(fmt()) from None
    params = dict(ctx.params)
    if pasted is not None:
        params["model"] = pasted
    return params


def _estimate(p: dict[str, Any], allow_paths: bool = False) -> dict:
    """``trainmem estimate --json`` (with ``explain``, ``max_micro_batch``): the same object."""
    from trainmem import cli_options as opt
    from trainmem.memory import estimate
    from trainmem.python_api import estimate_json, max_micro_batch_json
    from trainmem.web.inputs import build_any

    check_lang(p["lang"])
    spec, ts = build_any(p["model"], allow_paths, **opt.setup_fields(p))
    if p.get("max_micro_batch"):
        from trainmem.memory.search import max_micro_batch as search
        return max_micro_batch_json(ts, *search(spec, ts))
    return estimate_json(spec, ts, estimate(spec, ts), explain=bool(p.get("explain")))


def estimate_fix(body: dict[str, Any], allow_paths: bool = False) -> tuple[dict | None, str, dict]:
    """For the Estimate tab of a run that does not fit: (:func:`trainmem.plan.compare.cheapest_fix`, the model
    as a command line names it, the setup fields the request gave)."""
    from trainmem import cli_options as opt
    from trainmem.plan.compare import cheapest_fix
    from trainmem.web.inputs import build_any

    p = parse("estimate", body)
    given = {k: v for k, v in opt.setup_fields(p).items() if v is not None}
    spec, ts = build_any(p["model"], allow_paths, **given)
    model = p["model"] if isinstance(p["model"], str) else "config.json"
    return cheapest_fix(spec, ts, given), model, given


def _compare(p: dict[str, Any], allow_paths: bool = False) -> dict:
    """``trainmem compare --json``."""
    from trainmem import cli_options as opt
    from trainmem.plan.compare import compare
    from trainmem.web.inputs import build_any

    check_lang(p["lang"])
    spec, ts = build_any(p["model"], allow_paths, **opt.setup_fields(p))
    return compare(spec, ts)


def plan_inputs(p: dict[str, Any], allow_paths: bool = False):  # noqa: ANN201 - (PlanRequest, sizing)
    from trainmem.python_api import PLAN_EXTRA_KEYS, plan_checks
    from trainmem.web.inputs import plan_request

    check_lang(p["lang"])
    sizing = plan_checks(p["global_batch"], p["cluster"], p["gpu"], p["min_gpus"], p["tokens"], p["days"])
    extra = {k: p[k] for k in PLAN_EXTRA_KEYS}
    defaults = _plan_api_defaults()  # (the CLI's --seq-len / --precision are unset until the command fills them)
    req = plan_request(p["model"], p["cluster"] or f"1x{p['gpu']}", p["global_batch"],
                       p["seq_len"] or defaults["seq_len"], p["precision"] or defaults["precision"],
                       p["margin"], p["top"], p["fix"], extra, allow_paths)
    return req, sizing


def _plan(p: dict[str, Any], allow_paths: bool = False) -> dict:
    """``trainmem plan --json`` (without ``--export``, which writes files)."""
    from trainmem.python_api import plan_json, plan_sizing

    req, sizing = plan_inputs(p, allow_paths)
    out = plan_sizing(req, p["gpu"], p["min_gpus"], p["tokens"], p["days"]) if sizing else {}
    result = None
    if p["cluster"]:
        from trainmem.plan.search import plan
        result = plan(req)
    return plan_json(result, out)


def doctor_function():  # noqa: ANN201 - (run_doctor, DoctorInputs, to_json), or None
    """The doctor's library entry points, when ``trainmem.doctor`` has them."""
    try:
        from trainmem.doctor import DoctorInputs, run_doctor
        from trainmem.doctor.report import to_json
    except ImportError:
        return None
    return run_doctor, DoctorInputs, to_json


def doctor_available() -> bool:
    return doctor_function() is not None


_DOCTOR_FILES = {"error": "error.txt", "nvidia_smi": "nvidia-smi.txt"}


def _config_name(text: str) -> str:
    s = text.lstrip()
    return "config.json" if s.startswith("{") else ("config.toml" if s.startswith("[") or "\n[" in text else "config.yaml")


def _doctor_model(ref: str) -> str | dict:
    """A doctor request's model without ``allow_paths``: a catalog name as it is (the doctor finds it in the
    catalog before any path), anything else resolved with no file looked at and handed over as its config."""
    from trainmem.model.catalog import find_entry
    from trainmem.web.inputs import web_model

    spec = web_model(ref, allow_paths=False)
    return ref if find_entry(ref.strip()) is not None or not spec.hf_config else dict(spec.hf_config)


def _doctor_texts(body: dict[str, Any]) -> dict[str, Any]:
    """The pasted files of a doctor request (``log``: one text, or one per rank), checked for type."""
    texts = {k: body[k] for k in _DOCTOR_TEXT if body.get(k) is not None}
    if "snapshot" in texts:
        raise ConfigError("snapshot: a memory snapshot is a binary pickle; use trainmem doctor --snapshot FILE")
    logs = texts.get("log")
    if isinstance(logs, list) and all(isinstance(x, str) for x in logs):
        return texts
    for k, v in texts.items():
        if not isinstance(v, str):
            raise ConfigError(f"{k}: expected the text of the file, got a JSON {_json_type(v)}")
    return texts


def _write_doctor_files(tmp: str, texts: dict[str, Any], model: Any) -> dict[str, Any]:
    """Write the pasted texts (and a pasted config.json model) as the files the doctor reads."""
    import json
    import os

    def put(name: str, text: str) -> str:
        path = os.path.join(tmp, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path

    logs = texts.get("log")
    logs = [logs] if isinstance(logs, str) else list(logs or [])
    files: dict[str, Any] = {k: put(n, texts[k]) for k, n in _DOCTOR_FILES.items() if k in texts}
    files["logs"] = [put("log.txt" if len(logs) == 1 else f"log-rank{i}.txt", t) for i, t in enumerate(logs)]
    if "config" in texts:
        files["config"] = put(_config_name(texts["config"]), texts["config"])
    if isinstance(model, dict):
        files["model"] = put("config.json", json.dumps(model))
    return files


def _doctor(body: dict[str, Any], allow_paths: bool = False) -> dict:
    """``trainmem doctor --json`` for pasted texts: they are written as files in a private temporary
    folder, whose path is taken out of the answer and of any error line (they name ``error.txt``, …)."""
    import json
    import os
    import tempfile

    from trainmem import cli_options as opt

    entry = doctor_function()
    if entry is None:
        raise ConfigError("the doctor is not available in this trainmem (trainmem.doctor has no API yet)")
    run_doctor, inputs, to_json = entry
    texts = _doctor_texts(body)
    p = parse("doctor", {k: v for k, v in body.items() if k not in _DOCTOR_TEXT})
    check_lang(p["lang"])
    model = p.get("model")
    if isinstance(model, str) and not allow_paths:
        model = _doctor_model(model)
    with tempfile.TemporaryDirectory(prefix="trainmem-web-") as tmp:
        files = _write_doctor_files(tmp, texts, model)
        model = files.get("model", model)
        inp = inputs(error=files.get("error"), logs=files["logs"], nvidia_smi=files.get("nvidia_smi"),
                     config=files.get("config"), model=model, flags=opt.setup_fields(p),
                     config_model=allow_paths)  # (a pasted config's model: a catalog name only)
        prefix = tmp + os.sep
        try:
            res = run_doctor(inp)
            out = to_json(res.findings, p["lang"], res.expected)
        except TrainmemError as exc:
            raise ConfigError(str(exc).replace(prefix, "")) from None
        return json.loads(json.dumps(out).replace(json.dumps(prefix)[1:-1], ""))


def doctor_steps(body: dict[str, Any]) -> list[dict] | None:
    """The per-step records of a doctor request's pasted log(s), for the monitor chart (None without one)."""
    logs = body.get("log")
    logs = [logs] if isinstance(logs, str) else [x for x in (logs or []) if isinstance(x, str)]
    if not logs:
        return None
    from trainmem.doctor.steplog import parse_steplog
    rows = []
    for text in logs:
        for r in parse_steplog(text).records:
            rows.append({"step": r.step, "allocated_bytes": r.allocated_bytes, "reserved_bytes": r.reserved_bytes,
                         "rank": r.rank})
    return rows


_RUNNERS = {"estimate": _estimate, "compare": _compare, "plan": _plan}


def run(command: str, body: dict[str, Any], allow_paths: bool = False) -> dict:
    """The CLI's ``--json`` object of ``command`` for a request body (TrainmemError on bad input). A local path
    (a model's config.json, a cluster file) is read only with ``allow_paths`` (``trainmem serve --allow-paths``);
    without it, a path is refused with the same line whether it exists or not."""
    if command == "doctor":
        return _doctor(body, allow_paths)
    if command not in _RUNNERS:
        raise ConfigError(f"{command}: not one of {', '.join(COMMANDS)}")
    return _RUNNERS[command](parse(command, body), allow_paths)


# --------------------------------------------------------------------------- OpenAPI

def _schema_type(p) -> dict:  # noqa: ANN001
    """The JSON type of a CLI option (its annotation, as typer keeps it; string when unknown)."""
    from typing import get_args

    if getattr(p, "is_flag", False):
        return {"type": "boolean"}
    ann = getattr(getattr(p, "type_descriptor", None), "annotation", None)
    kinds = {ann, *get_args(ann)}
    if int in kinds:
        return {"type": "integer"}
    if float in kinds:
        return {"type": "number"}
    return {"type": "string"}


def request_schema(command: str) -> dict:
    """JSON schema of a request body (the command's options; for the OpenAPI spec)."""
    try:
        cmd = _click_command(command)
    except ConfigError:
        return {"type": "object", "description": "not available in this trainmem"}
    props: dict[str, Any] = {}
    for p in cmd.params:
        if p.name in ("help", *_IGNORED) or p.name in _REFUSED:
            continue
        if p.param_type_name == "argument":
            props[p.name] = {"oneOf": [{"type": "string"}, {"type": "object"}],
                             "description": "catalog name, path to a config.json, a size like 7B, "
                                            "or the config.json object itself"}
            continue
        props[p.name] = {**_schema_type(p), "description": (getattr(p, "help", "") or "") + f" ({p.opts[0]})"}
    if command == "doctor":
        for k in _DOCTOR_TEXT:
            props[k] = {"type": "string", "description": f"the text of the --{k.replace('_', '-')} file"}
    return {"type": "object", "properties": props, "additionalProperties": False}
