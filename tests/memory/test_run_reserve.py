"""Reserved memory over a run of variable-length samples (trainmem/memory/run_reserve.py): hand-computed allocator
runs, the capacity release, the sampled lengths, the CLI/JSON figure, the ms-swift points' run lengths, and the
estimate's replay against a fake-tensor trace replay through the same allocator."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from trainmem.api import build
from trainmem.cli import main
from trainmem.memory import run_reserve as R
from trainmem.memory.estimate import record_step_events
from trainmem.setup import make_setup

MiB = 2**20
V = 32000  # one fp32 logits-size tensor of n·V·4 bytes per step


def _one_tensor(n: int) -> tuple:
    """A step that allocates and frees one n·V·4-byte tensor (op lists as ``_Sizer.sections`` gives them)."""
    return [], {0: [[1, 0, n * V * 4, 256], [0, 0, 0, 0]]}, []


def test_record_lengths_add_segments_hand_computed() -> None:
    """Lengths 1000, 2000, 1500: 128,000,000 B → a 62 × 2 MiB segment; 256,000,000 B is served by no cached block
    → a 123 × 2 MiB segment; 192,000,000 B fits the 2000-token one (best fit, split). Reserved = the two
    segments, 130,023,424 + 257,949,696 B; one repeated shape (2000) reserves only the second."""
    peak, releases, oom = R.replay_run(_one_tensor, [1000, 2000, 1500], 1, 80 * 2**30)
    assert peak == 62 * 2 * MiB + 123 * 2 * MiB == 387_973_120
    assert (releases, oom) == (0, None)
    assert R.replay_run(_one_tensor, [2000, 2000, 2000], 1, 80 * 2**30)[0] == 257_949_696
    # decreasing lengths reuse the first (largest) segment
    assert R.replay_run(_one_tensor, [2000, 1500, 1000], 1, 80 * 2**30)[0] == 257_949_696


def test_capacity_releases_cached_segments_then_runs_out() -> None:
    """Capacity 400 MiB: after 1000 and 2000 (387,973,120 B held), 3000 tokens need 384,000,000 B → 184 × 2 MiB
    = 385,875,968 B, which does not fit; release_cached_blocks frees both (wholly free) segments and the
    cudaMalloc is retried. 4000 tokens (512,000,000 B) do not fit even then: out of memory at micro-batch 1."""
    cap = 400 * MiB
    peak, releases, oom = R.replay_run(_one_tensor, [1000, 2000, 3000, 2500], 1, cap)
    assert (peak, releases, oom) == (387_973_120, 1, None)
    assert R.replay_run(_one_tensor, [1000, 4000], 1, cap)[2] == 1
    static = lambda n: ([[1, 9, 500 * MiB, 256]], *_one_tensor(n)[1:])  # noqa: E731
    assert R.replay_run(static, [1000], 1, cap)[2] == -1  # the model states alone do not fit


def test_gradient_accumulation_sections() -> None:
    """grad_accum 2 over 3 micro-batches: positions 0 use section 0 (11 MiB → its own 12 MiB segment), position 1
    section 1 (14 MiB: the cached 12 MiB block is too small → a 14 MiB segment), the tail after each group (30 MiB
    + n B → a 32 MiB segment, reused by the second tail). 12 + 14 + 32 MiB."""
    def sections(n: int) -> tuple:
        return ([], {0: [[1, 0, 11 * MiB, 256], [0, 0, 0, 0]], 1: [[1, 1, 14 * MiB, 256], [0, 1, 0, 0]]},
                [[1, 2, 30 * MiB + n, 256], [0, 2, 0, 0]])

    assert R.replay_run(sections, [1, 2, 3], 2, 80 * 2**30)[0] == (12 + 14 + 32) * MiB


def test_sampled_lengths_are_deterministic_and_log_normal() -> None:
    s = make_setup(seq_len=100_000, sample_lengths="1000:500", run_steps=20_000)
    a, _ = R.micro_batch_lengths(s)
    b, _ = R.micro_batch_lengths(s)
    assert a == b and len(a) == 20_000
    mean = sum(a) / len(a)
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / len(a))
    assert abs(mean / 1000 - 1) < 0.02 and abs(std / 500 - 1) < 0.05
    assert R.lognormal_parameters(1000, 500)[1] == pytest.approx(math.sqrt(math.log(1.25)))


def test_deleted_share_matches_kept_fraction_and_batches_pad_to_longest() -> None:
    s = make_setup(seq_len=800, micro_batch=4, sample_lengths="1000:500:100:5000", run_steps=3000)
    lengths, desc = R.micro_batch_lengths(s)
    dropped, drawn = map(int, re.search(r"dropped \((\d+) of (\d+)\)", desc).groups())
    frac = R.kept_fraction(R.parse_sample_lengths("1000:500:100:5000"), 800)
    assert abs((drawn - dropped) / drawn - frac) < 0.01
    assert max(lengths) <= 800 and min(lengths) >= 100
    # padded to the longest of 4: the mean batch length is above the kept samples' mean
    assert sum(lengths) / len(lengths) > 600


def test_file_lengths_in_order(tmp_path: Path) -> None:
    f = tmp_path / "lengths.txt"
    f.write_text("100\n300\n5000\n200\n\n250\n", encoding="utf-8")
    s = make_setup(seq_len=1000, micro_batch=2, sample_lengths=str(f))
    assert R.micro_batch_lengths(s)[0] == [300, 250]  # 5000 dropped; (100, 300), (200, 250)


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_json_figure_and_its_parts(tmp_path: Path, capsys) -> None:
    args = ["estimate", "llama-3.2-1b", "--seq-len", "1024", "--precision", "bf16", "--recompute", "full",
            "--grad-accum", "4", "--gpu", "A100-SXM-80G", "--json"]
    rc, out, _ = _run(args + ["--sample-lengths", "600:400:50:4000", "--run-steps", "40"], capsys)
    assert rc == 0
    d = json.loads(out)
    rr = d["run_reserve"]
    assert rr["micro_batches"] == 40 and rr["longest_tokens"] <= 1024
    assert d["peak_reserved_over_run_bytes"] == min(rr["capacity_bytes"], d["peak_reserved_bytes"]
                                                    + rr["replay_peak_reserved_bytes"] - rr["replay_uniform_reserved_bytes"])
    assert d["setup"]["sample_lengths"] == "600:400:50:4000" and d["setup"]["run_steps"] == 40
    # every micro-batch at --seq-len: the run figure is the one-shape figure
    f = tmp_path / "same.txt"
    f.write_text("1024\n" * 12, encoding="utf-8")
    rc, out, _ = _run(args + ["--sample-lengths", str(f)], capsys)
    d = json.loads(out)
    assert rc == 0 and d["peak_reserved_over_run_bytes"] == d["peak_reserved_bytes"]
    rc, out, _ = _run(args, capsys)
    assert "peak_reserved_over_run_bytes" not in json.loads(out)


@pytest.mark.parametrize("flags, needle", [
    (["--sample-lengths", "1:2:3"], "MEAN:STD"),
    (["--sample-lengths", "0:5"], "mean must be > 0"),
    (["--sample-lengths", "500:100:600:900"], "outside [MIN, MAX]"),
    (["--run-steps", "5"], "--run-steps needs --sample-lengths"),
    (["--sample-lengths", "/no/such/file.txt"], "no such file"),
    (["--sample-lengths", "5000:10:4000:6000"], "longer than --seq-len"),
])
def test_bad_sample_lengths_one_line(flags: list[str], needle: str, capsys) -> None:
    rc, out, err = _run(["estimate", "llama-3.2-1b", "--seq-len", "1024", *flags], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err and needle in err, err


def test_ms_swift_points_run_lengths_follow_the_script() -> None:
    """run_steps of the ms-swift 2024 benchmark points: one epoch over 4959 samples (max_length <= 2048) or 1000,
    those of at most max_length kept, in micro-batches of batch_size (run_single.py @ 4312aeb2)."""
    data = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "published_points.json").read_text("utf-8"))
    pts = [p for p in data["points"] if p["source"].get("path") == "docs/source_en/LLM/Benchmark.md"]
    assert len(pts) == 27
    for p in pts:
        s = p["setup"]
        dist = R.parse_sample_lengths(s["sample_lengths"])
        n = 4959 if s["seq_len"] <= 2048 else 1000
        assert s["run_steps"] == math.ceil(round(n * R.kept_fraction(dist, s["seq_len"])) / s["micro_batch"]), p["id"]


def test_quadratic_sizes_check_against_a_walk() -> None:
    """The sizes at a length from three walks equal a walk at that length (eager attention: s² scores)."""
    spec, s = build("llama-3.2-1b", seq_len=1024, attn="eager", precision="bf16")
    sz = R._Sizer(record_step_events, spec, s, 0, [100, 1024])
    assert sz.exact_fit
    ev = R._walk_events(record_step_events, spec, s, 0, 777)
    want = [e[2] for e in ev if e[0] == "a"]
    got = sz._sizes(777)[sz.template.alloc_at].tolist()
    assert got == want


def _replay_growths(spec, lengths: list[int], **fields) -> tuple[int, int]:
    """Reserved growth of a run at ``lengths`` over one repeated longest shape (bytes): the traced steps (fake
    tensors, every storage its own allocation) replayed through the run replay's allocator, and the estimate's."""
    import numpy as np

    import trainmem.trace.step as step

    slots: dict[str, int] = {}
    traced: dict[int, tuple] = {}
    for n in sorted(set(lengths)):
        seen: list = []
        orig = step.simulate_lives
        step.simulate_lives = lambda lives, *a, **k: seen.append((list(lives), a)) or orig(lives, *a, **k)
        try:
            step.trace_step(spec, make_setup(engine="torch", precision="bf16", seq_len=n, **fields))
        finally:
            step.simulate_lives = orig
        lives, start = seen[0][0], seen[0][1][0]
        ev: list[tuple] = [("a", f"s{i}", lf.nbytes, 1, 0) for i, lf in enumerate(lives)
                           if lf.nbytes > 0 and lf.born <= start and (lf.died is None or lf.died > start)]
        timed = []
        for i, lf in enumerate(lives):
            if lf.nbytes > 0 and lf.born > start:
                timed.append((lf.born, ("a", f"x{i}", lf.nbytes, 1, 0)))
                if lf.died is not None:
                    timed.append((lf.died, ("f", f"x{i}")))
        timed.sort(key=lambda t: t[0])
        ev = ev + [("m", "forward mb0")] + [e for _, e in timed] + [("m", "optimizer step")]
        t = R._Template(ev, slots)
        sizes = np.zeros(len(ev), np.int64)
        sizes[t.alloc_at] = [ev[i][2] for i in t.alloc_at]
        traced[n] = t.compile(sizes)
    cap, top = 80 * 2**30, [max(lengths)] * len(lengths)
    t_growth = R.replay_run(traced.__getitem__, lengths, 1, cap)[0] - R.replay_run(traced.__getitem__, top, 1, cap)[0]
    s = make_setup(engine="torch", precision="bf16", seq_len=max(lengths), **fields)
    sz = R._Sizer(record_step_events, spec, s, 0, lengths)
    e_growth = R.replay_run(sz.sections, lengths, 1, cap)[0] - R.replay_run(sz.sections, top, 1, cap)[0]
    return t_growth, e_growth


def test_estimate_replay_against_trace_replay() -> None:
    """Consistency, not truth (the allocator simulator is trainmem's own): a tiny Llama (vocab 32,000) traced on
    fake tensors at 128, 256, 192 tokens, each traced step replayed in that order through the same allocator,
    grows reserved memory over one repeated 256-token step; the estimate's replay grows too, by the same rule
    (new segments for the longer micro-batch's blocks), by about as much. Measured: 36 MiB both here; at 1000, 2000,
    1500 tokens 310 vs 310 MiB (amp-bf16 + full recompute 314 vs 310), at 400, 800, 600, 1000, 700 tokens 388 vs
    408 MiB. (While the loss backward's two fp32 gradients were one block in the replay: 186, 190 and 312 MiB.)"""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.trace._specs import LLAMA_TINY, make_spec

    t_growth, e_growth = _replay_growths(make_spec({**LLAMA_TINY, "vocab_size": V}), [128, 256, 192])
    assert t_growth > 0 and e_growth > 0
    assert 0.8 < e_growth / t_growth < 1.25, (e_growth / MiB, t_growth / MiB)


def test_estimate_replay_against_trace_replay_qwen_like_lora() -> None:
    """The ms-swift 2024 points' step (LoRA r8 on q/k/v, dropout 0.05, full recompute) on a 2-layer Llama whose
    vocabulary is 37 x its hidden size (Qwen-7B: 151,936 / 4,096), hidden 1024, vocab 37,888, at the first six
    micro-batch lengths of swift-qwen7b-lora-2048's replayed run: the estimator's blocks (a layer's forward
    temporaries as one spike, its recomputed activations as one block) fragment the cache as the traced step's
    separate tensors do. Measured: trace 818 MiB, estimate 806 MiB. At Qwen-7B's own widths (hidden 4,096, FFN
    11,008, vocab 151,552; 2 and 4 layers; the run's first 40 lengths): trace 7,850 MiB, estimate 7,440 / 7,606 MiB:
    splitting the blocks would add at most ~0.4 GiB, not the ~7 GiB swift-qwen7b-lora-2048 still misses."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.trace._specs import LLAMA_TINY, make_spec

    spec = make_spec({**LLAMA_TINY, "hidden_size": 1024, "intermediate_size": 2752, "num_attention_heads": 8,
                      "num_key_value_heads": 8, "vocab_size": 37 * 1024, "max_position_embeddings": 4096})
    t_growth, e_growth = _replay_growths(spec, [876, 1100, 588, 509, 1085, 1218], lora_rank=8,
                                         lora_targets="q_proj,k_proj,v_proj", lora_dropout=0.05, recompute="full",
                                         attn="sdpa")
    assert t_growth > 0 and e_growth > 0
    assert 0.9 < e_growth / t_growth < 1.1, (e_growth / MiB, t_growth / MiB)


def test_spike_probe_is_the_malloc_free_pair() -> None:
    """A malloc freed at once is replayed as a probe (``CachingAllocator.serves_from_cache``): on random streams
    the probe says 'served' exactly when the pair makes no segment, and the pool is then as it was; on a real step
    the run replay with probes equals the one with every pair replayed."""
    import random

    from trainmem.trace.allocator import CachingAllocator

    rng = random.Random(1)
    a, live = CachingAllocator(), []
    for _ in range(3000):
        if live and rng.random() < 0.45:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            n = rng.choice([rng.randint(1, 2**20), rng.randint(2**20, 40 * MiB)])
            keys, devs = list(a.large.keys) + list(a.small.keys), a.n_device_allocs
            served = a.serves_from_cache(n)
            a.free(a.malloc(n))
            assert served == (a.n_device_allocs == devs)
            if served:
                assert list(a.large.keys) + list(a.small.keys) == keys
            live.append(a.malloc(rng.randint(1, 30 * MiB)))
    spec, s = build("llama-3.2-1b", seq_len=1024, precision="bf16", recompute="full", grad_accum=4)
    sz = R._Sizer(record_step_events, spec, s, 0, [100, 1024])

    def unprobed(n: int) -> tuple:
        def expand(ops: list) -> list:
            out = []
            for o in ops:
                out.extend([[1, o[1], o[2], o[3]], [0, o[1], 0, 0]] if o[0] == 4 else [o])
            return out
        pre, secs, tail = sz.sections(n)
        return expand(pre), {k: expand(v) for k, v in secs.items()}, expand(tail)

    lengths = [random.Random(2).randint(100, 1024) for _ in range(24)]
    assert any(o[0] == 4 for o in sz.sections(500)[1][1])
    assert R.replay_run(sz.sections, lengths, 4, 80 * 2**30) == R.replay_run(unprobed, lengths, 4, 80 * 2**30)


def test_web_reads_no_lengths_file_without_allow_paths(tmp_path: Path) -> None:
    """The web API reads no local file unless started with --allow-paths: a lengths file is refused with the one
    answer, whether it exists or not; MEAN:STD is taken."""
    from trainmem.errors import ConfigError
    from trainmem.web.commands import run

    f = tmp_path / "lengths.txt"
    f.write_text("100\n200\n", encoding="utf-8")
    body = {"model": "llama-3.2-1b", "seq_len": 512, "run_steps": 4}
    answers = []
    for ref in (str(f), str(tmp_path / "missing.txt")):
        with pytest.raises(ConfigError) as err:
            run("estimate", {**body, "sample_lengths": ref})
        answers.append(str(err.value).replace(ref, "REF"))
    assert answers[0] == answers[1] and "reads no local files" in answers[0]
    assert run("estimate", {**body, "sample_lengths": str(f)}, allow_paths=True)["run_reserve"]["micro_batches"] == 2
    assert "peak_reserved_over_run_bytes" in run("estimate", {**body, "sample_lengths": "300:100"})
