"""write_export: all files or none, never a half-written folder; an existing different file is refused in one
line unless force; the same content again is fine."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainmem.errors import ConfigError
from trainmem.export import write_export

FILES = {"a.json": "{}\n", "launch.sh": "#!/usr/bin/env bash\necho hi\n"}


def test_writes_a_new_folder(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "out"
    paths = write_export(FILES, out)
    assert paths == [out / "a.json", out / "launch.sh"]
    assert {p.name: p.read_text() for p in out.iterdir()} == FILES
    assert os.stat(out / "launch.sh").st_mode & stat.S_IXUSR and not os.stat(out / "a.json").st_mode & stat.S_IXUSR
    assert [p.name for p in tmp_path.joinpath("deep").iterdir()] == ["out"]  # no temporary folder left


def test_same_content_again_and_other_files_kept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    write_export(FILES, out)
    write_export(FILES, out)
    assert (out / "notes.txt").read_text() == "mine" and (out / "a.json").read_text() == "{}\n"


def test_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_export(FILES, out)
    changed = {"a.json": '{"x": 1}\n', "launch.sh": "echo other\n"}
    with pytest.raises(ConfigError, match=r"a\.json exists with other content; pass --force") as err:
        write_export(changed, out)
    assert "\n" not in str(err.value)
    assert (out / "a.json").read_text() == "{}\n" and (out / "launch.sh").read_text() == FILES["launch.sh"]
    write_export(changed, out, force=True)
    assert (out / "a.json").read_text() == '{"x": 1}\n'


def test_refusal_comes_before_any_write(tmp_path: Path) -> None:
    """The second file clashes: the first (new) one must not appear either."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "b.txt").write_text("old")
    with pytest.raises(ConfigError):
        write_export({"a.txt": "new", "b.txt": "new"}, out)
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]


def test_failure_midway_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails after the first file (disk full) leaves no output folder and no temporary one."""
    import trainmem.export.writer as w

    real = w.os.fsync
    calls = []

    def failing(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(w.os, "fsync", failing)
    with pytest.raises(ConfigError, match="No space left on device"):
        write_export(FILES, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_failure_while_replacing_puts_the_old_files_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trainmem.export.writer as w

    out = tmp_path / "out"
    write_export(FILES, out)
    real = w.os.replace
    seen = []

    def failing(src: object, dst: object) -> None:
        seen.append(dst)
        if len(seen) == 2:
            raise OSError(13, "Permission denied")
        real(src, dst)

    monkeypatch.setattr(w.os, "replace", failing)
    with pytest.raises(ConfigError, match="Permission denied"):
        write_export({"a.json": "[]\n", "launch.sh": "echo new\n", "c.txt": "c"}, out, force=True)
    monkeypatch.setattr(w.os, "replace", real)
    assert {p.name: p.read_text() for p in out.iterdir()} == FILES
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.parametrize("files, why", [
    ({}, "no files"), ({"../x": "a"}, "not a plain file name"), ({"a/b": "a"}, "not a plain file name"),
])
def test_bad_names(tmp_path: Path, files: dict, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        write_export(files, tmp_path / "out")


def test_output_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        write_export(FILES, tmp_path / "out")
