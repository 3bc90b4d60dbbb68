"""Speed of the estimator: median in-process estimate time and median CLI wall time.

Targets (issue 2): an estimate ≤ 5 ms in-process; ``trainmem estimate llama-3.1-8b`` ≤ 0.3 s wall; (issue 18)
≤ 0.15 s over a bare ``python -c pass``. Besides wall time, the CPU time of each command (user + system of the
child) is printed: on a loaded machine it moves far less than the wall time.
Run: python benchmarks/speed.py  (``--instructions``: instruction counts under valgrind instead, which load does not move)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from trainmem.memory import estimate
from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup

CASES = [
    ("llama-3.1-8b", dict()),
    ("llama-3.1-70b", dict(engine="fsdp2", gpus=64, grad_accum=8)),
    ("llama-3.1-405b", dict(engine="megatron", tp=8, pp=9, gpus=576, zero=1, grad_accum=32, vpp=2)),
    ("mixtral-8x7b", dict(engine="deepspeed", zero=3, gpus=16)),
    ("deepseek-v3", dict(engine="megatron", tp=2, pp=16, ep=8, gpus=256, zero=1, grad_accum=16)),
]


def main() -> None:
    print(f"{'case':70s} {'median ms':>10s} {'max ms':>8s}")
    worst = 0.0
    for name, kw in CASES:
        spec = resolve_model(name)
        setup = make_setup(**kw)
        estimate(spec, setup)
        times = []
        for _ in range(30):
            t = time.perf_counter()
            estimate(spec, setup)
            times.append((time.perf_counter() - t) * 1e3)
        med = statistics.median(times)
        worst = max(worst, med)
        print(f"{name + ' ' + str(kw):70s} {med:10.2f} {max(times):8.2f}")
    print(f"worst median in-process estimate: {worst:.2f} ms (target <= 5 ms)")
    # An installed package has bytecode; an editable checkout under PYTHONDONTWRITEBYTECODE=1 would
    # recompile trainmem on every start, so compile it once, as pip does.
    import compileall
    import pathlib

    import trainmem
    compileall.compile_dir(str(pathlib.Path(trainmem.__file__).parent), quiet=1)

    import resource

    def wall(cmd: list[str], n: int) -> float:
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts)

    def cpu(cmd: list[str], n: int) -> float:
        ts = []
        for _ in range(n):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(cmd, check=True, capture_output=True)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            ts.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        return statistics.median(ts)

    floor = wall([sys.executable, "-c", "pass"], 5)
    deps = wall([sys.executable, "-c", "import typer._adapters, pydantic"], 5)
    print(f"median wall of `python -c pass`: {floor:.3f} s; of importing typer (0.2x builds pydantic adapters) "
          f"and pydantic: {deps:.3f} s")
    walls = []
    for _ in range(7):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainmem.cli", "estimate", "llama-3.1-8b", "--json"],
                       check=True, capture_output=True)
        walls.append(time.perf_counter() - t)
    print(f"median wall of `trainmem estimate llama-3.1-8b --json`: {statistics.median(walls):.3f} s (target <= 0.3 s); "
          f"{statistics.median(walls) - floor:.3f} s over `python -c pass` (target <= 0.15 s)")
    cpu_floor = cpu([sys.executable, "-c", "pass"], 5)
    cpu_json = cpu([sys.executable, "-m", "trainmem.cli", "estimate", "llama-3.1-8b", "--json"], 7)
    print(f"median CPU time of `trainmem estimate llama-3.1-8b --json`: {cpu_json:.3f} s, {cpu_json - cpu_floor:.3f} s "
          f"over `python -c pass` ({cpu_floor:.3f} s)")
    # What any start that validates its setup with pydantic pays before trainmem's own code (the CLI skips
    # pydantic's disabled plugin loader the same way: trainmem/cli.py _NoPluginLoader).
    cpu_typer = cpu([sys.executable, "-c", "import typer"], 7)
    cpu_pyd = cpu([sys.executable, "-c", "import trainmem.cli, sys; import pydantic.main"], 7)
    print(f"median CPU time over `python -c pass` of importing typer: {cpu_typer - cpu_floor:.3f} s; of importing the CLI "
          f"module and pydantic's BaseModel: {cpu_pyd - cpu_floor:.3f} s")
    walls = []
    for _ in range(5):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "trainmem.cli", "estimate", "llama-3.1-8b"], check=True, capture_output=True)
        walls.append(time.perf_counter() - t)
    print(f"median wall of `trainmem estimate llama-3.1-8b` (rich table): {statistics.median(walls):.3f} s")


#: ``trainmem estimate llama-3.1-8b --json`` in-process, then every dataclass of trainmem it made built once more from
#: its class body (dataclasses._process_class, Python 3.11): the difference to the plain run is what building them
#: costs a start.
_DATACLASSES_TWICE = """
import contextlib, dataclasses, io
made, real = [], dataclasses._process_class
def record(cls, *args):
    if cls.__module__.startswith('trainmem'):
        made.append((cls.__name__, cls.__bases__, cls.__module__, dict(cls.__dict__), args))
    return real(cls, *args)
dataclasses._process_class = record
import trainmem.cli
with contextlib.redirect_stdout(io.StringIO()):
    trainmem.cli.main(['estimate', 'llama-3.1-8b', '--json'])
dataclasses._process_class = real
for name, bases, module, body, args in made:
    body = {k: v for k, v in body.items() if k not in ('__dict__', '__weakref__')}
    again = type(name, bases, body)
    again.__module__ = module
    real(again, *args)
"""


def instructions() -> None:
    """``--instructions``: instructions each start executes (valgrind's callgrind), which a loaded machine does not
    move as it moves CPU time; the same stages as above, in millions."""
    import os
    import re
    import shutil

    if shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind")
    env = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__"}

    def count(args: list[str]) -> int:
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, *args],
                             capture_output=True, text=True, env=env, check=True).stderr
        return int(re.search(r"Collected : (\d+)", out).group(1)) // 10**6  # type: ignore[union-attr]

    stages = [("python -c pass", ["-c", "pass"]), ("import typer", ["-c", "import typer"]),
              ("import trainmem.cli (typer, the 12 commands)", ["-c", "import trainmem.cli"]),
              ("  + pydantic's BaseModel", ["-c", "import trainmem.cli; import pydantic.main"]),
              ("  + trainmem.setup (TrainingSetup's schema)", ["-c", "import trainmem.cli, trainmem.setup"]),
              ("trainmem estimate llama-3.1-8b --json", ["-m", "trainmem.cli", "estimate", "llama-3.1-8b", "--json"]),
              ("  the same, building trainmem's dataclasses twice", ["-c", _DATACLASSES_TWICE])]
    for label, args in stages:
        print(f"{label:50s} {count(args):6d} M instructions")


if __name__ == "__main__":
    instructions() if "--instructions" in sys.argv[1:] else main()
