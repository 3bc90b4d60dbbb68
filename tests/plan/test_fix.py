"""``plan --fix``: any value the estimator accepts is evaluated as it is, and a refusal says the rule and the numbers.

The two NeMo recipes are NeMo 24.07's Llama 2 pre-training rows on DGX-H100
(https://github.com/NVIDIA/NeMo/blob/8e3d65dcfe35/docs/source/performance/performance_summary.md, Pretraining
table, FP8): LLAMA2-13B on 16 GPUs, GBS 128, MBS 1, seq 4096, TP 1, PP 4, CP 1, VP 10 (8,715 tokens/s/GPU);
LLAMA2-70B on 64 GPUs, GBS 128, MBS 1, seq 4096, TP 4, PP 4, CP 1, VP 20 (1,728 tokens/s/GPU). The knobs the table
leaves out are the recipe's, NeMo-Framework-Launcher tag 24.07 (commit 8325688d83):
launcher_scripts/conf/training/llama/llama2_13b.yaml and llama2_70b.yaml (optim distributed_fused_adam = the
distributed optimizer, activations_checkpoint_granularity null = no recompute, sequence_parallel false for 13B
(tp 1) and true for 70B) run by examples/training/llama/h100/llama2_{13b,70b}_fp8.sh
(global_batch_size=128, fp8=True, fp8_hybrid=True, +optim.grad_sync_dtype=bf16 = a 16-bit gradient buffer).
Before ``--fix`` took any vpp, both were answered "no configuration fits": the planner's space stops at vpp 8.
"""

from __future__ import annotations

import json

import pytest

from trainmem.api import build
from trainmem.cli import main
from trainmem.errors import ConfigError
from trainmem.hardware import parse_cluster
from trainmem.memory import estimate
from trainmem.plan.search import PlanRequest, plan
from trainmem.plan.space import parse_fix
from trainmem.setup import make_setup

GIB = 2**30


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


@pytest.mark.parametrize("model, gpus, fix, setup", [
    ("llama-2-13b", 16, "engine=megatron,tp=1,pp=4,vpp=10,cp=1,zero=1,micro_batch=1,recompute=none,offload=none",
     dict(tp=1, pp=4, vpp=10)),
    ("llama-2-70b", 64, "engine=megatron,tp=4,pp=4,vpp=20,cp=1,zero=1,micro_batch=1,recompute=none,offload=none,sp=true",
     dict(tp=4, pp=4, vpp=20, sp=True)),
])
def test_nemo_llama2_recipes_are_evaluated_and_fit(model: str, gpus: int, fix: str, setup: dict, capsys) -> None:
    """NeMo 24.07's Llama-2-13B (pp 4 × vpp 10) and Llama-2-70B (tp 4 × pp 4 × vpp 20) recipes (module docstring):
    the pinned configuration is the one evaluated, with the estimator's own figure, and it fits an H100 with the 5 %
    margin. dp = GPUs / (tp · pp) = 4 and grad_accum = 128 / (dp · mb) = 32 in both."""
    rc, out, err = run(["plan", model, "--cluster", f"{gpus}xH100-SXM-80G", "--global-batch", "128", "--seq-len", "4096",
                        "--precision", "fp8", "--grad-reduce-16bit", "--fix", fix, "--json"], capsys)
    assert rc == 0, err
    p = json.loads(out)["plans"][0]
    assert (p["tp"], p["pp"], p["vpp"], p["dp"], p["zero"], p["micro_batch"], p["grad_accum"]) == \
        (setup["tp"], 4, setup["vpp"], 4, 1, 1, 32)
    spec, _ = build(model, seq_len=4096)
    est = estimate(spec, make_setup(engine="megatron", precision="fp8", grad_reduce_16bit=True, gpus=gpus, zero=1,
                                    micro_batch=1, grad_accum=32, seq_len=4096, gpu="H100-SXM-80G", **setup))
    assert p["device_total_bytes"] == est.device_total_bytes
    assert est.device_total_bytes + 0.05 * est.peak_reserved_bytes <= est.gpu_memory_bytes


def test_tp3_names_the_heads_and_the_pool(capsys) -> None:
    """Llama-3.1-8B: 32 attention heads, 8 KV heads; 3 divides neither, nor the 8 GPUs. The first clause is the
    estimator's own check (trainmem/setup.py validate_for_model)."""
    for fix in ("engine=megatron,tp=3", "tp=99"):
        rc, out, err = run(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64",
                            "--fix", fix], capsys)
        tp = fix.split("tp=")[1]
        assert rc == 2 and out == ""
        assert err == (f"error: --fix {fix}: tp({tp}) does not divide num_attention_heads(32), nor is it a divisor or a "
                       f"multiple of num_key_value_heads(8); tp({tp}) does not divide the pool's 8 GPUs\n")


def test_a_pinned_configuration_that_does_not_fit_says_what_it_needs(capsys) -> None:
    """torch DDP, 8 × Llama-3.1-8B at micro-batch 4 × 4096 on H100: the estimate's device total + 5 % of its reserved
    memory against the GPU's, and the largest category at the peak (the activations of 4 × 4096 tokens)."""
    fix = "engine=torch,tp=1,pp=1,cp=1,zero=0,recompute=none,offload=none,micro_batch=4"
    rc, out, err = run(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G", "--global-batch", "32",
                        "--seq-len", "4096", "--fix", fix], capsys)
    spec, _ = build("llama-3.1-8b", seq_len=4096)
    est = estimate(spec, make_setup(engine="torch", gpus=8, micro_batch=4, seq_len=4096, gpu="H100-SXM-80G"))
    need = est.device_total_bytes + int(0.05 * est.peak_reserved_bytes)
    top = max(est.breakdown_at_peak_bytes, key=est.breakdown_at_peak_bytes.get)
    assert top == "activations"
    assert rc == 2 and err == (
        f"error: --fix {fix} on 8xH100-SXM-80G: torch dp8 zero0 recompute none mb4×ga1 does not fit: needs "
        f"{_gib(need)} per GPU > {_gib(est.gpu_memory_bytes)} of H100-SXM-80G (device total "
        f"{_gib(est.device_total_bytes)} + 5 % margin of the reserved {_gib(est.peak_reserved_bytes)}); largest at "
        f"the peak: activations {_gib(est.breakdown_at_peak_bytes['activations'])}\n")


@pytest.mark.parametrize("gb, fix, message", [
    (30, "dp=8", "the global batch 30 is not divisible by dp(8)"),
    (32, "dp=3", "dp(3) = 3 does not divide the pool's 8 GPUs"),
    (32, "tp=2,pp=2,cp=1,dp=4", "dp(4) × tp(2) × pp(2) × cp(1) = 16, not the pool's 8 GPUs"),
    (32, "tp=2,pp=1,cp=1,micro_batch=3", "micro_batch(3) does not divide the 8 sequences per replica "
                                         "(global batch 32 / dp(4))"),
    (32, "tp=1,pp=1,cp=1,micro_batch=2,grad_accum=3", "micro_batch(2) × grad_accum(3) × dp(8) = 48, "
                                                      "not the global batch 32"),
    (32, "pp=33", "pp(33) > num_layers(32); pp(33) does not divide the pool's 8 GPUs"),
])
def test_pool_and_batch_refusals_are_exact(gb: int, fix: str, message: str, capsys) -> None:
    rc, out, err = run(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G", "--global-batch", str(gb),
                        "--fix", fix], capsys)
    assert rc == 2 and out == "" and err == f"error: --fix {fix}: {message}\n"


@pytest.mark.parametrize("extra, fix, message", [
    ([], "engine=deepspeed,tp=2",
     "tp/pp/cp are not modelled for the deepspeed engine; use --engine megatron for 3D parallelism"),
    ([], "engine=deepspeed,sp=true", "--sp (sequence parallelism) is a megatron or fsdp2 (with --tp) option"),
    (["--precision", "amp-bf16"], "engine=megatron",
     "amp-bf16 is not a recipe of the megatron engine; use mixed-bf16 or mixed-fp16"),
])
def test_the_estimators_own_reason_when_every_pinned_configuration_is_invalid(extra: list, fix: str, message: str,
                                                                              capsys) -> None:
    rc, out, err = run(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G", "--global-batch", "32", *extra,
                        "--fix", fix], capsys)
    assert rc == 2 and out == ""
    assert err == f"error: --fix {fix} on 8xH100-SXM-80G: no configuration with these pins is valid: {message}\n"


def test_partly_pinned_and_nothing_fits_names_the_closest_or_the_floor(capsys) -> None:
    """Llama-3.1-70B on 8 H100s as DDP: even its model states (16 B per parameter, unsharded) are far over
    80 GB, so every configuration is bounded out; the answer is the planner's floor, > 16 × 70.6e9 B = 1052 GiB."""
    rc, _, err = run(["plan", "llama-3.1-70b", "--cluster", "8xH100-SXM-80G", "--global-batch", "32",
                      "--seq-len", "4096", "--fix", "engine=torch"], capsys)
    head = ("error: --fix engine=torch on 8xH100-SXM-80G: none of the configurations with these pins fits: the least "
            "memory any of them can use (model states and in-flight activations, the planner's floor) needs ")
    assert rc == 2 and err.startswith(head) and err.endswith(" GiB per GPU with the 5 % margin > 79.19 GiB of "
                                                             "H100-SXM-80G\n")
    assert float(err[len(head):].split(" GiB")[0]) > 16 * 70.55e9 / GIB
    assert "no configuration fits" not in err


def test_setup_pins_are_evaluated_as_the_estimator_takes_them() -> None:
    """sp=false (Megatron TP without sequence parallelism, Korthikanti et al. 2022's baseline), an uneven
    stage_layers split and megatron_deepspeed each reach the estimate unchanged; without SP the norm/dropout
    activations are not split over tp, so the peak is higher."""
    spec, _ = build("llama-3.2-1b", seq_len=2048)  # 16 layers
    pool = parse_cluster("8xH100-SXM-80G")

    def best(fix: str):
        return plan(PlanRequest(spec=spec, cluster=pool, global_batch=32, seq_len=2048, fixed=parse_fix(fix), top=1)).plans[0]

    base = "engine=megatron,tp=2,pp=4,vpp=1,cp=1,zero=1,micro_batch=1,recompute=none,offload=none"
    with_sp, without = best(base), best(base + ",sp=false")
    assert with_sp.shares[0].setup.sp and not without.shares[0].setup.sp
    assert without.most_loaded.memory.peak_allocated_bytes > with_sp.most_loaded.memory.peak_allocated_bytes
    assert without.to_dict()["sp"] is False
    uneven = best(base + ",stage_layers=3/5/5/3")
    assert uneven.to_dict()["layers_per_stage"] == [3, 5, 5, 3]
    s = make_setup(**{**uneven.shares[0].setup.model_dump(exclude={"notes"})})
    assert uneven.shares[0].memory.device_total_bytes == estimate(spec, s).device_total_bytes
    ds = plan(PlanRequest(spec=spec, cluster=pool, global_batch=32, seq_len=2048,
                          fixed=parse_fix("megatron_deepspeed=true"), top=3)).plans
    assert ds and all(p.shares[0].setup.megatron_deepspeed and p.knobs.pp > 1 and p.knobs.vpp == 1 for p in ds)


def test_fix_parses_every_setup_pin() -> None:
    assert parse_fix("sp=false,megatron_deepspeed=true,stage_layers=3/5/5/3,attn=flash,recompute_layers=2") == {
        "sp": False, "megatron_deepspeed": True, "stage_layers": (3, 5, 5, 3), "attn": "flash", "recompute": "block-2"}
    assert parse_fix("no_sp=true") == {"sp": False}
    assert parse_fix("recompute=full,recompute_layers=3") == {"recompute": "block-3"}
    for bad, msg in [("sp=maybe", "sp takes true or false"), ("attn=foo", "attn 'foo' is not one of sdpa, flash, eager"),
                     ("stage_layers=3,5", "is not key=value"), ("seq_len=8", "give it with --seq-len"),
                     ("recompute=selective,recompute_layers=2", "needs recompute=full")]:
        with pytest.raises(ConfigError, match=msg):
            parse_fix(bad)


@pytest.mark.parametrize("precision, engines", [
    ("amp-bf16", {"torch", "fsdp2"}), ("mixed-bf16", {"deepspeed", "megatron"}), ("bf16", None),
])
def test_plan_takes_the_estimators_recipe_names(precision: str, engines: set | None, capsys) -> None:
    """A recipe name keeps the engines whose recipes hold it (trainmem/setup.py RECIPES) and every plan runs that
    recipe; the family name bf16 maps to each engine's own recipe as before."""
    rc, out, err = run(["plan", "llama-3.2-1b", "--cluster", "8xH100-SXM-80G", "--global-batch", "32",
                        "--seq-len", "2048", "--precision", precision, "--top", "8", "--json"], capsys)
    assert rc == 0, err
    plans = json.loads(out)["plans"]
    assert plans
    for p in plans:
        if engines is None:
            assert p["precision"] == ("amp-bf16" if p["engine"] in ("torch", "fsdp2") else "mixed-bf16")
        else:
            assert p["engine"] in engines and p["precision"] == precision
    rc, _, err = run(["plan", "llama-3.2-1b", "--cluster", "8xH100-SXM-80G", "--global-batch", "32",
                      "--precision", "amp-fp16", "--export", "megatron", "-o", "out"], capsys)
    assert rc == 2 and err == ("error: --precision amp-fp16 is a recipe of fsdp2, torch; the engines searched "
                               "(megatron) do not run it\n")


def test_sizing_shows_its_plan_and_the_host_ram_it_needs(capsys) -> None:
    """Llama-3.1-8B (8,030,261,248 parameters) on one RTX 4090 trains only with FSDP2's CPUOffloadPolicy, which
    keeps the fp32 parameters, gradients and Adam's two moments on the host: 16 B per parameter = 119.66 GiB. With
    --host-memory 64GiB that plan is refused and the answer is a pool that needs no offload."""
    argv = ["plan", "llama-3.1-8b", "--min-gpus", "--gpu", "RTX-4090-24G", "--global-batch", "32"]
    rc, out, _ = run(argv + ["--json"], capsys)
    d = json.loads(out)["min_gpus"]
    assert rc == 0 and d["gpus"] == 1 and d["plan"]["offload"] == "optimizer+params"
    assert d["host_memory_bytes"] == 8_030_261_248 * 16
    rc, out, _ = run(argv, capsys)
    out = " ".join(out.split())  # (rich wraps the line at the terminal's width)
    assert rc == 0 and "plan: fsdp2 dp1 FSDP2 reshard_after_forward, offload optimizer+params, recompute full" in out
    assert "host RAM per node 119.7 GiB" in out
    rc, out, _ = run(argv + ["--host-memory", "64GiB", "--json"], capsys)
    d = json.loads(out)["min_gpus"]
    assert rc == 0 and d["gpus"] > 1 and d["host_memory_bytes"] <= 64 * GIB
    rc, _, err = run(argv + ["--host-memory", "lots"], capsys)
    assert rc == 2 and err.startswith("error: --host-memory: 'lots' is not a memory size")
