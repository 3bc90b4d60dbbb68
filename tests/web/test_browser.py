"""The web page in a real browser (Debian's chromium through Playwright): it loads, a model or
micro-batch edit changes the numbers and the chart, a bad value shows its error next to its field,
the language switch relabels the page, the other tabs draw, a pasted OOM message gives a finding."""

from __future__ import annotations

import pytest

from tests.web.conftest import shot

pytest.importorskip("fastapi")


def _ready(page, live_server: str) -> None:
    page.goto(live_server + "/")
    page.wait_for_selector("body[data-ready]")
    page.wait_for_selector("#fig-timeline .main-svg")
    page.wait_for_selector('[data-testid="peak"]')


#: The page has answered every edit: no edit waits for its debounce timer (a blur's ``change`` of the previous
#: field can start a request before the next value is typed), and the latest request is drawn or refused.
IDLE = ("state.timer === null && (document.body.getAttribute('data-updated') == String(state.seq)"
        " || document.body.getAttribute('data-error') == String(state.seq))")


def _after(page, action) -> None:  # noqa: ANN001
    """Run ``action`` and wait until the page has answered it and every edit before it (new numbers or an
    error) — on conditions, never on time."""
    before = page.evaluate("state.seq")
    action()
    page.wait_for_function(f"state.seq > {before} && {IDLE}")


def _peak(page) -> str:
    return page.locator('[data-testid="peak"]').text_content()


def _chart_peak(page) -> str:
    return page.evaluate("document.getElementById('fig-timeline').layout.annotations[0].text")


def test_edits_update_numbers_and_chart(page, live_server, tmp_path) -> None:
    _ready(page, live_server)
    shot(page, tmp_path, "01-loaded")
    first, first_chart = _peak(page), _chart_peak(page)
    assert first.endswith("GiB") and first_chart.startswith("peak ")
    _after(page, lambda: page.select_option('[data-testid="field-model_source"]', "qwen2.5-0.5b"))
    second = _peak(page)
    assert second != first and _chart_peak(page) != first_chart
    assert page.evaluate("document.getElementById('fig-timeline').layout.title.text").startswith(
        "Memory over one training step — qwen2.5-0.5b")
    _after(page, lambda: page.fill('[data-testid="field-micro_batch"]', "8"))
    third = _peak(page)
    assert float(third.split()[0].replace(",", "")) > float(second.split()[0].replace(",", ""))
    shot(page, tmp_path, "02-micro-batch-8")


def test_bad_value_shows_its_error_beside_the_field(page, live_server, tmp_path) -> None:
    _ready(page, live_server)
    assert page.get_attribute('[data-testid="field-seq_len"]', "placeholder") == "2048"
    _after(page, lambda: page.fill('[data-testid="field-micro_batch"]', "abc"))
    err = page.locator('[data-testid="error-micro_batch"]')
    assert "--micro-batch" in err.text_content() and "integer" in err.text_content()
    assert page.locator('.field.invalid[data-field="micro_batch"]').count() == 1
    assert page.locator('[data-testid="global-error"]').text_content() == ""
    shot(page, tmp_path, "03-bad-micro-batch")
    _after(page, lambda: page.fill('[data-testid="field-micro_batch"]', "0"))
    assert "micro-batch" in err.text_content() and "greater than or equal to 1" in err.text_content()
    _after(page, lambda: page.fill('[data-testid="field-micro_batch"]', "2"))
    assert err.text_content() == "" and page.locator(".field.invalid").count() == 0
    page.fill('[data-testid="field-seq_len"]', "")
    _after(page, lambda: page.fill('[data-testid="field-gpus"]', "8"))
    page.locator("details summary").click()
    _after(page, lambda: page.fill('[data-testid="field-tp"]', "3"))
    assert page.locator('.field.invalid[data-field="tp"]').count() == 1


def test_pasted_config_and_language_switch(page, live_server, tmp_path) -> None:
    import json

    from trainmem.model.resolve import resolve_model

    _ready(page, live_server)
    page.select_option('[data-testid="field-model_source"]', "__paste")
    _after(page, lambda: page.fill('[data-testid="field-model_config"]', "{not json"))
    assert page.locator('[data-testid="error-model_config"]').text_content() == "this is not valid JSON"
    cfg = json.dumps(dict(resolve_model("gpt2").hf_config))
    _after(page, lambda: page.fill('[data-testid="field-model_config"]', cfg))
    assert "pasted config.json" in page.evaluate("document.getElementById('fig-timeline').layout.title.text")
    _after(page, lambda: page.select_option('[data-testid="lang"]', "zh"))
    page.wait_for_function("document.documentElement.lang == 'zh-CN'")
    assert page.locator('[data-tab="estimate"]').text_content() == "估算"
    assert "单步训练显存" in page.evaluate("document.getElementById('fig-timeline').layout.title.text")
    assert "峰值已分配" in page.locator("#result").text_content()
    shot(page, tmp_path, "04-zh")


def test_compare_and_plan_tabs(page, live_server, tmp_path) -> None:
    _ready(page, live_server)
    _after(page, lambda: page.select_option('[data-testid="field-engine"]', "fsdp2"))
    _after(page, lambda: page.fill('[data-testid="field-gpus"]', "8"))
    _after(page, lambda: page.fill('[data-testid="field-seq_len"]', "4096"))
    _after(page, lambda: page.fill('[data-testid="field-micro_batch"]', "2"))
    _after(page, lambda: page.click('[data-tab="compare"]'))
    page.wait_for_selector("#fig-compare .main-svg")
    assert page.locator('[data-testid="compare-table"] tbody tr').count() >= 6
    shot(page, tmp_path, "05-compare")
    _after(page, lambda: page.click('[data-tab="plan"]'))
    page.wait_for_selector("#fig-plan-memory .main-svg")
    assert page.locator('[data-testid="plan-table"] tbody tr').count() >= 1
    assert page.locator('[data-field="cluster"]').is_visible() and not page.locator('[data-field="micro_batch"]').is_visible()
    # a blank field shows this tab's default, the CLI's: plan --seq-len 4096 (the estimate tab's is 2048)
    assert page.get_attribute('[data-testid="field-seq_len"]', "placeholder") == "4096"
    shot(page, tmp_path, "06-plan")
    _after(page, lambda: page.fill('[data-testid="field-cluster"]', "8xNOPE"))
    assert "unknown GPU 'NOPE'" in page.locator('[data-testid="error-cluster"]').text_content()
    assert "stale" in page.locator("#out").get_attribute("class")
    shot(page, tmp_path, "06b-plan-error")


OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. GPU 0 has a total capacity of "
       "79.19 GiB of which 1.25 GiB is free. Including non-PyTorch memory, this process has 77.93 GiB memory in use. "
       "Of the allocated memory 74.12 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but "
       "unallocated.")


def test_pasted_oom_message_gives_a_finding(page, live_server, tmp_path) -> None:
    from trainmem.web.commands import doctor_available

    if not doctor_available():
        pytest.skip("trainmem.doctor has no API yet")
    from trainmem.doctor import CAUSES
    _ready(page, live_server)
    _after(page, lambda: page.click('[data-tab="doctor"]'))
    _after(page, lambda: page.fill('[data-testid="field-error"]', OOM))
    page.wait_for_selector('[data-testid="finding"]')
    causes = [f.get_attribute("data-cause") for f in page.locator('[data-testid="finding"]').all()]
    assert causes and causes[0] != "none" and set(causes) <= set(CAUSES)
    assert "GiB" in page.locator('[data-testid="finding"]').first.text_content()
    shot(page, tmp_path, "07-doctor")
    # an error that is not an OOM is no longer refused as a field error (the doctor quotes it in a finding of no
    # memory cause since it stopped refusing OOM-free tracebacks); the page keeps showing the findings of the run
    _after(page, lambda: page.fill('[data-testid="field-error"]', "RuntimeError: mat1 and mat2 shapes cannot be multiplied"))
    assert page.locator('[data-testid="error-error"]').text_content() == ""
    page.wait_for_selector('[data-testid="finding"]')
