"""nvidia-smi table and CSV parsing on the corpus (tests/doctor/corpus/nvsmi)."""

from __future__ import annotations

import pytest

from tests.doctor.conftest import CORPUS
from trainmem.doctor.nvsmi import parse_nvidia_smi
from trainmem.errors import ConfigError
from trainmem.units import MiB


def _read(name: str) -> str:
    return (CORPUS / "nvsmi" / name).read_text()


def test_table_gpu_rows() -> None:
    s = parse_nvidia_smi(_read("healthy_a100.txt"))
    assert [(g.index, g.name, g.used_bytes // MiB, g.total_bytes // MiB) for g in s.gpus] == [
        (0, "A100-SXM-80GB", 33717, 81252), (1, "A100-SXM-80GB", 33695, 81252)]
    assert s.form == "table"


def test_table_process_rows_with_and_without_gi_ci() -> None:
    s = parse_nvidia_smi(_read("rank0_contexts.txt"))
    assert len(s.processes) == 8 and s.processes[0].used_bytes == 26167 * MiB
    assert all(p.gpu == 0 and p.name == "[xarexec] ./dlrm_hack2.par" for p in s.processes)
    s = parse_nvidia_smi(_read("other_user_gpu0.txt"))
    assert [(p.pid, p.used_bytes // MiB) for p in s.processes] == [(32317, 7773), (34873, 217)]


def test_csv_joined_by_uuid_and_names_with_commas() -> None:
    s = parse_nvidia_smi(_read("query_leftover.csv"))
    assert s.form == "csv" and [g.index for g in s.gpus] == [0, 1]
    jup = next(p for p in s.processes if p.pid == 977001)
    assert jup.gpu == 1 and jup.name == "jupyter-lab --no-browser, --port=8888" and jup.used_bytes == 17770 * MiB


def test_nounits_csv_and_utf16(tmp_path) -> None:
    s = parse_nvidia_smi("index, name, memory.used [MiB], memory.total [MiB]\n0, NVIDIA H100, 100, 81559\n")
    assert s.gpus[0].used_bytes == 100 * MiB
    p = tmp_path / "smi.txt"
    p.write_bytes(_read("healthy_a100.txt").encode("utf-16"))  # PowerShell's redirect
    from trainmem.doctor.inputs import read_text
    assert len(parse_nvidia_smi(read_text(str(p), "--nvidia-smi", "nvidia-smi output")).gpus) == 2


@pytest.mark.parametrize("text,match", [(_read("noheader.csv"), "header"), ("hello world\n", "neither"),
                                        ("index, name, utilization.gpu\n0, A100, 5 %\n", "memory.used")])
def test_bad_dumps(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_nvidia_smi(text)
