"""lab/l2_sim.py: the event-level LRU walk against the residency rules it checks (CPU only)."""
import pytest

from lab import l2_sim
from gpumodel.residency import separated_missing_bytes
from counting.tiling import cdiv

MIB = 2 ** 20


@pytest.mark.parametrize("n, cap_mib", [(16384, 36), (8192, 9), (12288, 20)])
def test_non_causal_walk_agrees_with_the_closed_rule(n, cap_mib):
    """residency.py's closed rule (waves in lockstep, straddled heads re-read a pass later) and the walk of the same
    grid are two derivations of one LRU: fa2_tc's tiling (Br = 128, Bc = 64, 2 CTAs/SM on 132 SMs), d = 128."""
    bh, br, bc, d, item, slots = 16, 128, 64, 128, 2, 264
    cap = cap_mib * MIB
    walked = l2_sim.simulate(l2_sim.accesses(bh, n, n, br, bc, d, item, slots), cap)
    closed = separated_missing_bytes(bh, cdiv(n, br), cdiv(n, bc), slots, 2 * n * d * item, 2 * slots * br * d * item,
                                     cap)
    assert closed > 0
    assert walked.missed_bytes == pytest.approx(closed, rel=0.06)
    assert walked.compulsory_bytes == bh * 4 * n * d * item  # Q, K, V, O once each


def test_causal_reuse_distances_follow_the_sweep_and_the_launch_order():
    """SDPA flash causal N = 4096, d = 128 (ncu: +56 MB over compulsory), swept backward as FA2's kernel does: its
    K/V re-reads come back up to ~20.5 MiB after their last use, so LRU at the model's 36 MiB misses nothing, at 21 MiB
    nothing, at 18 MiB some; fa2_tc (heaviest Q blocks first, ncu: +9 MB) re-reads closer (at 16 MiB a fraction of
    SDPA flash's misses). Swept forward, as the teaching kernels do, no re-read is 4 MiB away."""
    kw = dict(batch=4, heads=16, n_q=4096, n_k=4096, d=128, causal=True)
    assert l2_sim.sweep_of("sdpa_flash") == l2_sim.sweep_of("fa2_tc") == "backward"
    assert l2_sim.simulate_kernel("sdpa_flash", **kw).missed_bytes == 0
    assert l2_sim.simulate_kernel("sdpa_flash", capacity=21 * MIB, **kw).missed_bytes == 0
    tight = l2_sim.simulate_kernel("sdpa_flash", capacity=18 * MIB, **kw)
    assert 0 < tight.missed_bytes < tight.reread_bytes
    flash16 = l2_sim.simulate_kernel("sdpa_flash", capacity=16 * MIB, **kw).missed_bytes
    tc16 = l2_sim.simulate_kernel("fa2_tc", capacity=16 * MIB, **kw)
    assert 0 < tc16.missed_bytes < flash16 / 4
    assert tc16.reread_bytes == tight.reread_bytes  # the same tiles, another order
    forward = l2_sim.accesses(64, 4096, 4096, 128, 64, 128, 2, 264, causal=True, sweep="forward")
    assert l2_sim.simulate(forward, 4 * MIB).missed_bytes == 0
    with pytest.raises(ValueError, match="sweep 'sideways'"):
        l2_sim.accesses(1, 64, 64, 64, 64, 64, 2, 1, sweep="sideways")


def test_pace_spread_is_what_makes_causal_misses():
    ev = dict(bh=64, n_q=4096, n_k=4096, block_q=128, block_k=64, d=128, item=2, slots=264, causal=True)
    even = l2_sim.simulate(l2_sim.accesses(**ev), 36 * MIB)
    spread = l2_sim.simulate(l2_sim.accesses(pace_spread=1.8, **ev), 36 * MIB)
    assert even.missed_bytes == 0 < spread.missed_bytes
    assert spread.compulsory_bytes == even.compulsory_bytes


def test_causal_offsets_and_tails():
    """Nq != Nk and lengths Br, Bc do not divide: the compulsory bytes are the tensors' own, the tail tiles at their
    real width (with Nk > Nq bottom-right, the last Q block sees every key)."""
    bh, n_q, n_k, d, item = 3, 300, 517, 64, 2
    r = l2_sim.simulate(l2_sim.accesses(bh, n_q, n_k, 128, 64, d, item, slots=2, causal=True), 10 ** 9)
    assert r.missed_bytes == 0
    assert r.compulsory_bytes == bh * (2 * n_q + 2 * n_k) * d * item


def test_grids_it_does_not_walk_are_refused(capsys):
    with pytest.raises(ValueError, match="persistent"):
        l2_sim.simulate_kernel("sdpa_cudnn", 1, 16, 4096, 4096, 128)
    assert l2_sim.main(["--kernel", "sdpa_cudnn", "--batch", "1", "--heads", "16", "--seq-len", "4096",
                        "--head-dim", "128"]) == 2
    assert l2_sim.main(["--kernel", "sdpa_flash", "--batch", "0", "--heads", "16", "--seq-len", "4096",
                        "--head-dim", "128"]) == 2
    assert "error:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="walks every tile access"):
        l2_sim.accesses(4096, 65536, 65536, 64, 64, 64, 2, 264)


def test_cli_prints_the_model_beside_the_walk(capsys):
    assert l2_sim.main(["--kernel", "sdpa_flash", "--batch", "1", "--heads", "2", "--seq-len", "1024",
                        "--head-dim", "64", "--causal", "--capacity-mib", "1"]) == 0
    out = capsys.readouterr().out
    assert "model (gpumodel/levels.py)" in out and "LRU    1.0 MiB" in out


def _lockstep_record(bh=16, n=8192, br=128, bc=64, d=128, slots=264, sweep="forward"):
    """A lab/cta_trace.py record of the lockstep schedule accesses() walks with overhead 0 (each step one unit)."""
    import heapq

    t_r, t_c = cdiv(n, br), cdiv(n, bc)
    free = [(0, s) for s in range(slots)]
    ctas = []
    for _ in range(bh * t_r):
        t0, s = heapq.heappop(free)
        ctas.append([t0, t0 + t_c // 4, t0 + t_c // 2, t0 + 3 * t_c // 4, t0 + t_c, s % 132, t_c])
        heapq.heappush(free, (t0 + t_c, s))
    return dict(kernel="fa2_tc", config=dict(BLOCK_M=br, BLOCK_N=bc, NWARPS=4, Q_IN_REGS=0, MIN_BLOCKS=2,
                                             CTA_TRACE=1),
                batch=1, heads=bh, n=n, d=d, dtype="float16", causal=False, grid=[t_r, bh], block_q=br, block_k=bc,
                sweep=sweep, rep=0, ctas=ctas)


def test_a_recorded_lockstep_schedule_walks_as_the_simulated_one():
    """The trace walk (lab/cta_trace.py's records) on a schedule that is the lockstep one, forward sweep: the same
    misses as accesses() to the byte; the backward sweep (fa2_tc's) mirrors the reuse distances: about the same."""
    cap = 9 * MIB
    simulated = l2_sim.simulate(l2_sim.accesses(16, 8192, 8192, 128, 64, 128, 2, 264, overhead=0.0), cap)
    assert simulated.missed_bytes > 0
    forward = l2_sim.simulate(l2_sim.accesses_from_trace(_lockstep_record()), cap)
    assert forward == simulated
    backward = l2_sim.simulate(l2_sim.accesses_from_trace(_lockstep_record(sweep="backward")), cap)
    assert backward == l2_sim.simulate(l2_sim.accesses(16, 8192, 8192, 128, 64, 128, 2, 264, overhead=0.0,
                                                       sweep="backward"), cap)
    assert backward.missed_bytes == simulated.missed_bytes  # non-causal: the mirror image, the same distances


def test_trace_records_that_do_not_fit_are_refused():
    rec = _lockstep_record(bh=2, n=1024)
    with pytest.raises(ValueError, match="non-causal"):
        l2_sim.accesses_from_trace(dict(rec, causal=True))
    with pytest.raises(ValueError, match="does not match the grid"):
        l2_sim.accesses_from_trace(dict(rec, ctas=rec["ctas"][:-1]))
    bad = [list(c) for c in rec["ctas"]]
    bad[3][6] = 5  # a CTA that did not sweep every key block
    with pytest.raises(ValueError, match="CTA 3"):
        l2_sim.accesses_from_trace(dict(rec, ctas=bad))
    bad = [list(c) for c in rec["ctas"]]
    bad[0][4] = bad[0][0] - 1  # ended before it started
    with pytest.raises(ValueError, match="CTA 0"):
        l2_sim.accesses_from_trace(dict(rec, ctas=bad))


def test_trace_cli(tmp_path, capsys):
    import json

    f = tmp_path / "cta_trace.json"
    f.write_text(json.dumps(dict(env=dict(gpu="NVIDIA H200"), records=[_lockstep_record(bh=4, n=4096,
                                                                                         sweep="backward")])))
    assert l2_sim.main(["--trace", str(f), "--capacity-mib", "2"]) == 0
    out = capsys.readouterr().out
    assert "lockstep" in out and " 4096   0" in out
    (row,) = l2_sim.trace_report(str(f), 2 * MIB)
    assert row["compulsory"] == 4 * 4 * 4096 * 128 * 2 and row["lockstep"] >= row["compulsory"]
    assert row["ncu"] == []  # no committed ncu row at B*H = 4
    (tmp_path / "bad.json").write_text("{}")
    assert l2_sim.main(["--trace", str(tmp_path / "bad.json")]) == 2
    assert l2_sim.main(["--batch", "1"]) == 2
    assert "--kernel" in capsys.readouterr().err


def test_trace_pairs_with_the_ncu_csv_of_its_own_launches(tmp_path, capsys):
    """lab/cta_trace.py --ncu under ncu: its 'target launched' lines and ncu's rows pair with the records in order;
    launches that do not match the records are refused."""
    import json

    recs = [_lockstep_record(bh=4, n=n, sweep="backward") for n in (2048, 4096)]
    (tmp_path / "t.json").write_text(json.dumps(dict(env=dict(gpu="NVIDIA H200"), records=recs)))
    head = ['"ID","Kernel Name","Grid Size","Block Size","Metric Name","Metric Unit","Metric Value"']
    lines = []
    for i, n in enumerate((2048, 4096)):
        lines.append(f"target launched fa2_tc n={n} d=128 b=1 h=4 causal=0 dtype=fp16")
    rows = []
    for i, mb in enumerate((30, 70)):
        for m, v in (("dram__bytes_read.sum", mb * 1e6 - 1e6), ("dram__bytes_write.sum", 1e6)):
            rows.append(f'"{i}","fa2_tc_fwd","(16, 4, 1)","(128, 1, 1)","{m}","byte","{v:.0f}"')
    (tmp_path / "n.csv").write_text("\n".join(lines + head + rows) + "\n")
    got = l2_sim.trace_report(str(tmp_path / "t.json"), 36 * MIB, str(tmp_path / "n.csv"))
    assert [r["same_launch"] for r in got] == [30e6, 70e6]
    assert l2_sim.main(["--trace", str(tmp_path / "t.json"), "--ncu-csv", str(tmp_path / "n.csv")]) == 0
    assert "this launch" in capsys.readouterr().out
    (tmp_path / "t1.json").write_text(json.dumps(dict(env=dict(gpu="NVIDIA H200"), records=recs[:1])))
    with pytest.raises(ValueError, match="not the trace's"):
        l2_sim.trace_report(str(tmp_path / "t1.json"), 36 * MIB, str(tmp_path / "n.csv"))


def test_pace_figure_draws_the_walk(tmp_path, capsys):
    pts = l2_sim.pace_figure(tmp_path / "p.png", heads=2, seqs=(2048, 4096), spreads=(0.0, 0.3))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [(p["n"], p["pace_spread"]) for p in pts] == [(2048, 0.0), (2048, 0.3), (4096, 0.0), (4096, 0.3)]
    lock = l2_sim.simulate_kernel("fa2_tc", 1, 2, 4096, 4096, 128)
    assert pts[2]["dram_over_compulsory"] == (lock.compulsory_bytes + lock.missed_bytes) / lock.compulsory_bytes
    for argv, match in ((["--pace-plot", str(tmp_path / "no" / "p.png")], "no folder"),
                        (["--pace-plot", str(tmp_path)], "an image file"),
                        (["--pace-plot", str(tmp_path / "p.txt")], "an image file")):
        assert l2_sim.main(argv) == 2
        assert match in capsys.readouterr().err


@pytest.mark.parametrize("argv, match", [
    (["--capacity-mib", "inf", "--trace", "x.json"], "--capacity-mib must be a finite number"),
    (["--capacity-mib", "0", "--trace", "x.json"], "--capacity-mib must be a finite number"),
    (["--pace-spread", "nan", "--kernel", "fa2_tc"], "--pace-spread must be in [0, 2)"),
    (["--ncu-csv", "x.csv"], "--ncu-csv and --gpu go with --trace"),
    (["--kernel", "fa2_tc", "--batch", "1", "--heads", "1", "--seq-len", "64", "--seq-len-k", "0",
      "--head-dim", "64"], "must be >= 1"),
    (["--trace", "/nonexistent/t.json"], "not a lab/cta_trace.py file"),
])
def test_bad_cli_input_is_one_line_and_exit_2(capsys, argv, match):
    assert l2_sim.main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


@pytest.mark.parametrize("content, match", [
    ([], "no list of records"), ({"records": 5}, "no list of records"),
    ({"records": []}, "is not one the walk knows"),  # no env.gpu and no --gpu
])
def test_trace_files_that_are_not_traces_are_refused(tmp_path, capsys, content, match):
    import json

    f = tmp_path / "t.json"
    f.write_text(json.dumps(content))
    assert l2_sim.main(["--trace", str(f)]) == 2
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("change, match", [
    (dict(dtype=None), "'dtype': str expected"), (dict(grid=5), "'grid': list expected"),
    (dict(n="2048"), "'n': int expected"), (dict(ctas=None), "'ctas': list expected"),
    (dict(block_q=0), "'block_q': must be >= 1"), (dict(sweep="sideways"), "'sweep': one of"),
    (dict(grid=[16, 4, 1]), "'grid': [Tr, B*H] expected"),
])
def test_bad_trace_records_are_rows_with_their_error(tmp_path, capsys, change, match):
    """One record that cannot be walked does not hide the others: its row says why, and the CLI exits 1."""
    import json

    good = _lockstep_record(bh=2, n=1024, sweep="backward")
    f = tmp_path / "t.json"
    f.write_text(json.dumps(dict(env=dict(gpu="NVIDIA H100 80GB HBM3"), records=[good, dict(good, **change)])))
    rows = l2_sim.trace_report(str(f))
    assert "error" not in rows[0] and rows[0]["gpu"] == "h100" and rows[0]["ncu"] == []
    assert match in rows[1]["error"]
    assert l2_sim.main(["--trace", str(f)]) == 1
    assert "not walked" in capsys.readouterr().out


def test_a_cta_that_wrote_no_record_is_named():
    rec = _lockstep_record(bh=2, n=1024)
    rec["ctas"][5] = [0, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="CTA 5: .* not a whole sweep"):
        l2_sim.accesses_from_trace(rec)


def test_short_sweeps_start_at_the_cta_start():
    """Marks that fall on step 0 (Tc < 4) are the loop's start, after the prologue: left out, so the first step is
    timed from the CTA's start as in longer sweeps."""
    rec = _lockstep_record(bh=1, n=128, br=128, bc=64, slots=1)  # Tc = 2: marks at steps 0, 1, 1
    rec["ctas"] = [[0, 90, 95, 96, 100, 0, 2]]
    kinds, keys, nbytes = l2_sim.accesses_from_trace(rec)
    assert kinds == [l2_sim.Q, l2_sim.KV, l2_sim.KV, l2_sim.O]


def test_trace_buffer_constants_match_the_kernel():
    import re
    from pathlib import Path

    from lab import cta_trace

    src = (Path(__file__).resolve().parent.parent / "kernels" / "cuda" / "cta_trace.cuh").read_text()
    assert re.search(r"#define CTA_TRACE_MAX \(1 << 17\)", src) and cta_trace.TRACE_MAX == 1 << 17
    assert re.search(r"#define CTA_TRACE_WORDS 8\b", src) and cta_trace.TRACE_WORDS == 8


def test_cta_trace_records_unwritten_ctas_as_missing():
    """lab/cta_trace.py's host side: times relative to the earliest written start; a CTA with an unwritten word
    (the buffer's fill) becomes all -1, which the walk names; a trace with none written is an error, not a crash."""
    import numpy as np

    from lab.cta_trace import UNWRITTEN, relative_records, summarise

    arr = np.array([[1000, 1010, 1020, 1030, 1040, 3, 4, UNWRITTEN],
                    [UNWRITTEN] * 8,
                    [1005, 1006, 1007, 1008, 1085, 7, 4, UNWRITTEN]], dtype=np.uint64)
    recs = relative_records(arr)
    assert recs == [[0, 10, 20, 30, 40, 3, 4], [-1] * 7, [5, 6, 7, 8, 85, 7, 4]]
    s = summarise(dict(ctas=recs))
    assert s["unrecorded_ctas"] == 1 and s["median_ns_per_step"] == 15 and s["pace_p10"] == 10 / 15
    assert s["makespan_us"] == 0.085
    assert "recorded no whole sweep" in summarise(dict(ctas=relative_records(np.full((2, 8), UNWRITTEN,
                                                                                     dtype=np.uint64))))["error"]
