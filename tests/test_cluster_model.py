"""The GPU model and the report for v_once placement="cluster" (issue 18 item 2): descriptor, occupancy,
terms, CLI, and measured rows picked up by `fa-traffic validate` with no code change."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from counting import cluster
from gpumodel import cluster_model as cm
from gpumodel import cluster_verdict as cv
from counting import closed_forms as cf
from gpumodel import gpu_model as gm
from analysis.cli import main
from gpumodel.descriptors import describe, kernel_names

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def constants(monkeypatch):
    """Replace the cluster constants (the probe's or the defaults) for one test."""
    original = cm.load_constants
    original.cache_clear()
    base = dict(original())
    # a committed probe's per-cluster-size values win over the single constants: a test that sets one
    # constant drops them, so its value is the one used
    for key in ("dsmem_bytes_per_clk_by_cs", "barrier_cycles_by_cs"):
        base.pop(key, None)

    def set_(**kw):
        monkeypatch.setattr(cm, "load_constants", lambda: dict(base, **kw))
    yield set_
    original.cache_clear()


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n_k", [512, 2048, 8192, 16384])
def test_descriptor_follows_the_plan(d, n_k):
    desc = describe("v_once_cluster", d, "fp16", False, n_q=4096, n_k=n_k)
    p = cluster.plan(n_k, d)
    assert desc.cluster_size == p.cluster_size and desc.smem_bytes == p.smem_bytes
    assert (desc.block_q, desc.block_k, desc.path, desc.grid, desc.f) == (64, 64, "wgmma", "clusters", "cluster")
    assert desc.ctas_per_sm == (1 if p.smem_bytes > 228 * 1024 // 2 - 1024 else 2)
    assert "v_once_cluster" in kernel_names()


def test_no_cluster_holds_the_row_is_a_value_error():
    with pytest.raises(ValueError, match="no cluster of up to 16 CTAs.*at most 21,504"):
        describe("v_once_cluster", 128, n_q=32768)
    with pytest.raises(ValueError, match="d = 64 or 128"):
        describe("v_once_cluster", 96)
    with pytest.raises(ValueError, match="fp16/bf16"):
        describe("v_once_cluster", 64, "fp32")


def test_active_clusters_are_whole_gpcs():
    """cudaOccupancyMaxActiveClusters' rule: a cluster within one GPC (132 SMs in 8 GPCs)."""
    gpcs = cm.DEFAULTS["gpc_sms"]
    assert sum(gpcs) == 132 and len(gpcs) == 8
    got = {cs: cm.active_clusters(cs, 1, gpcs) for cs in cluster.CLUSTER_SIZES}
    assert got == {1: 132, 2: 66, 4: 32, 8: 16, 16: 8}
    assert all(cs * n <= 132 for cs, n in got.items())
    assert cm.active_clusters(16, 2, gpcs) == 16


def test_prediction_has_cluster_terms_and_waves_of_clusters():
    b, h, n, d = 1, 16, 16384, 128
    p = gm.predict("v_once_cluster", b, h, n, None, d)
    desc = describe("v_once_cluster", d, n_q=n)
    assert desc.cluster_size == 16
    assert p.terms["dsmem"] > 0 and p.terms["sync"] > 0 and p.time_s > 0
    q_blocks = b * h * n // 64
    assert p.ctas == q_blocks * 16
    assert p.waves == pytest.approx(q_blocks / cm.active_clusters(16, desc.ctas_per_sm))
    # "exposed": the one consumer warpgroup's unhidden latency per tile (cluster_model), a term the bound may name too
    assert p.bound in ("tensor", "softmax", "smem", "latency", "l2", "dram", "dsmem", "sync", "exposed")


def test_levels_count_the_clusters_q_rereads_and_no_f():
    b, h, n, d = 2, 8, 8192, 64
    desc = describe("v_once_cluster", d, n_q=n)
    work = gm.prepare(desc, b, h, n, n, d)
    tr = cf.counts("v_once", b, h, n, n, d, block_q=64, block_k=64, placement="cluster", rescale="lazy",
                   sram_bytes=cluster.SMEM_PER_CTA)
    assert work.traffic.as_dict() == tr.as_dict() and tr.cluster_size == desc.cluster_size
    assert tr.reads["Q"] == desc.cluster_size * b * h * n * d and "f" not in tr.reads
    assert work.levels.l2_bytes == tr.hbm_bytes
    assert work.levels.dram_bytes <= 1.05 * work.levels.compulsory_bytes  # no f byte reaches DRAM


def test_dsmem_and_barrier_constants_move_the_prediction(constants):
    constants()  # the single constants (a probe's per-size values dropped)
    rate = cm.load_constants()["dsmem_bytes_per_clk"]
    base = gm.predict("v_once_cluster", 1, 16, 16384, None, 128)
    constants(dsmem_bytes_per_clk=rate / 8)
    slow = gm.predict("v_once_cluster", 1, 16, 16384, None, 128)
    assert slow.terms["dsmem"] == pytest.approx(8 * base.terms["dsmem"]) and slow.time_s > base.time_s
    constants(barrier_cycles=0.0, dsmem_bytes_per_clk=1e9)
    free = gm.predict("v_once_cluster", 1, 16, 16384, None, 128)
    assert free.terms["sync"] == 0 and free.time_s < base.time_s


def test_busiest_rank_sets_a_causal_clusters_time():
    """Causal: the kernel splits a Q block's visible key blocks evenly over the ranks, so a cluster lasts
    ceil(visible / CS) tiles (its rank 0's share); in launch order, the longest Q block first
    (v_once_cluster.cu: m_block = n_qblocks - 1 - q_blk)."""
    desc = describe("v_once_cluster", 64, causal=True, n_q=16384)
    assert desc.causal_order == "heaviest_first"
    work = gm.prepare(desc, 1, 1, 16384, 16384, 64, causal=True)
    cs = cluster.plan(16384, 64).cluster_size
    assert work.cta_tiles == [-(-(i + 1) // cs) for i in reversed(range(256))]
    assert work.tiles == sum(i + 1 for i in range(256))


def test_small_batch_heads_split_keys_into_more_ctas():
    """B·H = 1: fa2_wgmma has Tr CTAs; the cluster kernel Tr·CS, the parallelism FA2 lacks (the measurement
    decides whether it pays; the model only states both)."""
    fa2 = gm.predict("fa2_wgmma", 1, 1, 4096, None, 128)
    vc = gm.predict("v_once_cluster", 1, 1, 4096, None, 128)
    assert vc.ctas > 2 * fa2.ctas and fa2.ctas < 132


def test_probe_file_replaces_the_defaults(tmp_path, monkeypatch):
    probe = tmp_path / "cluster_probe.json"
    probe.write_text(json.dumps({"device": "NVIDIA H200", "gpc_sms": [16] * 8 + [4], "dsmem_bytes_per_clk": 20.5,
                                 "barrier_cycles": 600}))
    monkeypatch.setattr(cm, "PROBE_FILE", probe)
    cm.load_constants.cache_clear()
    try:
        k = cm.load_constants()
        assert k["dsmem_bytes_per_clk"] == 20.5 and k["barrier_cycles"] == 600 and "cluster_probe.json" in k["source"]
        assert cm.active_clusters(16) == 8 and cm.active_clusters(4) == 33
        probe.write_text(json.dumps({"device": "H200", "dsmem_bytes_per_clk": 10.0, "dsmem_bytes_per_clk_by_cs": {"16": 5.0},
                                     "max_active_clusters_by_cs": {"16": 7}}))
        cm.load_constants.cache_clear()
        assert cm.active_clusters(16) == 7 and cm.active_clusters(16, 2) == 16  # measured at 1 CTA/SM only
        desc = describe("v_once_cluster", 128, n_q=16384)
        assert cm.cluster_costs(desc, 128, 1600.0)["dsmem"] == pytest.approx(1600 / 16 / 5.0)
    finally:
        cm.load_constants.cache_clear()


def test_predict_cli(capsys):
    rc, out, err = _run(capsys, "predict", "--kernel", "v_once_cluster", "--seq-len", "2k,8k", "--head-dim", "64")
    assert rc == 0 and "t DSMEM" in out and "v_once_cluster" in out
    rc, out, err = _run(capsys, "predict", "--kernel", "v_once_cluster", "--seq-len", "8k", "--head-dim", "128",
                        "--format", "json")
    rec = json.loads(out)[0]
    tr = cf.counts("v_once", rec["batch"], rec["heads"], 8192, 8192, 128, placement="cluster", rescale="lazy",
                   sram_bytes=cluster.SMEM_PER_CTA)  # at predict's default B, H (the benchmarks' full GPU)
    assert rc == 0 and rec["dsmem_bytes"] == tr.dsmem_total_bytes > 0
    rc, out, err = _run(capsys, "predict", "--kernel", "v_once_cluster", "--seq-len", "64k", "--head-dim", "64")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "no cluster of up to 16 CTAs" in err


def test_report_placement_cluster(capsys):
    rc, out, err = _run(capsys, "report", "--placement", "cluster", "--variant", "v_once", "--format", "json")
    assert rc == 0, err
    recs = json.loads(out)
    assert [r["label"] for r in recs] == ["v_once_cluster_lazy"] * 3
    for r in recs:
        assert r["gpu_model"]["kernel"] == "v_once_cluster" and (r["block_q"], r["block_k"]) == (64, 64)
        tr = cf.counts("v_once", r["batch"], r["heads"], r["seq_q"], r["seq_k"], 64, block_q=64, block_k=64, placement="cluster",
                       rescale="lazy", sram_bytes=r["sram_bytes"])
        assert r["cluster_size"] == tr.cluster_size == cluster.plan(r["seq_k"], 64).cluster_size
        assert r["dsmem_bytes"] == tr.dsmem_bytes and r["fits"]
        assert r["f_row"]["placement"] in ("sram", "cluster")
    assert [r["f_row"]["placement"] for r in recs] == ["sram", "cluster", "cluster"]


def test_report_says_where_each_placement_applies(capsys):
    rc, out, _ = _run(capsys, "report", "--seq-len", "1k,4k,64k")
    assert rc == 0
    assert "DSMEM" not in out.splitlines()[1]  # no cluster row, no DSMEM column
    rc, out2, _ = _run(capsys, "report", "--placement", "cluster", "--seq-len", "4k")
    assert rc == 0 and "DSMEM" in out2.splitlines()[1]
    line = next(s for s in out.splitlines() if s.startswith("v_once f row"))
    assert "N=1024 d=64 sram" in line and "N=4096 d=64 cluster (4 CTAs)" in line and "N=65536 d=64 hbm" in line


@pytest.mark.parametrize("argv,match", [
    (["report", "--placement", "cluster", "--seq-len", "64k"], "no cluster of up to 16 CTAs holds"),
    (["report", "--placement", "cluster", "--rescale", "eager"], "lazily by construction"),
    (["report", "--placement", "cluster,sram", "--rescale", "eager"], "lazily by construction"),
])
def test_report_cluster_errors_exit_2(capsys, argv, match):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "" and match in err and err.count("\n") == 1


def test_validate_picks_up_cluster_bench_rows(tmp_path, monkeypatch):
    """A committed cluster_bench*.json (bench_tc's row format) is validated like any kernel's cells."""
    from gpumodel import measured, validate as val

    rows = [dict(kernel=k, b=1, h=16, n=n, d=128, dtype="float16", causal=False, median_ms=ms, ok=True)
            for k, n, ms in (("v_once_cluster", 4096, 1.0), ("fa2_wgmma", 4096, 0.5), ("v_once_cluster", 8192, 3.0))]
    (tmp_path / "cluster_bench_h200.json").write_text(json.dumps({"meta": {}, "rows": rows}))
    monkeypatch.setattr(measured, "RESULTS", tmp_path)
    got = [r for r in val.rows() if r["source"] == "cluster_bench_h200.json"]
    vc = [r for r in got if r["kernel"] == "v_once_cluster"]
    assert len(vc) == 2 and all(r["band"] == val.TC_BAND and not r["train"] for r in vc)
    assert all(r["model"] > 0 and r["ratio"] == pytest.approx(r["model"] / r["measured"]) for r in vc)
    assert val.ranking(got)["pairs"] == 1  # the cluster kernel against fa2_wgmma in the same run


def test_ncu_rows_map_to_the_cluster_kernel():
    from gpumodel.measured import NCU_KERNELS, _kernel_of

    assert _kernel_of("v_once_cluster") == ("v_once_cluster", {})
    name = "void v_once_cluster_fwd<128, 16>(CUtensorMap_st, ...)"
    assert next(fam for pat, fam in NCU_KERNELS if pat in name) == "v_once_cluster"
    assert next(fam for pat, fam in NCU_KERNELS if pat in "v_once_tc_fwd_kernel") == "v_once_tc"


def test_cluster_model_path_imports_no_torch():
    code = ("import sys, io, contextlib\nfrom analysis.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()): main(['report', '--placement', 'cluster'])\n"
            "from gpumodel import gpu_model\n"
            "gpu_model.predict('v_once_cluster', 1, 16, 8192, None, 128)\n"
            "print('torch' in sys.modules, 'cupy' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False"]


def test_verdict_rows_state_both_kernels_per_cell():
    rows = cv.verdict_rows(dtypes=("fp16",), dims=(64,), causal=(False,))
    assert {r["n"] for r in rows} == set(cv.GRID_N)
    for r in rows:
        assert r["ratio"] == pytest.approx(r["cluster_ms"] / r["fa2_ms"])
        assert r["cluster_size"] == cluster.plan(r["n"], 64).cluster_size
        assert 0 <= r["dsmem_share"] < 1 and 0 <= r["sync_share"] < 1
    assert any(r["batch"] * r["heads"] <= 16 for r in rows)


def test_exposed_latency_is_fitted_on_the_training_split_only():
    """The one fitted cluster constant: refitting on the training cells reproduces the committed value, the
    training split holds only fp16 d = 64 non-causal cells, and every banded held-out cell is in band."""
    from gpumodel import validate
    from gpumodel.measured import bench_cells

    train = [c for c in bench_cells() if cm.is_train(c)]
    if not train:
        pytest.skip("no committed cluster_bench.json")
    assert {(c["dtype"], c["d"], c["causal"]) for c in train} == {("fp16", 64, False)}
    assert cv.fit_exposed(train)["exposed_cycles_per_tile"] == pytest.approx(cm.exposed_cycles_per_tile(), abs=1.0)
    held = [r for r in validate.rows() if r["kernel"] == "v_once_cluster" and r["quantity"] == "time"
            and r.get("band") and not r["train"]]
    assert held and all(r["in_band"] for r in held), [(r["n"], r["d"], r["ratio"]) for r in held if not r["in_band"]]
