"""``--from FILE`` in Chinese: every assumption line the readers write for the example configs, and every error line
of the bad inputs, has its Chinese entry (no run of English words left, tests/report/test_zh.py's detector)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.frameworks.test_readers import CASES, CONFIGS, NO_MODEL
from tests.frameworks.test_readers_bad import BAD
from tests.report.test_zh import ascii_punctuation_in_chinese, english_runs
from trainmem.errors import ConfigError
from trainmem.frameworks.readers import read_config
from trainmem.report.i18n import tr


def _left(text: str) -> list[str]:
    zh = tr(text, "zh")
    return english_runs(zh) + ascii_punctuation_in_chinese(zh)


@pytest.mark.parametrize("name", sorted({**CASES, **NO_MODEL}))
def test_assumption_lines_are_chinese(name: str) -> None:
    left = {line: _left(line) for line in read_config(str(CONFIGS / name)).notes()}
    assert not {k: v for k, v in left.items() if v}, "\n".join(k for k, v in left.items() if v)


def test_error_lines_are_chinese(tmp_path: Path) -> None:
    missing = []
    for name, content, _ in BAD:
        path = tmp_path / name
        path.write_text(content)
        try:
            read_config(str(path))
        except ConfigError as e:
            if _left(str(e)):
                missing.append(str(e))
    assert not missing, "\n".join(missing)
