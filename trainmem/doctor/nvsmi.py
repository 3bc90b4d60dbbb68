"""Parse ``nvidia-smi`` output: the default table, ``--query-gpu=...`` CSV and ``--query-compute-apps=...`` CSV.

* Table: GPU rows ``|   0  NVIDIA A100-SXM4-80GB  On | 00000000:07:00.0 Off | ... |`` followed by a row with
  ``USEDMiB / TOTALMiB``; process rows ``| GPU GI CI PID Type Process-name ... NMiB |`` (the GI/CI columns
  appeared with MIG-capable drivers, 450+; older drivers print ``| GPU PID Type Process-name NMiB |``).
* ``--query-gpu=index,name,memory.used,memory.total[,uuid,pci.bus_id] --format=csv[,nounits]``: a header
  ``index, name, memory.used [MiB], memory.total [MiB]`` then one row per GPU (``81559 MiB`` or ``81559``).
* ``--query-compute-apps=pid,process_name,used_memory[,gpu_uuid|gpu_bus_id] --format=csv``: header
  ``pid, process_name, used_gpu_memory [MiB]``; a process name may itself hold commas (the memory is the
  field with the unit, the pid the integer field).

Both CSVs may be pasted into one file (one after the other). nvidia-smi's MiB are 2^20 bytes. Output without
the header line (``noheader``) is refused: its columns cannot be known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainmem.errors import ConfigError
from trainmem.units import MiB

__all__ = ["GPUMemory", "GPUProcess", "NvidiaSmi", "parse_nvidia_smi"]


@dataclass(frozen=True, slots=True)
class GPUMemory:
    index: int
    name: str
    used_bytes: int
    total_bytes: int
    key: str = ""
    """uuid or PCI bus id (to join the compute-apps CSV)."""


@dataclass(frozen=True, slots=True)
class GPUProcess:
    gpu: int | None
    pid: int
    name: str
    used_bytes: int
    type: str = "C"
    """The table's Type column: ``C`` compute (a CUDA context), ``G`` graphics only (the display server, a desktop
    or browser), ``C+G`` both, ``M``/``M+C`` MPS; ``--query-compute-apps`` lists compute processes only: ``C``."""


@dataclass(frozen=True, slots=True)
class NvidiaSmi:
    gpus: tuple[GPUMemory, ...]
    processes: tuple[GPUProcess, ...]
    form: str
    """``table``, ``csv`` or ``table+csv``."""

    def on_gpu(self, index: int) -> list[GPUProcess]:
        return [p for p in self.processes if p.gpu == index]


_GPU_ROW = re.compile(r"^\|\s+(\d+)\s+(.+?)\s{2,}\S.*\|.*\|")
_MEM = re.compile(r"(\d+)MiB\s*/\s*(\d+)MiB")
_PROC = re.compile(r"^\|?\s+(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(C|G|C\+G|M|M\+C)\s+(.*?)\s+"
                   r"(\d+|N/A)\s*MiB\s*\|")
_MIB = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(MiB)?\s*$")


def _table(text: str) -> tuple[list[GPUMemory], list[GPUProcess]]:
    gpus, procs = [], []
    pending: tuple[int, str] | None = None
    for ln in text.splitlines():
        p = _PROC.match(ln)
        if p:
            used = 0 if p.group(5) == "N/A" else int(p.group(5)) * MiB
            procs.append(GPUProcess(gpu=int(p.group(1)), pid=int(p.group(2)), name=p.group(4).strip(), used_bytes=used,
                                    type=p.group(3)))
            continue
        m = _MEM.search(ln)
        if m and pending is not None:
            gpus.append(GPUMemory(index=pending[0], name=pending[1], used_bytes=int(m.group(1)) * MiB,
                                  total_bytes=int(m.group(2)) * MiB))
            pending = None
            continue
        g = _GPU_ROW.match(ln)
        if g and not m and "MiB" not in ln:
            name = re.split(r"\s{2,}| On | Off ", g.group(2).strip())[0]
            pending = (int(g.group(1)), name)
    return gpus, procs


def _mib(value: str) -> int | None:
    m = _MIB.match(value)
    return None if m is None else int(float(m.group(1)) * MiB)


def _csv_blocks(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header columns, rows) of each CSV block (a block starts at a header line)."""
    blocks: list[tuple[list[str], list[list[str]]]] = []
    for ln in text.splitlines():
        if not ln.strip() or "," not in ln:
            continue
        cells = [c.strip() for c in ln.split(",")]
        low = [c.lower() for c in cells]
        if any(c in ("index", "pid") or c.startswith(("memory.", "used_gpu_memory", "used_memory")) for c in low):
            blocks.append((low, []))
        elif blocks:
            blocks[-1][1].append(cells)
    return blocks


def _gpu_rows(cols: list[str], rows: list[list[str]]) -> list[GPUMemory]:
    idx = {c.split(" [")[0]: i for i, c in enumerate(cols)}
    if "memory.used" not in idx or "memory.total" not in idx:
        raise ConfigError("--nvidia-smi: the --query-gpu CSV needs the memory.used and memory.total columns")
    out = []
    for n, r in enumerate(rows):
        if len(r) != len(cols):
            continue
        used, total = _mib(r[idx["memory.used"]]), _mib(r[idx["memory.total"]])
        if used is None or total is None:
            continue
        key = r[idx["uuid"]] if "uuid" in idx else (r[idx["pci.bus_id"]] if "pci.bus_id" in idx else "")
        index = int(r[idx["index"]]) if "index" in idx and r[idx["index"]].isdigit() else n
        out.append(GPUMemory(index=index, name=r[idx["name"]] if "name" in idx else "", used_bytes=used,
                             total_bytes=total, key=key.lower()))
    return out


def _app_rows(cols: list[str], rows: list[list[str]], gpus: list[GPUMemory]) -> list[GPUProcess]:
    keys = {g.key: g.index for g in gpus if g.key}
    key_col = next((i for i, c in enumerate(cols) if c.startswith(("gpu_uuid", "gpu_bus_id"))), None)
    out = []
    for r in rows:
        mem_i = next((i for i, c in enumerate(r) if c.endswith("MiB") or c == "[N/A]"), None)
        pid_i = next((i for i, c in enumerate(r) if c.isdigit()), None)
        if pid_i is None:
            continue
        used = _mib(r[mem_i]) if mem_i is not None else _mib(r[-1])
        gpu = keys.get(r[key_col].lower()) if key_col is not None and key_col < len(r) else None
        if gpu is None and len(gpus) == 1:
            gpu = gpus[0].index
        name = ", ".join(c for i, c in enumerate(r) if i not in (pid_i, mem_i, key_col))
        out.append(GPUProcess(gpu=gpu, pid=int(r[pid_i]), name=name.strip(), used_bytes=used or 0))
    return out


def _csv(text: str, table_gpus: list[GPUMemory]) -> tuple[list[GPUMemory], list[GPUProcess]]:
    gpus: list[GPUMemory] = []
    apps: list[tuple[list[str], list[list[str]]]] = []
    for cols, rows in _csv_blocks(text):
        if any(c.startswith("memory.") for c in cols) or "index" in cols:
            gpus += _gpu_rows(cols, rows)
        elif "pid" in cols:
            apps.append((cols, rows))
    known = gpus or table_gpus
    procs = [p for cols, rows in apps for p in _app_rows(cols, rows, known)]
    return gpus, procs


def parse_nvidia_smi(text: str) -> NvidiaSmi:
    """The GPUs and processes of an nvidia-smi dump (table and/or CSV); ConfigError when it holds neither."""
    gpus, procs = _table(text)
    c_gpus, c_procs = _csv(text, gpus)
    form = "+".join(f for f, hit in (("table", gpus or procs), ("csv", c_gpus or c_procs)) if hit)
    if not form:
        if re.search(r"^\s*\d+\s*,\s*\S", text, re.M):
            raise ConfigError("--nvidia-smi: CSV without its header line; run nvidia-smi with --format=csv "
                              "(not noheader)")
        raise ConfigError("--nvidia-smi: neither an nvidia-smi table nor --query-gpu / --query-compute-apps CSV")
    return NvidiaSmi(gpus=tuple(gpus or c_gpus), processes=tuple(procs + c_procs), form=form)
