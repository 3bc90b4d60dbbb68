"""Host RAM per node (issue 18 item 4): offload plans are checked against the node's host RAM — ``--host-memory``,
else the cluster spec's ``host_memory``, else the catalog default of the GPU type (``gpus.json``
``host_memory_gib``) — and refused with the numbers.

Hand-computed: Llama-3.1-8B has 8,030,261,248 parameters; on one RTX 4090 it trains only with FSDP2's
CPUOffloadPolicy (offload optimizer+params), which keeps the fp32 parameters, gradients and Adam's two moments
on the host: 16 B per parameter = 128,484,179,968 B = 119.66 GiB for the node's one rank. 119 GiB
(127,775,277,056 B) is just below that, 120 GiB (128,849,018,880 B) just above, and the catalog's 128 GiB for a
GeForce box holds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem.cli import main
from trainmem.errors import ConfigError
from trainmem.hardware import get_gpu, list_gpus, parse_cluster

GIB = 2**30
NEED = 8_030_261_248 * 16  # bytes on the host: FSDP2 CPUOffloadPolicy, fp32 params + grads + 2 Adam moments
ARGV = ["plan", "llama-3.1-8b", "--global-batch", "32"]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_hand_computed_need_sits_between_119_and_120_gib() -> None:
    assert 119 * GIB < NEED < 120 * GIB < 128 * GIB


@pytest.mark.parametrize("gpu, gib", [
    ("H100-SXM-80G", 2048),   # DGX H100: 2 TB; AWS p5.48xlarge 2,048 GiB
    ("H200-SXM-141G", 2048),  # DGX H200: 2 TB (32 x 64 GB)
    ("B200-180G", 2048),      # DGX B200: 2 TB using 32 DIMMs (upgradable to 4 TB)
    ("A100-SXM-40G", 1024),   # DGX A100 (320 GB): 1 TB; AWS p4d.24xlarge 1,152 GiB: the smaller
    ("L40S-48G", 1536),       # AWS g6e.48xlarge: 8 L40S, 1,536 GiB
    ("A10G-24G", 768),        # AWS g5.48xlarge: 8 A10G, 768 GiB
    ("T4-16G", 384),          # AWS g4dn.metal: 8 T4, 384 GiB
    ("V100-SXM2-16G", 488),   # AWS p3.16xlarge: 488 GiB
    ("MI300X-192G", 1850),    # Azure ND MI300X v5: 1,850 GiB
])
def test_cited_catalog_defaults(gpu: str, gib: int) -> None:
    g = get_gpu(gpu)
    assert g.host_memory_bytes == gib * GIB and not g.host_memory_assumed
    assert f"{gib:,}" in g.host_memory_note or f"{gib // 1024} TB" in g.host_memory_note or "512 GB" in g.host_memory_note


def test_every_row_has_a_default_with_its_source_or_its_assumption() -> None:
    for g in list_gpus():
        assert g.host_memory_bytes and g.host_memory_bytes >= 64 * GIB, g.name
        assert g.host_memory_note.startswith("assumed") == g.host_memory_assumed, g.name
        if not g.host_memory_assumed:  # a datasheet or an instance page, by address or by repository path
            assert "https://" in g.host_memory_note or "/" in g.host_memory_note, g.name
    assert get_gpu("RTX-4090-24G").host_memory_bytes == 128 * GIB and get_gpu("RTX-4090-24G").host_memory_assumed


def test_the_cluster_spec_gives_host_memory(tmp_path: Path) -> None:
    g = parse_cluster("2xRTX-4090").groups[0]
    assert (g.host_memory_bytes, g.host_memory_from) == (128 * GIB, "catalog default for RTX-4090-24G, assumed")
    g = parse_cluster("8xH100[host_memory=1TiB]").groups[0]
    assert (g.host_memory_bytes, g.host_memory_from) == (1024 * GIB, "cluster spec")
    assert parse_cluster("8xH100").groups[0].host_memory_from == "catalog default for H100-SXM-80G"
    f = tmp_path / "pool.toml"
    f.write_text('[[groups]]\ngpu = "A100"\ncount = 8\nhost_memory = "512GiB"\n'
                 '[[groups]]\ngpu = "RTX-3090"\ncount = 4\nhost_memory = 68719476736\n')
    a, b = parse_cluster(str(f)).groups
    assert (a.host_memory_bytes, a.host_memory_from) == (512 * GIB, "cluster file groups[1]")
    assert (b.host_memory_bytes, b.host_memory_from) == (64 * GIB, "cluster file groups[2]")
    with pytest.raises(ConfigError, match=r"^cluster: '8xH100\[host_memory=lots\]': host_memory: 'lots' is not a "):
        parse_cluster("8xH100[host_memory=lots]")
    f.write_text('[[groups]]\ngpu = "A100"\ncount = 8\nhost_memory = true\n')
    with pytest.raises(ConfigError, match=r"^cluster: groups\[1\]: host_memory must be a size such as 1TiB"):
        parse_cluster(str(f))


def test_an_offload_plan_just_above_the_node_is_refused_with_the_numbers(capsys) -> None:
    rc, _, err = run(ARGV + ["--cluster", "1xRTX-4090[host_memory=119GiB]"], capsys)
    assert rc == 2
    assert err == ("error: no configuration of llama-3.1-8b fits 1xRTX-4090[host_memory=119GiB]: the ones that fit "
                   "the GPUs offload to the host; the least of them, fsdp2 dp1 zero3 recompute full offload "
                   "optimizer+params mb1×ga32, needs 119.7 GiB host RAM per node, the node has 119.0 GiB (cluster "
                   "spec; --host-memory SIZE or a cluster spec's [host_memory=SIZE] if it has more)\n")


def test_just_below_fits_and_the_assumptions_say_where_the_host_ram_came_from(capsys) -> None:
    rc, out, _ = run(ARGV + ["--cluster", "1xRTX-4090[host_memory=120GiB]", "--json"], capsys)
    d = json.loads(out)
    assert rc == 0 and d["plans"][0]["offload"] == "optimizer+params"
    assert any(a.startswith("RTX-4090-24G: 120 GiB host RAM per node (cluster spec)") for a in d["assumptions"])
    rc, out, _ = run(ARGV + ["--cluster", "1xRTX-4090", "--json"], capsys)  # the catalog's 128 GiB holds it
    d = json.loads(out)
    assert rc == 0 and d["plans"][0]["offload"] == "optimizer+params"
    p = d["plans"][0]  # each plan says what it puts on a node's host
    assert p["host_memory_bytes"] == p["per_gpu_type"]["RTX-4090-24G"]["host_memory_bytes"] == NEED
    rc, out, _ = run(ARGV + ["--cluster", "1xRTX-4090"], capsys)
    assert "host RAM per node 119.7 GiB" in " ".join(out.split())
    assert any(a.startswith("RTX-4090-24G: 128 GiB host RAM per node (catalog default for RTX-4090-24G, assumed)")
               for a in d["assumptions"])


def test_host_memory_flag_wins_over_the_cluster_spec(capsys) -> None:
    rc, out, _ = run(ARGV + ["--cluster", "1xRTX-4090[host_memory=64GiB]", "--host-memory", "120GiB", "--json"],
                     capsys)
    d = json.loads(out)
    assert rc == 0 and any(a.startswith("RTX-4090-24G: 120 GiB host RAM per node (--host-memory)")
                           for a in d["assumptions"])
    rc, _, err = run(ARGV + ["--cluster", "1xRTX-4090[host_memory=1TiB]", "--host-memory", "119GiB"], capsys)
    assert rc == 2 and "the node has 119.0 GiB (--host-memory;" in err


def test_pinned_offload_names_the_host_not_the_gpu(capsys) -> None:
    pins = "engine=fsdp2,tp=1,pp=1,cp=1,zero=3,recompute=full,offload=optimizer+params,micro_batch=1"
    rc, _, err = run(ARGV + ["--cluster", "1xRTX-4090[host_memory=64GiB]", "--fix", pins], capsys)
    assert rc == 2 and err == (f"error: --fix {pins} on 1xRTX-4090[host_memory=64GiB]: fsdp2 dp1 zero3 recompute full "
                               "offload optimizer+params mb1×ga32 fits the GPU but needs 119.7 GiB host RAM per node, "
                               "the node has 64.0 GiB (cluster spec; --host-memory SIZE or a cluster spec's "
                               "[host_memory=SIZE] if it has more)\n")
    rc, _, err = run(ARGV + ["--cluster", "1xRTX-4090[host_memory=64GiB]", "--fix", "engine=fsdp2"], capsys)
    assert rc == 2 and ("the configurations with these pins that fit the GPU offload to the host; the least of them, "
                        "fsdp2 dp1 zero3 recompute full offload optimizer+params mb1×ga32, needs 119.7 GiB") in err


def test_sizing_answers_name_the_node_they_were_checked_against(capsys) -> None:
    argv = ["plan", "llama-3.1-8b", "--min-gpus", "--gpu", "RTX-4090-24G", "--global-batch", "32"]
    rc, out, _ = run(argv + ["--json"], capsys)
    d = json.loads(out)["min_gpus"]
    assert rc == 0 and d["gpus"] == 1 and d["host_memory_bytes"] == NEED
    assert (d["node_host_memory_bytes"], d["node_host_memory_from"]) == (128 * GIB,
                                                                         "catalog default for RTX-4090-24G, assumed")
    rc, out, _ = run(argv, capsys)
    out = " ".join(out.split())
    assert "host RAM per node 119.7 GiB the node has 128 GiB host RAM (catalog default for RTX-4090-24G, assumed)" in out
    rc, out, _ = run(argv + ["--host-memory", "119GiB", "--json"], capsys)
    d = json.loads(out)["min_gpus"]
    assert rc == 0 and d["gpus"] > 1 and d["host_memory_bytes"] <= 119 * GIB
    assert (d["node_host_memory_bytes"], d["node_host_memory_from"]) == (119 * GIB, "--host-memory")


def test_the_python_api_takes_host_memory() -> None:
    import trainmem
    p = trainmem.plan("llama-3.1-8b", cluster="1xRTX-4090", global_batch=32, host_memory="120GiB")
    assert any(a.startswith("RTX-4090-24G: 120 GiB host RAM per node (--host-memory)") for a in p.assumptions)
    with pytest.raises(ConfigError, match="the node has 119.0 GiB"):
        trainmem.plan("llama-3.1-8b", cluster="1xRTX-4090", global_batch=32, host_memory=119 * GIB)
    with pytest.raises(ConfigError, match=r"^--host-memory must be > 0, got 0$"):
        trainmem.plan("llama-3.1-8b", cluster="1xRTX-4090", global_batch=32, host_memory=0)
