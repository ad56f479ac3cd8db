"""fa-traffic report and predict on decode shapes (issue 44): --kv-heads, --page-size, --cache-lens, --num-splits;
the split_kv row's numbers are the closed form's, its bound is DRAM, and bad flags are one-line errors (exit 2)."""
from __future__ import annotations

import json

import pytest

from analysis.cli import main
from counting import closed_forms as cf
from counting import decode
from counting.gpus import get_gpu

DECODE = ["--seq-len", "1", "--seq-len-k", "131072", "--kv-heads", "8", "--page-size", "256"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def report_json(capsys, *argv):
    rc, out, err = run(capsys, "report", *argv, "--format", "json")
    assert rc == 0, err
    return {r["variant"] if r["variant"] != "v_once" else r["label"]: r for r in json.loads(out)}


def test_the_issue_example_is_dram_bound(capsys):
    """The brief's command: the split_kv row on split_kv_fast, its bytes the closed form's at the kernel's tiles,
    DRAM-bound, and K/V read once per kv head (× min = 1 to within the partials and Q)."""
    recs = report_json(capsys, *DECODE)
    r = recs["split_kv"]
    g = r["gpu_model"]
    assert g["kernel"] == "split_kv_fast" and g["bound"] == "dram"
    assert (r["batch"], r["heads"]) == (1, 32)  # the full GPU at d = 64: B·Nk = 16k tokens of cache -> B = 1
    want = cf.counts("split_kv", 1, 32, 1, 131072, 64, dtype="fp16", block_q=r["block_q"], block_k=r["block_k"],
                     kv_heads=8, page_size=256, num_sms=int(get_gpu("h200").value("sms", "measured")))
    assert r["reads"] == want.reads and r["writes"] == want.writes and r["hbm_bytes"] == want.hbm_bytes
    kv = 2 * 8 * 131072 * 64 * 2
    assert r["read_bytes"]["K"] + r["read_bytes"]["V"] == kv
    assert 1 <= r["hbm_bytes"] / r["min_hbm_bytes"] < 1.01
    assert r["decode"]["kv_heads"] == 8 and r["decode"]["page_size"] == 256 and r["decode"]["num_splits"] > 1
    # the model's time: at least the bytes over the measured bandwidth, and that is what sets it
    bw = get_gpu("h200").value("hbm_bandwidth", "measured")
    assert g["time_s"] >= r["hbm_bytes"] / bw and g["terms"]["dram"] >= g["terms"]["compute"]
    # the other rows read K and V for all 32 heads and say so
    assert recs["fa2"]["read_bytes"]["K"] == 4 * r["read_bytes"]["K"] and "split_kv only" in recs["fa2"]["note"]


def test_one_split_is_far_slower_at_decode(capsys):
    """S = 1 is FA2's grid, B·H_kv = 8 CTAs on 132 SMs: the model prices the few loads in flight (Little's law)."""
    one = report_json(capsys, *DECODE, "--variant", "split_kv", "--num-splits", "1")["split_kv"]
    split = report_json(capsys, *DECODE, "--variant", "split_kv")["split_kv"]
    assert one["decode"]["num_splits"] == 1 and "O_split" not in one["writes"]
    assert one["gpu_model"]["time_s"] > 4 * split["gpu_model"]["time_s"]
    assert one["gpu_model"]["bound"] == "dram"


def test_cache_lens_and_table(capsys):
    recs = report_json(capsys, "--seq-len", "1", "--seq-len-k", "4k", "--batch", "3", "--heads", "8", "--kv-heads",
                       "2", "--cache-lens", "0,1,4000", "--variant", "split_kv")
    r = recs["split_kv"]
    assert r["decode"]["cache_tokens"] == 4001 and r["decode"]["cache_len_min"] == 0
    assert r["read_bytes"]["K"] == 2 * 4001 * 64 * 2
    rc, out, err = run(capsys, "report", *DECODE, "--variant", "fa2,split_kv")
    assert rc == 0 and "split_kv_fast" in out and "H_kv = 8" in out and "dram" in out


def test_prefill_lengths_fall_back_to_the_papers_roofline(capsys):
    r = report_json(capsys, "--seq-len", "1k", "--variant", "split_kv")["split_kv"]
    assert "Nq <= 64" in r["gpu_model"]["why"]


def test_split_kv_joins_the_default_variants_only_for_a_decode_ask(capsys):
    """The rule (analysis/report_common.py is_decode_ask): without --variant, split_kv is shown only when a decode
    flag is given or a problem is Nq <= 64 against a longer Nk; the default prefill report leaves it out, and
    --variant split_kv shows it anywhere, with its refusal said once."""
    def variants(*argv):
        return {r["variant"] for r in report_json(capsys, *argv).values()}

    assert "split_kv" not in variants()  # 1k, 4k, 16k: prefill
    assert "split_kv" not in variants("--seq-len", "64")  # Nq = Nk
    assert "split_kv" not in variants("--seq-len", "65", "--seq-len-k", "4k")  # past split_kv_fast's Nq
    assert "split_kv" in variants("--seq-len", "64", "--seq-len-k", "4k")
    assert "split_kv" in variants("--seq-len", "1k", "--kv-heads", "8")
    assert "split_kv" in variants("--seq-len", "1k", "--variant", "split_kv")
    rc, out, err = run(capsys, "report", "--seq-len", "1k,4k,16k", "--variant", "fa2,split_kv")
    assert rc == 0 and out.count("Nq <= 64") == 1 and "longer Nq are prefills" in out


def test_fa2_at_a_decode_shape_says_its_grid(capsys):
    """The fa2 row at Nq = 1 is the training-shape model (no in-flight cap): its note and the caption say so, with
    its B·H·⌈Nq/Br⌉ CTAs (notebook 09 section 1)."""
    r = report_json(capsys, *DECODE, "--variant", "fa2,split_kv")["fa2"]
    assert f"= {r['batch'] * r['heads']} CTAs on 132 SMs" in r["note"] and "optimistic bound" in r["note"]
    rc, out, err = run(capsys, "report", *DECODE)
    assert rc == 0 and "an optimistic bound, not a prediction of the starved grid" in out
    assert "g = 4: 4 query heads share each kv head" in out and "v_once: even spilled" not in out


@pytest.mark.parametrize("argv,match", [
    (["report", *DECODE, "--variant", "fa2"], "--kv-heads applies to split_kv only"),
    (["report", "--seq-len", "1", "--seq-len-k", "1k", "--kv-heads", "7"], "H_kv must divide H"),
    (["report", "--seq-len", "1", "--seq-len-k", "1k", "--cache-lens", "5,6"], "give --batch"),
    (["report", "--seq-len", "1", "--seq-len-k", "1k", "--batch", "2", "--cache-lens", "5,2000"], "over the"),
    (["report", "--seq-len", "1", "--seq-len-k", "1k", "--batch", "3", "--cache-lens", "5,6"], "B = 3 entries"),
    (["report", "--seq-len", "1", "--seq-len-k", "1k", "--page-size", "0"], "positive whole number"),
    (["report", "--seq-len", "1", "--seq-len-k", "1k", "--num-splits", "-2"], "num-splits"),
    (["predict", "--kernel", "fa2_wgmma", "--seq-len", "1", "--seq-len-k", "1k", "--head-dim", "64",
      "--kv-heads", "8"], "--kv-heads applies to the decode kernels"),
    (["predict", "--kernel", "split_kv_fast", "--seq-len", "128", "--seq-len-k", "1k", "--head-dim", "64"],
     "Nq <= 64"),
    (["predict", "--kernel", "split_kv_fast", "--seq-len", "1", "--seq-len-k", "1k", "--head-dim", "96"],
     "head dims"),
    (["predict", "--kernel", "split_kv_fast", "--seq-len", "1", "--seq-len-k", "1k", "--head-dim", "64",
      "--pass", "backward", "--kv-heads", "8"], "decoding has no backward"),
])
def test_bad_decode_flags_are_one_line_errors(capsys, argv, match):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == "" and match in err and len(err.strip().splitlines()) == 1, err


def test_predict_decode_kernels(capsys):
    rc, out, err = run(capsys, "predict", "--kernel", "split_kv_fast", "--seq-len", "1,4", "--seq-len-k", "128k",
                       "--head-dim", "128", "--kv-heads", "8", "--dtype", "bf16", "--format", "json")
    assert rc == 0, err
    recs = json.loads(out)
    assert [r["bound"] for r in recs] == ["dram", "dram"] and all(r["decode"]["kv_heads"] == 8 for r in recs)
    # Nq = 4 packs g·Nq = 8 rows into the same 16-row tile: the same bytes but the Q and O rows, 4x the products
    assert recs[1]["dram_bytes"] / recs[0]["dram_bytes"] == pytest.approx(1, abs=0.01)
    rc, out, err = run(capsys, "predict", "--kernel", "split_kv", "--seq-len", "1", "--seq-len-k", "8k",
                       "--head-dim", "64", "--batch", "2", "--heads", "8", "--cache-lens", "100,8000")
    assert rc == 0 and "split_kv" in out and "decode_model_h100.json" in out, err


def test_decode_helpers_agree_with_the_report(capsys):
    """The S the row reports is the rule's at the GPU's SMs and the kernel's tiles."""
    r = report_json(capsys, *DECODE, "--variant", "split_kv")["split_kv"]
    ctas = 1 * 8 * 1  # B·H_kv·⌈g·Nq/16⌉
    asked = decode.split_rule.num_splits(1, 8, 1, 131072, r["block_k"], 132)
    assert asked == -(-264 // ctas)
    assert r["decode"]["num_splits"] == decode.used_splits(131072, decode.chunk_len(131072, asked, r["block_k"], 256))


def test_the_model_check_reads_a_decode_speed_run(tmp_path, capsys):
    """gpumodel/decode_model.py check: a decode_speed.json (its row layout) priced at the run's copy bandwidth; a
    measured time equal to the model's reads 1.00."""
    from gpumodel import decode_model as dm

    desc = dm.describe("split_kv_fast", 128, "bf16")
    p = dm.predict(desc, 8, 32, 1, 32768, 128, "bf16", gpu="h100", bandwidth=3.0e12, kv_heads=8)
    paged = dm.predict(desc, 8, 32, 1, 32768, 128, "bf16", gpu="h100", bandwidth=3.0e12, kv_heads=8, page_size=256)
    run = {"device": "NVIDIA H100 80GB HBM3", "copy": {"gbps": 3000.0},
           "rows": [{"dtype": "bfloat16", "d": 128, "batch": 8, "cache": 32768, "H": 32, "H_kv": 8, "Nq": 1,
                     "ok": True, "ms": {"split_kv_fast": p.time_s * 1e3, "split_kv_fast_paged": 2 * paged.time_s * 1e3,
                                        "sdpa_flash": 1.0, "split_kv": None}},
                    {"dtype": "float16", "d": 64, "batch": 1, "cache": 1024, "skipped": "time budget"}]}
    rows = dm.check(run)
    assert [r["kernel"] for r in rows] == ["split_kv_fast", "split_kv_fast_paged"]
    assert rows[0]["ratio"] == pytest.approx(1.0) and rows[1]["ratio"] == pytest.approx(0.5)
    path = tmp_path / "decode_speed.json"
    path.write_text(json.dumps(run))
    assert dm.main([str(path)]) == 0
    assert "split_kv_fast: 1 cells, model/measured median 1.00" in capsys.readouterr().out
    with pytest.raises(ValueError, match="H100 and H200"):
        dm.gpu_of("NVIDIA A100-SXM4-80GB")
