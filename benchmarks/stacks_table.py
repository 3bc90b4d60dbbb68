"""Print docs/stacks.md: every ``--stack`` and the setup fields it sets, with the condition and the source of each
(the data of trainmem/frameworks; tests/frameworks/test_stacks.py checks the file against this script).

    python benchmarks/stacks_table.py            # writes docs/stacks.md
    python benchmarks/stacks_table.py --print    # prints it
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainmem.frameworks import STACK_NAMES, get_stack, stack_rows

OUT = Path(__file__).resolve().parents[1] / "docs" / "stacks.md"

_HEAD = """# Stacks: frameworks as they ship (`--stack NAME`)

`trainmem estimate|explain|trace|compare|report MODEL --stack NAME` (and `trainmem.estimate(model, stack=NAME)`)
fills every setup flag you did not give with what that framework does by default at the release named below;
flags you give (and a config file's values, `--from`) win. Each value filled is one line of the estimate's
`assumptions`, with its source; a value your flags contradict is not applied, and said so. Without `--stack`,
trainmem's own defaults stay. *when*: `lora` / `full` (fine-tuning kind, from `--lora-rank`), `one-gpu` /
`multi-gpu` (from `--gpus`), `engine X` (the engine, given or the stack's); for each field the first row that
applies is used. Fields trainmem does not model yet are listed as such in the assumptions.

Printed by `python benchmarks/stacks_table.py` from `trainmem/frameworks/` (a test checks this file against it).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    parts = [_HEAD]
    for name in STACK_NAMES:
        st = get_stack(name)
        parts.append(f"\n## `{name}` — {st.release}\n\nRuns on the engines: {', '.join(st.engines)} "
                     f"(what `plan --stack` searches).\n\n| field | value | when | source |\n|---|---|---|---|\n")
        parts.extend(f"| `{f}` | `{_cell(v)}` | {_cell(c)} | {_cell(s)} |\n" for f, v, c, s in stack_rows(name))
        if st.notes:
            parts.append("\n" + "".join(f"- {_cell(n)}\n" for n in st.notes))
    return "".join(parts)


if __name__ == "__main__":
    text = markdown()
    if "--print" in sys.argv:
        print(text, end="")
    else:
        OUT.write_text(text)
        print(f"wrote {OUT}")
