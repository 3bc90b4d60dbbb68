"""Writing an export: all files or none. Every file is first written into a fresh folder beside the output
folder (same file system); a new output folder is then that folder renamed, an existing one receives each file by
``os.replace`` with the files it replaced kept until all are in (and put back if one fails). An existing file
with other content is refused before anything is written, unless ``force``."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from trainmem.errors import ConfigError

__all__ = ["write_export"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def _check(files: dict[str, str], out_dir: Path, force: bool) -> None:
    if not files:
        raise ConfigError("export: no files to write")
    for name in files:
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise ConfigError(f"export: {name!r} is not a plain file name")
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"export: {out_dir} exists and is not a folder")
    for name, text in files.items():
        path = out_dir / name
        if path.is_dir() or path.is_symlink():
            raise ConfigError(f"export: {path} exists and is not a plain file")
        if path.exists() and not force:
            try:
                same = path.read_text(encoding="utf-8") == text
            except (OSError, UnicodeDecodeError):
                same = False
            if not same:
                raise ConfigError(f"export: {path} exists with other content; pass --force to overwrite it")


def _fill(tmp: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp / name
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(path, 0o755 if name.endswith(".sh") else 0o644)


def _move_into(tmp: Path, out_dir: Path, names: list[str]) -> None:
    """Replace each file of an existing folder; on a failure put back what was replaced and drop what was added."""
    backup = tmp / ".replaced"
    backup.mkdir()
    done: list[tuple[str, bool]] = []
    try:
        for name in names:
            had = (out_dir / name).exists()
            if had and _same_fs(out_dir, backup):
                os.link(out_dir / name, backup / name)
            elif had:
                shutil.copy2(out_dir / name, backup / name)
            os.replace(tmp / name, out_dir / name)
            done.append((name, had))
    except OSError:
        for name, had in reversed(done):
            if had:
                os.replace(backup / name, out_dir / name)
            else:
                (out_dir / name).unlink(missing_ok=True)
        raise


def _same_fs(a: Path, b: Path) -> bool:
    try:
        return os.stat(a).st_dev == os.stat(b).st_dev
    except OSError:
        return False


def write_export(files: dict[str, str], out_dir: Path, force: bool = False) -> list[Path]:
    """Write ``files`` (name → text) into ``out_dir``, atomically; the paths written, in ``files`` order."""
    out_dir = Path(out_dir)
    _check(files, out_dir, force)
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.trainmem-", dir=out_dir.parent))
    except OSError as err:
        raise ConfigError(f"export: cannot write into {out_dir.parent}: {err.strerror or err}") from None
    try:
        _fill(tmp, files)
        if not out_dir.exists():
            os.chmod(tmp, 0o755)
            os.rename(tmp, out_dir)  # one rename: the folder appears whole or not at all
        else:
            _move_into(tmp, out_dir, list(files))
    except OSError as err:
        raise ConfigError(f"export: cannot write {out_dir}: {err.strerror or err}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out_dir / name for name in files]
