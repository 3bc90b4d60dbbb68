"""The web API mirrors the CLI: the same JSON object for the same options, the same one-line error
(HTTP 422), bounded bodies, an OpenAPI spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.web.conftest import cli, cli_json

pytest.importorskip("fastapi")

ESTIMATES = [
    ("llama-3.1-8b", {"engine": "fsdp2", "gpus": 8, "seq_len": 4096, "micro_batch": 2, "grad_accum": 2}),
    ("llama-2-7b", {"engine": "deepspeed", "zero": 2, "gpus": 8, "grad_accum": 3, "precision": "mixed-bf16"}),
    ("mixtral-8x7b", {"engine": "megatron", "gpus": 16, "tp": 2, "pp": 2, "ep": 2, "sp": True}),
    ("qwen2.5-0.5b", {"lora_rank": 16, "qlora": True, "recompute": "full", "gpu": "RTX-4090-24G"}),
    ("7B", {"gpu_memory": "96GiB", "attn": "flash", "explain": True}),
    ("llama-3.2-1b", {"max_micro_batch": True, "seq_len": 1024}),
]


def _argv(model: str, body: dict) -> list[str]:
    args = [model]
    for k, v in body.items():
        flag = "--" + k.replace("_", "-")
        args += [flag] if v is True else [flag, str(v)]
    return args


def _post(client, path: str, body: dict):
    return client.post(path, json=body)


@pytest.mark.parametrize(("model", "body"), ESTIMATES, ids=[m for m, _ in ESTIMATES])
def test_estimate_equals_the_cli_json(client, capsys, model: str, body: dict) -> None:
    r = _post(client, "/api/estimate", {"model": model, **body})
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(capsys, "estimate", *_argv(model, body))


@pytest.mark.parametrize(("model", "body"), [ESTIMATES[0], ESTIMATES[1], ESTIMATES[3]], ids=["fsdp2", "ds", "qlora"])
def test_compare_equals_the_cli_json(client, capsys, model: str, body: dict) -> None:
    r = _post(client, "/api/compare", {"model": model, **body})
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(capsys, "compare", *_argv(model, body))


PLANS = [
    ("llama-3.2-1b", {"cluster": "8xH100-SXM-80G", "global_batch": 64, "seq_len": 2048, "top": 3}),
    ("qwen2.5-1.5b", {"cluster": "8xA100-SXM-80G", "global_batch": 32, "seq_len": 1024, "fix": "engine=fsdp2"}),
    ("llama-3.1-8b", {"min_gpus": True, "gpu": "A100-SXM-40G", "global_batch": 32, "seq_len": 4096}),
]


@pytest.mark.parametrize(("model", "body"), PLANS, ids=["pool", "fixed", "min-gpus"])
def test_plan_equals_the_cli_json(client, capsys, model: str, body: dict) -> None:
    r = _post(client, "/api/plan", {"model": model, **body})
    assert r.status_code == 200, r.text
    api, ref = r.json(), cli_json(capsys, "plan", *_argv(model, body))
    api.pop("search_seconds"), ref.pop("search_seconds")  # wall-clock time of each search
    assert api == ref


BAD = [
    ("estimate", {"model": "llama-3.1-8b", "micro_batch": "abc"}),
    ("estimate", {"model": "llama-3.1-8b", "micro_batch": 0}),
    ("estimate", {"model": "llama-3.1-8b", "micro_batch": 2.5}),
    ("estimate", {"model": "llama-3.1-8b", "engine": "foo"}),
    ("estimate", {"model": "llama-3.1-8b", "engine": "megatron", "tp": 3, "gpus": 8}),
    ("estimate", {"model": "no-such-model"}),
    ("estimate", {"model": "llama-3.1-8b", "gpu": "H999"}),
    ("estimate", {"model": "llama-3.1-8b", "qlora": True}),
    ("estimate", {"model": "llama-3.1-8b", "lang": "fr"}),
    ("estimate", {"model": "llama-3.1-8b", "no_such_flag": 1}),
    ("estimate", {"seq_len": 128}),
    ("compare", {"model": "llama-3.1-8b", "gpu_memory": "12XB"}),
    ("plan", {"model": "llama-3.1-8b", "cluster": "8xH100-SXM-80G"}),
    ("plan", {"model": "llama-3.1-8b", "global_batch": 8}),
    ("plan", {"model": "llama-3.1-8b", "cluster": "8xNOPE", "global_batch": 8}),
]


def _cli_args(command: str, body: dict) -> list[str]:
    body = dict(body)
    model = body.pop("model", None)
    args = [command] + _argv(model, body)[1:] if model is None else [command, *_argv(model, body)]
    return [a for a in args if a is not None]


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("command", "body"), BAD, ids=[f"{c}-{list(b.items())[-1][0]}" for c, b in BAD])
def test_bad_input_is_422_with_the_cli_line(client, capsys, command: str, body: dict, lang: str) -> None:
    body = {**body, "lang": body.get("lang", lang)}
    r = _post(client, f"/api/{command}", body)
    assert r.status_code == 422, r.text
    assert set(r.json()) == {"error"}
    rc, out, err = cli(capsys, *_cli_args(command, body), "--json")
    assert rc == 2 and out == ""
    sep = "：" if body["lang"] == "zh" else ": "
    prefix = ("错误" if body["lang"] == "zh" else "error") + sep
    assert err == prefix + r.json()["error"] + "\n"


def test_pasted_config_equals_the_config_file(client, capsys, tmp_path) -> None:
    from trainmem.model.catalog import find_entry
    from trainmem.model.resolve import resolve_model

    cfg = dict(resolve_model("qwen2.5-0.5b").hf_config)
    assert find_entry("qwen2.5-0.5b") is not None and cfg["model_type"] == "qwen2"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    body = {"seq_len": 1024, "micro_batch": 4, "engine": "fsdp2", "gpus": 2}
    for command in ("estimate", "compare"):
        r = _post(client, f"/api/{command}", {"model": cfg, **body})
        assert r.status_code == 200, r.text
        ref = cli_json(capsys, command, *_argv(str(path), body))
        got = r.json()
        if command == "estimate":
            assert got.pop("model") == "pasted config.json" and ref.pop("model") == str(path)
        assert got == ref
    r = _post(client, "/api/plan", {"model": cfg, "cluster": "2xH100-SXM-80G", "global_batch": 8, "seq_len": 1024})
    ref = cli_json(capsys, "plan", str(path), "--cluster", "2xH100-SXM-80G", "--global-batch", "8", "--seq-len", "1024")
    got = r.json()
    got.pop("search_seconds"), ref.pop("search_seconds")
    assert got == ref


def test_pasted_config_errors_are_one_line(client) -> None:
    r = _post(client, "/api/estimate", {"model": {"model_type": "llama"}})
    assert r.status_code == 422 and r.json()["error"].startswith("config.json")
    r = _post(client, "/api/estimate", {"model": {"model_type": "nope-type"}})
    assert r.status_code == 422 and "not supported" in r.json()["error"]
    r = _post(client, "/api/estimate", {"model": ["a"]})
    assert r.status_code == 422 and r.json() == {"error": "model: expected a string, got a JSON array"}


def test_bodies_are_bounded_and_json(client) -> None:
    from trainmem.web.app import MAX_BODY_BYTES

    big = json.dumps({"model": "gpt2", "lora_targets": "x" * MAX_BODY_BYTES})
    r = client.post("/api/estimate", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json() == {"error": "request body is larger than 256 KiB"}

    def chunks():  # no Content-Length: the limit holds on the bytes received
        for _ in range(40):
            yield b" " * 8192

    r = client.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = client.post("/api/estimate", content=b'{"model": "gpt2"}', headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    for raw, msg in ((b"{nope", "request body is not valid JSON"), (b"[1, 2]", "request body must be a JSON object"),
                     (b"[" * 100_000, "request body is not valid JSON")):
        r = client.post("/api/estimate", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"].startswith(msg), r.text
    r = client.post("/api/estimate", json={"model": "gpt2", "export": "deepspeed"})
    assert r.status_code == 422
    r = client.post("/api/plan", json={"model": "gpt2", "export": "deepspeed", "out_dir": "/tmp/x"})
    assert r.status_code == 422 and "writes files" in r.json()["error"]


def test_openapi_lists_every_command_with_its_options(client) -> None:
    spec = client.get("/openapi.json").json()
    for command in ("estimate", "compare", "plan", "doctor"):
        assert f"/api/{command}" in spec["paths"]
    body = spec["paths"]["/api/estimate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    props = body["properties"]
    from trainmem.cli_options import SETUP_FIELDS
    assert set(SETUP_FIELDS) <= set(props) and {"model", "lang", "explain"} <= set(props)
    assert props["micro_batch"]["type"] == "integer" and props["qlora"]["type"] == "boolean"
    plan = spec["paths"]["/api/plan"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert plan["margin"]["type"] == "number" and "export" not in plan
    assert client.get("/docs").status_code == 200


DOCTOR = Path(__file__).resolve().parent.parent / "doctor" / "corpus"


def _doctor_ready() -> None:
    from trainmem.web.commands import doctor_available
    if not doctor_available():
        pytest.skip("trainmem.doctor has no API yet")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize(("texts", "flags"), [
    ({"error": "oom/cached_pre15.txt"}, ["llama-3.1-8b", "--micro-batch", "8"]),
    ({"error": "oom/reserved_113_optimizer.txt"}, []),
    ({"log": "logs/leaking.jsonl"}, []),
    ({"nvidia_smi": "nvsmi/" + "{first}"}, ["llama-3.1-8b"]),
], ids=["oom+model", "oom", "log", "nvsmi"])
def test_doctor_equals_the_cli_json(client, capsys, monkeypatch, tmp_path, texts: dict, flags: list, lang: str) -> None:
    """A pasted file gives what ``trainmem doctor --json`` gives for that file (named as the API names it)."""
    _doctor_ready()
    names = {"error": "error.txt", "log": "log.txt", "nvidia_smi": "nvidia-smi.txt"}
    body, args = {"lang": lang}, []
    for key, rel in texts.items():
        rel = rel.replace("{first}", sorted(p.name for p in (DOCTOR / "nvsmi").iterdir() if p.suffix != ".json")[0])
        text = (DOCTOR / rel).read_text(encoding="utf-8")
        body[key] = text
        (tmp_path / names[key]).write_text(text, encoding="utf-8")
        args += [f"--{key.replace('_', '-')}", names[key]]
    if flags:
        body["model"] = flags[0]
        body.update({f[2:].replace("-", "_"): v for f, v in zip(flags[1::2], flags[2::2])})
    r = _post(client, "/api/doctor", body)
    assert r.status_code == 200, r.text
    monkeypatch.chdir(tmp_path)
    assert r.json() == cli_json(capsys, "doctor", *flags, *args, "--lang", lang)


def test_doctor_errors_are_the_cli_lines(client, capsys, monkeypatch, tmp_path) -> None:
    _doctor_ready()
    (tmp_path / "error.txt").write_text("step 120 | loss 2.31")
    monkeypatch.chdir(tmp_path)
    r = _post(client, "/api/doctor", {"error": "step 120 | loss 2.31"})
    rc, _, err = cli(capsys, "doctor", "--error", "error.txt", "--json")
    assert r.status_code == 422 and rc == 2 and err == "error: " + r.json()["error"] + "\n"
    r = _post(client, "/api/doctor", {"snapshot": "x"})
    assert r.status_code == 422 and "--snapshot FILE" in r.json()["error"]
    r = _post(client, "/api/doctor", {"error": 3})
    assert r.status_code == 422 and r.json() == {"error": "error: expected the text of the file, got a JSON number"}


def test_doctor_view_draws_the_log(client) -> None:
    _doctor_ready()
    log = (DOCTOR / "logs" / "leaking.jsonl").read_text()
    d = _post(client, "/api/view/doctor", {"log": log}).json()
    assert d["result"]["findings"][0]["cause"] == "leak" and 'data-cause="leak"' in d["html"]
    assert "monitor" in d["figures"]


def test_the_page_and_its_files(client) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "/vendor/plotly.min.js" in page.text
    assert "http://" not in page.text and "https://" not in page.text
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and js.text.lstrip().startswith("/**") and len(js.content) > 1_000_000
    assert client.get("/static/app.js").status_code == 200
    meta = client.get("/api/meta").json()
    assert "llama-3.1-8b" in {m["name"] for m in meta["models"]} and "H100-SXM-80G" in {g["name"] for g in meta["gpus"]}
    assert "fsdp2" in meta["choices"]["engine"]


def test_ui_labels_are_translated(client) -> None:
    from tests.report.test_zh import assert_chinese

    en, zh = client.get("/api/ui?lang=en").json(), client.get("/api/ui?lang=zh").json()
    assert en.keys() == zh.keys()
    untranslated = [k for k in en if en[k] == zh[k] and not k.startswith("field.") and en[k] not in ("GPU",)]
    assert not untranslated, untranslated
    assert_chinese("\n".join(v for v in zh.values() if v != "GPU"))


def test_view_gives_html_and_figures(client) -> None:
    r = client.post("/api/view/estimate", json={"model": "llama-3.1-8b", "engine": "fsdp2", "gpus": 8})
    d = r.json()
    assert set(d) == {"result", "summary", "html", "figures"} and set(d["figures"]) == {"timeline", "breakdown"}
    assert 'data-testid="peak"' in d["summary"] and 'data-testid="estimate-table"' in d["html"]
    assert d["result"] == client.post("/api/estimate", json={"model": "llama-3.1-8b", "engine": "fsdp2", "gpus": 8}).json()
    r = client.post("/api/view/compare", json={"model": "llama-3.1-8b", "engine": "fsdp2", "gpus": 8, "lang": "zh"})
    assert "compare" in r.json()["figures"] and "技术" in r.json()["html"]
    r = client.post("/api/view/plan", json={"model": "llama-3.2-1b", "cluster": "8xH100-SXM-80G", "global_batch": 64})
    assert set(r.json()["figures"]) == {"plan-memory", "plan-time"}


def test_host_header_is_checked_on_loopback() -> None:
    from fastapi.testclient import TestClient

    from trainmem.web import create_app
    from trainmem.web.app import LOOPBACK_HOSTS

    with TestClient(create_app(LOOPBACK_HOSTS), base_url="http://127.0.0.1:8000") as c:
        assert c.get("/api/ui").status_code == 200
        assert c.get("/api/ui", headers={"host": "evil.example:8000"}).status_code == 400


def test_page_defaults_are_the_clis(client) -> None:
    """The Plan tab showed seq 2048 and planned at 4096: the page's placeholders come from the commands' own
    defaults (/api/meta), plan's --seq-len 4096 among them."""
    import inspect

    from trainmem.plan_cli import plan_cmd
    from trainmem.python_api import plan

    meta = client.get("/api/meta").json()
    cli_defaults = {n: p.default for n, p in inspect.signature(plan_cmd).parameters.items()}
    api_defaults = {n: p.default for n, p in inspect.signature(plan).parameters.items()}  # what plan fills in
    assert meta["defaults"]["plan"]["seq_len"] == (cli_defaults["seq_len"] or api_defaults["seq_len"]) == 4096
    assert meta["defaults"]["plan"]["top"] == cli_defaults["top"] and meta["defaults"]["plan"]["precision"] == "bf16"
    assert "seq_len" not in meta["defaults"]["estimate"]  # the model's default (2048, or its context)


@pytest.mark.parametrize("command, body", [
    ("estimate", {}), ("compare", {}), ("plan", {"cluster": "8xH100-SXM-80G", "global_batch": 8}),
    ("doctor", {"error": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}),
])
def test_no_local_path_is_read_without_allow_paths(client, tmp_path, command: str, body: dict) -> None:
    """`{"model": "/etc/passwd"}` answered "cannot read ... as JSON", telling anyone who reaches the API which files
    exist. Without --allow-paths a path gets one answer, found or not; a cluster file too."""
    from trainmem.model.resolve import resolve_model

    real = tmp_path / "config.json"
    real.write_text(json.dumps(dict(resolve_model("qwen2.5-0.5b").hf_config)))
    answers = []
    for ref in (str(real), str(tmp_path / "missing" / "config.json"), "/etc/passwd", str(tmp_path), "./x.json"):
        r = _post(client, f"/api/{command}", {"model": ref, **body})
        assert r.status_code == 422
        answers.append(r.json()["error"].replace(repr(ref), "REF"))
    assert len(set(answers)) == 1 and "--allow-paths" in answers[0], answers
    assert str(tmp_path) not in answers[0]
    zh = _post(client, f"/api/{command}", {"model": "/etc/passwd", "lang": "zh", **body}).json()["error"]
    assert "不读取本地文件" in zh


def test_cluster_file_needs_allow_paths(client, tmp_path) -> None:
    body = {"model": "llama-3.2-1b", "global_batch": 8}
    errs = {_post(client, "/api/plan", {**body, "cluster": c}).json()["error"].replace(repr(c), "C")
            for c in ("examples/clusters/dgx-h100-64.toml", str(tmp_path / "nope.yaml"))}
    assert len(errs) == 1 and "--allow-paths" in errs.pop()


def test_allow_paths_reads_them(tmp_path, capsys) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from trainmem.model.resolve import resolve_model
    from trainmem.web import create_app

    real = tmp_path / "config.json"
    real.write_text(json.dumps(dict(resolve_model("qwen2.5-0.5b").hf_config)))
    with TestClient(create_app(allow_paths=True)) as c:
        r = _post(c, "/api/estimate", {"model": str(real), "seq_len": 512})
        assert r.status_code == 200 and r.json() == cli_json(capsys, "estimate", str(real), "--seq-len", "512")
        missing = _post(c, "/api/estimate", {"model": str(tmp_path / "nope.json")}).json()["error"]
        assert missing.startswith("no such file")  # the CLI's line, as on the command line
        plan = _post(c, "/api/plan", {"model": "llama-3.2-1b", "global_batch": 64,
                                       "cluster": "examples/clusters/dgx-h100-64.toml"})
        assert plan.status_code == 200, plan.text


def test_from_file_is_refused(client) -> None:
    """--from FILE reads a local file: the API refuses the key rather than ignoring it."""
    for body in ({"model": "llama-3.2-1b", "from_file": "/etc/passwd"}, {"from_file": "/nonexistent.yaml"}):
        r = _post(client, "/api/estimate", body)
        assert r.status_code == 422 and r.json()["error"].startswith("from_file: not available in the web API")
    zh = _post(client, "/api/plan", {"model": "llama-3.2-1b", "from_file": "x.yaml", "lang": "zh"}).json()["error"]
    assert "读取本地文件" in zh
