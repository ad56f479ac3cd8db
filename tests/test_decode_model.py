"""gpumodel/decode_model.py's copies of the decode kernels' tiles (gpumodel may not import kernels: the layers in
pyproject.toml) held equal to the launchers' own: Bc, stages, rows per CTA, shared memory, the launches, and the CTAs
per SM that follow (two at d <= 128, one at d = 256 for split_kv_fast: docs/decoding.md, the split rule)."""
from __future__ import annotations

import pytest

from counting.gpus import get_gpu
from gpumodel import decode_model


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_fast_tiles_are_the_launchers(d, dtype):
    from kernels import _decode, split_kv_fast

    desc = decode_model.describe("split_kv_fast", d, dtype)
    assert (desc.block_q, desc.block_k, desc.kv_stages) == (_decode.ROWS, split_kv_fast.block_k(d), split_kv_fast.STAGES)
    assert desc.smem_bytes == split_kv_fast.smem_bytes(d) and desc.launches == 1
    assert decode_model.HEAD_DIMS["split_kv_fast"] == split_kv_fast.HEAD_DIMS
    assert decode_model.ctas_per_sm(desc, get_gpu("h200")) == (1 if d == 256 else 2)


@pytest.mark.parametrize("d", [16, 64, 128, 256])
def test_teaching_tiles_are_the_launchers(d):
    from kernels import _decode, split_kv

    desc = decode_model.describe("split_kv", d, "fp32")
    assert (desc.block_q, desc.block_k) == (_decode.ROWS, split_kv.BLOCK_K)
    assert desc.smem_bytes == split_kv.shared_bytes(d) and desc.launches == len(split_kv.KERNELS_CU)


# -- the model against the H100 run (issue 44): the committed constants and the held-out record ------------------
import json  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "results" / "decode_speed" / "decode_speed.json"
RECORD = ROOT / "results" / "decode_model_h100.json"


def test_the_record_is_the_committed_run_priced_with_the_committed_constants():
    """results/decode_model_h100.json recomputed from results/decode_speed/decode_speed.json and
    results/decode_model_fit.json: equal (a changed model, constant or gap entry makes it stale), and its check passes
    (every cell in band or a listed known gap)."""
    from gpumodel import decode_heldout as dh

    doc = dh.build(RUN)
    assert json.loads(json.dumps(doc)) == json.loads(RECORD.read_text())
    assert dh.unexplained(doc["cells"]) == []
    assert dh.record_main(str(RUN), str(RECORD), check=True) == 0
    # the cells are the run's: 46 + 46 timed cells of the fast kernel, 10 of the teaching one
    counts = {k: sum(c["kernel"] == k for c in doc["cells"]) for k in decode_model.CHECKED}
    assert counts == {"split_kv_fast": 46, "split_kv_fast_paged": 46, "split_kv": 10}
    train = [c for c in doc["cells"] if c["train"]]
    assert train and all(c["dtype"] == "fp16" and c["d"] == 128 for c in train)
    assert all(c["in_band"] for c in train)


def test_a_planted_bad_constant_fails_the_check(tmp_path):
    """The fixed time of split_kv_fast tripled: small caches go out of band with no known-gap reason, and the
    committed record no longer matches."""
    from gpumodel import decode_heldout as dh

    params = decode_model.load_fit()
    bad = dict(params, split_kv_fast=dict(params["split_kv_fast"], t_fixed=3 * params["split_kv_fast"]["t_fixed"]))
    doc = dh.build(RUN, params=bad)
    missed = dh.unexplained(doc["cells"])
    assert missed and {r["kernel"] for r in missed} == {"split_kv_fast"}
    assert json.loads(json.dumps(doc)) != json.loads(RECORD.read_text())
    # and with no known gaps the run's own misses are unexplained
    assert dh.unexplained(dh.build(RUN, gaps={"cells": []})["cells"])


def test_every_decode_known_gap_names_a_miss():
    """An entry the model has brought in band is deleted, not kept (as tests/test_gpu_model.py holds validate's)."""
    from gpumodel import decode_heldout as dh
    from gpumodel.validate import gap_reason, known_gaps

    rows = dh.build(RUN)["cells"]
    mine = [g for g in known_gaps()["cells"] if g.get("quantity") == dh.QUANTITY]
    assert mine
    for g in mine:
        assert any(not r["in_band"] and r["kernel"] == g["kernel"] and gap_reason(dict(r, quantity=dh.QUANTITY),
                                                                                  {"cells": [g]}) for r in rows), g


def test_the_constants_file_says_where_it_was_fitted():
    doc = json.loads(decode_model.FIT_FILE.read_text())
    assert doc["source"] == "results/decode_speed/decode_speed.json" and "fp16, d = 128" in doc["split"]
    p = doc["params"]
    assert 0.8 < p["eta_read"] < 1.3
    for k in ("split_kv_fast", "split_kv_fast_paged"):
        assert 0 <= p[k]["t_round"] < 1e-5 and 0 < p[k]["t_fixed"] < 1e-4
    assert 0 < p["split_kv"]["t_split"] < 1e-5


def test_teaching_kernel_is_priced_by_its_shared_memory():
    """split_kv.cu's S = Q K_j^T reads Ks with a stride of d words: 32-way conflicts at d = 128 (33 wavefronts per
    column with the Qs broadcast), so the teaching kernel is shared-memory bound, not DRAM bound."""
    w = decode_model.smem_wavefronts_per_tile(128)
    assert w == 16 * 128 * 33 + 64 * 66 + 2 * 32 * 128 // 32 + 3 * 32 * 16
    desc = decode_model.describe("split_kv", 128, "fp16")
    p = decode_model.predict(desc, 8, 32, 1, 1024, 128, "fp16", gpu="h100", kv_heads=8)
    assert p.bound == "smem" and p.terms["smem"] > 10 * p.terms["dram"]


def test_few_ctas_are_latency_bound():
    """B = 8 at S = 5 is 320 CTAs on 264 slots: the second wave's 56 CTAs pull less than the DRAM's rate (Little's
    law on their rings), so the time is over the bytes at the bandwidth; B = 64 (512 CTAs, two full waves) is not."""
    desc = decode_model.describe("split_kv_fast", 128, "fp16")
    for b, slower in ((8, True), (64, False)):
        p = decode_model.predict(desc, b, 32, 1, 262144, 128, "fp16", gpu="h100", bandwidth=3.0e12, kv_heads=8)
        at_bw = p.dram_bytes / (3.0e12 * decode_model.load_fit()["eta_read"])
        assert (p.terms["dram"] > 1.05 * at_bw) == slower


def test_the_committed_constants_are_the_fit_of_the_committed_run():
    """gpumodel/fit_decode_model.py on the committed run gives the committed constants (a model change that moves the
    fit needs the refit, and then the record, committed with it)."""
    pytest.importorskip("scipy")
    from gpumodel import fit_decode_model as fdm

    result = json.loads(RUN.read_text())
    params = fdm.fit(result)
    committed = json.loads(decode_model.FIT_FILE.read_text())
    assert params["eta_read"] == pytest.approx(committed["params"]["eta_read"], rel=1e-4)
    for k in ("split_kv_fast", "split_kv_fast_paged", "split_kv"):
        assert params[k] == pytest.approx(committed["params"][k], rel=1e-3), k
    assert fdm.document(result, committed["source"], params)["train_cells"] == committed["train_cells"] == 24


def test_the_fit_reads_no_held_out_cell():
    """The held-out check means something only if the constants never see a held-out cell: triple every held-out
    measurement (bf16 rows, d = 64 rows) and the refit must return the committed constants unchanged; triple a
    training cell's and it must not."""
    pytest.importorskip("scipy")
    import copy

    from gpumodel import fit_decode_model as fdm

    result = json.loads(RUN.read_text())
    committed = json.loads(decode_model.FIT_FILE.read_text())["params"]
    held = copy.deepcopy(result)
    for row in held["rows"]:
        if not (row.get("dtype") in ("float16", "fp16") and row.get("d") == 128):
            row["ms"] = {k: (3 * v if v else v) for k, v in (row.get("ms") or {}).items()}
    params = fdm.fit(held)
    assert params["eta_read"] == pytest.approx(committed["eta_read"], rel=1e-4)
    for k in ("split_kv_fast", "split_kv_fast_paged", "split_kv"):
        assert params[k] == pytest.approx(committed[k], rel=1e-3), k
    train = copy.deepcopy(result)
    for row in train["rows"]:
        if row.get("dtype") in ("float16", "fp16") and row.get("d") == 128 and row.get("ms"):
            row["ms"] = {k: (3 * v if v else v) for k, v in row["ms"].items()}
    moved = fdm.fit(train)
    assert moved["split_kv_fast"] != pytest.approx(committed["split_kv_fast"], rel=1e-2)
