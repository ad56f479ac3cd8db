"""The local-memory level (gpumodel/local_memory.py): register spills written from L1 to the L2."""
from __future__ import annotations

import json
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpumodel import local_memory as lm
from gpumodel.descriptors import describe
from counting.gpus import get_gpu
from gpumodel.levels import levels
from gpumodel.measured import RESULTS, read_ncu_csv
from gpumodel.validate import L2_BAND

LEVELS_CSV = RESULTS / "ncu_levels.csv"
needs_csv = pytest.mark.skipif(not LEVELS_CSV.exists(), reason="results/ncu_levels.csv not committed")

# two branches of one masked step store the same frame slots; a prologue stores two more
SASS = """
        //## File "/x/kernels/cuda/fa2_tc.cu", line 40
        /*0010*/                   STL [R1], RZ ;
        /*0020*/                   STL [R1+0x4], RZ ;
        //## File "/x/tc_fa2.cuh", line 152 inlined at "/x/fa2_tc.cu", line 215
        //## File "/x/fa2_tc.cu", line 215
        /*0030*/                   STL [R1+0x8], R96 ;
        /*0040*/                   STL.64 [R1+0xc], R96 ;
        /*0050*/               @P0 BRA `(.L_x_1) ;
        /*0060*/                   STL [R1+0x8], R73 ;
        /*0070*/                   STL.64 [R1+0xc], R74 ;
        //## File "/x/fa2_tc.cu", line 217
        /*0080*/                   STL.128 [R1], R148 ;
        /*0090*/                   LDL R3, [R1] ;
"""


def test_spill_sites_count_distinct_frame_bytes():
    from lab.spill_sites import classify

    out = classify(SASS, {"masked": 215, "unmasked": 217})
    assert out["cta"] == 8  # [R1], [R1+4]
    assert out["masked"] == 12  # 4 + 8 bytes, on either branch: run once per step
    assert out["unmasked"] == 16
    assert out["static"] == 4 + 4 + 4 + 8 + 4 + 8 + 16 and out["stl"] == 7


def test_every_spilling_build_is_placed():
    """Each fa2_tc build ptxas reports spill stores for is in tc_spills.json; its STLs add up to the spill
    stores of the same compile (tc_resources.json came from the GPU machine's NVRTC: a build may differ)."""
    resources = json.loads((RESULTS / "tc_resources.json").read_text())
    placed = {json.dumps(r["defines"], sort_keys=True): r for r in json.loads((RESULTS / "tc_spills.json").read_text())["rows"]}
    for r in resources:
        if r["kernel"] != "fa2_tc":
            continue
        row = placed.get(json.dumps(r["defines"], sort_keys=True))
        if r["spill_stores"]:
            assert row and row["stl_bytes_static"] == row["spill_stores"]
            assert max(row["stl_bytes_masked_step"], row["stl_bytes_unmasked_step"]) <= row["local_bytes"]
        else:
            assert row is None


def test_descriptors_carry_the_spills():
    d128 = describe("fa2_tc", 128)
    assert (d128.local_step_bytes, d128.local_masked_step_bytes, d128.local_cta_bytes) == (16, 16, 16)
    d64 = describe("fa2_tc", 64, "bf16")
    assert (d64.local_step_bytes, d64.local_masked_step_bytes) == (0, 52)
    for name in ("fa2_wgmma", "sdpa_cudnn", "v_once_tc"):
        assert describe(name, 128).local_step_bytes == 0
    assert describe("sdpa_flash", 128).local_step_bytes > 0


@given(n_q=st.integers(1, 5000), n_k=st.integers(1, 5000), causal=st.booleans(),
       bq=st.sampled_from([64, 128]), bk=st.sampled_from([48, 64, 128]))
def test_steps_split_the_visited_tiles(n_q, n_k, causal, bq, bk):
    from counting.tiling import Tiling, cdiv

    desc = describe("fa2_tc", 128)
    desc = desc.__class__(**dict(desc.as_dict(), block_q=bq, block_k=bk))
    plain, masked, ctas = lm.steps(desc, n_q, n_k, causal)
    t = Tiling(n_q, n_k, bq, bk, causal)
    assert plain + masked == sum(len(t.k_blocks(i)) for i in range(t.t_r)) and ctas == cdiv(n_q, bq)
    if not causal:  # only the Nk tail is masked: one block per Q block, or none
        assert masked == (t.t_r if n_k % bk else 0)


@needs_csv
def test_fa2_tc_spill_writes_match_ncu_exactly():
    """Nothing fitted: the SASS-derived bytes predict the SM-side write bytes beyond O and lse."""
    gpu = get_gpu("h200")
    checked = 0
    for c in read_ncu_csv(LEVELS_CSV):
        if c["kernel"] != "fa2_tc":
            continue
        desc = describe("fa2_tc", c["d"], c["dtype"], c["causal"], n_q=c["n_q"], n_k=c["n_k"], **c["options"])
        lv = levels(desc, gpu, c["batch"], c["heads"], c["n_q"], c["n_k"], c["d"], c["dtype"], c["causal"])
        out = c["batch"] * c["heads"] * c["n_q"] * (2 * c["d"] + 4)
        assert lv.local_bytes == pytest.approx(c["l2_sm_write_bytes"] - out, rel=0.01, abs=1e6)
        checked += 1
    assert checked >= 5


@needs_csv
def test_sdpa_flash_fitted_on_one_row_per_build_and_held_out():
    committed = json.loads(lm.FIT_FILE.read_text())
    assert lm.fit() == committed
    assert set(committed["sdpa_flash"]) == {"64", "128"}
    from gpumodel.validate import rows

    l2 = [r for r in rows() if r["quantity"] == "l2 bytes (SM xbar)" and r["kernel"] == "sdpa_flash"]
    train = [r for r in l2 if r["train"]]
    held = [r for r in l2 if not r["train"]]
    assert len(train) == 2 and all(r["n"] == 4096 and not r["causal"] for r in train)
    assert len(held) >= 3 and all(abs(r["ratio"] - 1) <= L2_BAND for r in held)


@pytest.mark.skipif(not shutil.which("nvdisasm") and not __import__("importlib").util.find_spec("nvidia.cu13"),
                    reason="no nvdisasm (pip install nvidia-cuda-nvdisasm)")
def test_committed_spill_sites_are_this_source():
    """Re-derive one build's spill sites from the kernel source as it is (NVRTC + nvdisasm, no GPU)."""
    pytest.importorskip("cuda.core")
    from lab import spill_sites as ss

    try:
        tool = ss.nvdisasm()
    except SystemExit:
        pytest.skip("no nvdisasm")
    committed = json.loads((RESULTS / "tc_spills.json").read_text())["rows"]
    row = next(r for r in committed if r["defines"]["HEAD_DIM"] == 128 and r["defines"]["BLOCK_N"] == 64
               and not r["defines"]["IS_BF16"] and r["defines"]["BLOCK_M"] == 128)
    assert ss.analyse(row["defines"], tool, ss.step_lines()) == row


# -- Little's law on the spilled kernels' DRAM rate (gpumodel/gpu_model.py in_flight_per_sm) -------------
def test_bytes_in_flight_follow_the_resident_warps():
    from gpumodel import gpu_model as gm

    lazy = describe("v_once_tc", 64, n_q=4096, placement="hbm", rescale="lazy")
    fewer = lazy.__class__(**dict(lazy.as_dict(), ctas_per_sm=lazy.ctas_per_sm - 1))
    assert gm.in_flight_per_sm(fewer, 64, 2) == pytest.approx(
        gm.in_flight_per_sm(lazy, 64, 2) * fewer.ctas_per_sm / lazy.ctas_per_sm)
    # per warp: its share of the Bc x d ring tile and its rows of one Br x Bc f block
    assert gm.in_flight_per_sm(lazy, 64, 2) == lazy.ctas_per_sm * (64 * 64 * 2 + 64 * 64 * 2)


def test_little_cap_binds_only_on_spilled_kernels(monkeypatch):
    from gpumodel import gpu_model as gm

    params = gm.load_params()
    off = dict(params, lat_dram=0.0)
    spilled = gm.predict("v_once_tc", 4, 16, 4096, None, 128, placement="hbm", rescale="eager")
    assert spilled.time_s > gm.predict("v_once_tc", 4, 16, 4096, None, 128, params=off, placement="hbm",
                                       rescale="eager").time_s
    monkeypatch.setattr(gm, "ring_wait", lambda *a: 0.0)  # fa2_wgmma's K/V ring waits lat_dram too (its own test)
    for name in ("fa2_tc", "fa2_wgmma", "sdpa_flash", "sdpa_cudnn"):
        assert gm.predict(name, 4, 16, 4096, None, 128).time_s == gm.predict(name, 4, 16, 4096, None, 128,
                                                                             params=off).time_s


def test_ring_wait_prices_the_stages_ab():
    """The K/V ring's wait (gpu_model.ring_wait): the 3-CTA d = 64 causal N = 512 build with four slots waits for
    nothing, with two it waits on the blocks DRAM serves; four / two near the stages21 A/B's 0.957-0.986. Kernels
    that state no ring (cuDNN, kv_stages 0) and lat_dram 0 (stage 1 of the fit) have none."""
    from gpumodel import gpu_model as gm
    from gpumodel.descriptors import describe
    from kernels.fa2_wgmma import BUILDS

    params = gm.load_params()
    s4 = BUILDS[64]["small-tma3-bc64-dyn-od2-s4"]
    s2 = dict(s4, STAGES=2)
    assert describe("fa2_wgmma", 64, "fp16", True, n_q=512, config=s4).kv_stages == 4
    assert describe("sdpa_cudnn", 64, "fp16", True, n_q=512).kv_stages == 0
    t4, t2 = (gm.as_timed(gm.predict("fa2_wgmma", 32, 32, 512, None, 64, causal=True, config=c),
                          "triton.testing.do_bench") for c in (s4, s2))  # as the A/B timed it (no host share)
    assert 0.955 < t4 / t2 < 0.99  # measured 0.957-0.986 over three runs
    off = dict(params, lat_dram=0.0)
    assert gm.predict("fa2_wgmma", 32, 32, 512, None, 64, causal=True, config=s4).time_s == gm.predict(
        "fa2_wgmma", 32, 32, 512, None, 64, causal=True, config=s4, params=off).time_s
    assert gm.predict("fa2_wgmma", 32, 32, 512, None, 64, causal=True, config=s2).time_s > gm.predict(
        "fa2_wgmma", 32, 32, 512, None, 64, causal=True, config=s2, params=off).time_s


def test_two_stage_fit_keeps_stage_one():
    """Stage 2 fits only the spilled kernels' constants: the others are stage 1's, on the base split."""
    from gpumodel import fit_gpu_model as f

    cells = [c for c in __import__("gpumodel.measured", fromlist=["x"]).bench_cells() if f.is_train_spill(c)]
    assert cells and all(c["kernel"] == "v_once_tc" and not c["causal"] and c["dtype"] == "fp16" for c in cells)
    assert {c["n_q"] for c in cells} == set(f.TRAIN_N_V_ONCE_TC)
    assert set(f.SPILL_PARAMS) == {"sigma_spill", "lat_dram", "L_gmem", "L_gmem_dram"}


def test_round_trips_cost_more_when_f_misses_the_l2():
    """Teaching v_once, spilled f: a round trip waits L_gmem, plus L_gmem_dram for the share that misses."""
    from gpumodel import gpu_model as gm

    p = gm.load_params()
    assert p["L_gmem"] > 0 and p["L_gmem_dram"] > 0
    # the same cell, with the DRAM part of a round trip taken away, is faster; the more f misses, the more
    times = []
    for n in (2048, 8192):
        on = gm.predict("v_once", 2, 16, n, None, 128, placement="hbm", rescale="eager")
        off = gm.predict("v_once", 2, 16, n, None, 128, params=dict(p, L_gmem_dram=0.0), placement="hbm",
                         rescale="eager")
        times.append(on.time_s / off.time_s)
    assert 1.0 < times[0] < times[1]
