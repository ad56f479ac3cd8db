"""CPU checks of bench/harness.py, the one benchmark harness: its table is the registry's labels plus
SDPA's backends, configs reach forward() as arguments (no module's CONFIGS changes), the correctness
rule rejects poisoned, wrong and empty-row-violating outputs, every record carries one run id, and every
bench script goes through it (none keeps its own timer)."""
from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import pytest
import torch

from bench import harness
from kernels import KERNELS

BENCH = Path(harness.__file__).resolve().parent


def test_entries_are_the_registry_labels_then_sdpa():
    table = harness.entries()
    labels = [e.label for e in table]
    expected = [s.label(**o) for s in KERNELS.values() if s.available() and not s.decode for o in s.bench_options]
    assert labels[:len(expected)] == expected
    assert labels[len(expected):] == [f"sdpa_{b}" for b in harness.SDPA_BACKENDS]
    assert "v_once_tc_sram_lazy" in labels and "v_once_auto_lazy" in labels
    assert [e.label for e in harness.entries(["fa2_tc", "sdpa_flash"])] == ["fa2_tc", "sdpa_flash"]
    assert {e.label for e in harness.entries(["sdpa"])} == {f"sdpa_{b}" for b in harness.SDPA_BACKENDS}
    assert all(e.kind == "sdpa" for e in harness.entries(["sdpa"]))


class _FakeSpec:
    """Stands in for a KernelSpec: records what forward() receives."""
    name, tier, dtypes, module = "fake", "tensor-core", (torch.float16,), None

    def __init__(self):
        self.calls = []

    def forward(self, q, k, v, *, causal=False, config=None, out=None, placement=None):
        self.calls.append(dict(causal=causal, config=config, out=out, placement=placement))
        return q, None

    def supports_head_dim(self, d):
        return d in (64, 128)


def test_configs_are_passed_as_arguments_never_written_into_configs():
    from kernels import fa2_tc, fa2_wgmma

    before = copy.deepcopy((fa2_tc.CONFIGS, fa2_wgmma.CONFIGS))
    cand = fa2_tc.SWEEP[64][1]
    table = harness.entries(["fa2_tc"], sdpa=(), configs={"fa2_tc": [cand]})
    swept = [e for e in table if e.config is not None]
    assert len(swept) == 1 and swept[0].label.startswith("fa2_tc{") and swept[0].config == cand
    assert (fa2_tc.CONFIGS, fa2_wgmma.CONFIGS) == before

    spec = _FakeSpec()
    q = torch.zeros(1, 1, 4, 64)
    harness.Entry("fake{}", "tensor-core", spec, {"placement": "hbm"}, {"BLOCK_N": 32}).forward(q, q, q, True)
    per_d = harness.Entry("fake", "tensor-core", spec, {}, {64: {"BLOCK_N": 96}, 128: {"BLOCK_N": 48}})
    per_d.forward(q, q, q, False)
    per_d.forward(torch.zeros(1, 1, 4, 128), q, q, False)
    assert [c["config"] for c in spec.calls] == [{"BLOCK_N": 32}, {"BLOCK_N": 96}, {"BLOCK_N": 48}]
    assert spec.calls[0]["placement"] == "hbm" and spec.calls[0]["causal"] is True


def test_skip_reasons():
    spec = _FakeSpec()
    e = harness.Entry("fake", "tensor-core", spec)
    assert e.skip_reason(8, 8, 96, False) and e.skip_reason(8, 8, 64, False, torch.float32)
    assert e.skip_reason(8, 8, 64, False, torch.float16) is None
    sdpa = harness.entries(["sdpa_flash"])[0]
    assert sdpa.skip_reason(8, 9, 64, True) and sdpa.skip_reason(8, 9, 64, False) is None
    sram = next(x for x in harness.entries(["v_once_tc"], sdpa=()) if x.options.get("placement") == "sram")
    assert sram.skip_reason(128, 128, 64, False) is None
    assert "shared memory" in sram.skip_reason(128, 8192, 128, False)


def _qkv(n_q, n_k, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, 2, n, d, generator=g) for n in (n_q, n_k, n_k))


def test_correctness_rule_catches_what_it_must():
    from variants import attention_reference

    q, k, v = _qkv(9, 5)
    o, lse = attention_reference(q, k, v, causal=True)  # Nq > Nk: 4 rows see no key
    good = harness.compare(o.float(), lse.float(), q, k, v, True, "float32")
    assert good["ok"] and good["empty_rows"] == 2 * 4 and good["rel_err"] < 1e-6
    poisoned = o.float().clone()
    poisoned[0, 0, -1, 0] = float("nan")  # one unwritten element
    assert not harness.compare(poisoned, lse.float(), q, k, v, True, "float32")["ok"]
    assert not harness.compare(o.float() * 1.01, lse.float(), q, k, v, True, "float32")["ok"]
    bad_empty = o.float().clone()
    bad_empty[0, 0, 0] = 1.0  # a row that sees no key must be 0
    assert not harness.compare(bad_empty, lse.float(), q, k, v, True, "float32")["ok"]
    bad_lse = lse.float().clone()
    bad_lse[0, 0, -1] += 0.1
    assert not harness.compare(o.float(), bad_lse, q, k, v, True, "float32")["ok"]
    assert harness.compare(o.half(), None, q, k, v, True, "float16")["ok"]  # SDPA: no lse
    q0 = q[:, :0]
    assert not harness.compare(q0, None, q0, k[:, :0], v[:, :0], False, "float32")["ok"]  # nothing checked


def test_flops_is_the_one_formula():
    import counting.headline as headline

    f = getattr(headline, "attention_flops", headline.paper_flops)
    for args in [(2, 3, 100, 100, 64, False), (1, 2, 128, 4096, 128, True), (4, 1, 77, 33, 64, True)]:
        assert harness.flops(*args) == pytest.approx(float(f(*args)))
    assert harness.flops(1, 1, 64, 64, 64, True) < harness.flops(1, 1, 64, 64, 64, False)


def test_run_id_is_one_per_process():
    a, b = harness.run_info(), harness.run_info()
    assert a == b and a["run_id"].startswith(a["utc"]) and a["git"] in a["run_id"]
    assert re.fullmatch(r"\d{8}T\d{6}Z", a["utc"])


def test_predict():
    assert harness.predict([], 1024) is None
    assert harness.predict([(1024, 1.0)], 2048) == pytest.approx(4.0)
    assert harness.predict([(1024, 1.0), (2048, 2.0)], 4096) == pytest.approx(4.0)  # linear: p = 1


# bench/: the entry points a user runs; lab/: probes, A/Bs, ncu and sanitizer targets (docs/design.md, "Core and lab")
SCRIPTS = ["bench/bench_kernels.py", "bench/bench_tc.py", "bench/launch_overhead.py", "bench/sanitize.py",
           "bench/bench_bwd.py", "bench/layouts_speed.py", "bench/train_gpt.py", "bench/cluster_speed.py",
           "bench/ring_speed.py", "bench/bwd_layouts_speed.py", "bench/decode_speed.py"]
SCRIPTS += ["lab/fa2_teaching_ab.py", "lab/bwd_wgmma_check.py", "lab/ab_wgmma_speed.py", "lab/teach_bwd_ab.py",
            "lab/pass_probe.py", "lab/clock_probe.py", "lab/gap_probe.py", "lab/cta_trace.py", "lab/bwd_ws_ab.py",
            "lab/decode_split_ab.py", "lab/bwd_order_ab.py"]
# times an old source tree with this tree's harness, so it loads bench/harness.py by path, not by import
BY_PATH = {"bench/ab_speed.py"}
# scripts that time nothing (ncu targets, precompilers, table writers) or time the host alone
NOT_TIMING = {"bench/harness.py", "bench/timing.py", "bench/verdict_table.py"}
NOT_TIMING |= {f"lab/{n}.py" for n in (
    "ncu_levels_target", "ncu_bwd_target", "bwd_sanitize_target", "precompile_bwd", "host_overhead_cpu",
    "inputs_gpu_check", "spill_sites", "cluster_sanitize_target", "cluster_ncu_target", "ncu_moonshot_target",
    "ncu_moonshot_summary", "cluster_ncu_summary", "racecheck_mbarrier_probe", "tc_ceiling", "kernel_names",
    "cluster_probe", "tc_refactor_ab", "l2_sim", "knob_ab", "predict_ab", "same_builds", "__init__",
    "bwd_wgmma_sanitize_target", "decode_sanitize_target", "bwd_ws", "bwd_ws_sanitize_target")}


def test_every_bench_script_is_listed():
    """A new bench script must time through the harness (SCRIPTS) or say it times nothing (NOT_TIMING)."""
    found = {f"{p.parent.name}/{p.name}" for folder in (BENCH, BENCH.parent / "lab") for p in folder.glob("*.py")}
    assert found - set(SCRIPTS) - NOT_TIMING - BY_PATH == set()
    for script in BY_PATH:
        assert '"harness.py"' in (BENCH.parent / script).read_text(), f"{script} no longer loads the harness"


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_bench_script_goes_through_the_harness(script):
    """Each script imports bench.harness and keeps no timer, reference check or SDPA switch of its own."""
    source = (BENCH.parent / script).read_text()
    tree = ast.parse(source)
    imported = {(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert ("bench", "harness") in imported, f"{script} does not use bench.harness"
    for forbidden in ("torch.cuda.Event", "attention_reference", "sdpa_kernel", "bench.timing", "CONFIGS.update"):
        assert forbidden not in source, f"{script} has its own {forbidden}"


def test_run_id_names_the_tree_without_git(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "_RUN", {})
    monkeypatch.setenv("FA_GIT_DESCRIBE", "v9-test")
    assert "-v9-test-" in harness.run_info()["run_id"]
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "a.py").write_text("x = 1\n")
    first = harness.tree_hash(tmp_path)
    (tmp_path / "kernels" / "a.py").write_text("x = 2\n")
    assert harness.tree_hash(tmp_path) != first


# ----------------------------------------------------------------------------- the scripts, end to end on CPU

def _reference_fn(q, k, v, causal, out=None):
    from variants import attention_reference

    o, lse = attention_reference(q, k, v, causal=causal)
    if out is None:
        return o.to(q.dtype), lse.float()
    out[0].copy_(o)
    out[1].copy_(lse)
    return out


def _wrong_fn(q, k, v, causal, out=None):
    o, lse = _reference_fn(q, k, v, causal)
    return o * 1.1, lse


@pytest.fixture
def fake_gpu(monkeypatch):
    """The harness on CPU: inputs on the CPU, no-op synchronise, a fixed 'time', two entries (one right,
    one wrong), so a script's plumbing (records, run id, skips, files) runs without a GPU."""
    timed = []

    def fake_time(fn, sets, **kw):
        fn(*sets[0])
        timed.append(kw)
        return dict(median_ms=2.0, min_ms=1.5, max_ms=3.0, reps=3, timer="fake")

    def fake_entries(names=(), *, sdpa=harness.SDPA_BACKENDS, all_options=False, configs=None):
        if names and set(names) <= {"sdpa"}:
            return []
        return [harness.Entry("right", "teaching", fn=_reference_fn), harness.Entry("wrong", "teaching", fn=_wrong_fn)]

    monkeypatch.setattr(harness, "DEVICE", "cpu")
    monkeypatch.setattr(harness, "time_fn", fake_time)
    monkeypatch.setattr(harness, "entries", fake_entries)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the scripts refuse to start without one
    return timed


def test_measure_checks_before_timing(fake_gpu):
    right, wrong = harness.entries()
    sets = harness.input_sets(1, 2, 40, 40, 16, torch.float32, max_sets=2)
    rec = harness.measure(right, sets, True)
    assert rec["ok"] and rec["median_ms"] == 2.0 and rec["run_id"] == harness.run_info()["run_id"]
    assert rec["tflops"] == pytest.approx(harness.flops(1, 2, 40, 40, 16, True) / 2.0 / 1e9)
    bad = harness.measure(wrong, sets, True)
    assert bad["ok"] is False and "median_ms" not in bad and "correctness" in bad["skipped"]
    assert len(fake_gpu) == 1, "the wrong entry must not be timed"
    only = harness.measure(right, sets, True, timed=False)  # the check alone (the A/B checks a cell's entries first)
    assert only["ok"] and "median_ms" not in only and len(fake_gpu) == 1
    assert harness.measure(wrong, sets, True, timed=False)["ok"] is False
    chk = harness.check_entry(right, [(1, 2, 30, 20, 16, True, 1.0)], dtypes=[torch.float32])
    assert chk["ok"] and chk["problems"][0]["empty_rows"] == 2 * 10
    assert not harness.check_entry(wrong, [(1, 1, 8, 8, 16, False, 1.0)], dtypes=[torch.float32])["ok"]


def test_bench_kernels_runs_on_the_harness(fake_gpu, monkeypatch, tmp_path):
    import argparse

    from bench import bench_kernels

    monkeypatch.setattr(bench_kernels, "TOKENS", 64)
    monkeypatch.setattr(bench_kernels, "HIDDEN", 128)
    monkeypatch.setattr(bench_kernels, "QUICK_SEQS", (32,))
    monkeypatch.setattr(harness, "CHECK_PROBLEMS", [(1, 1, 9, 7, 16, True, 1.0)])
    monkeypatch.setattr(harness, "environment", lambda: dict(harness.run_info(), torch="x", timer="fake",
                                                             flops_formula="f"))
    args = argparse.Namespace(kernels="", quick=True, budget_s=100.0, max_call_s=10.0, target_s=0.1)
    res = bench_kernels.run(args)
    assert res["checks"]["right"]["ok"] and not res["checks"]["wrong"]["ok"]
    timed = [r for r in res["records"] if "median_ms" in r]
    assert {r["label"] for r in timed} == {"right"} and len(timed) == 4  # d 64/128, causal or not
    assert all(r["run_id"] == res["run_id"] for r in res["records"])
    assert "run id" in bench_kernels.markdown(res)


def test_bench_tc_bench_runs_on_the_harness(fake_gpu, monkeypatch, tmp_path):
    from bench import bench_tc

    monkeypatch.setattr(bench_tc, "TOKENS", 64)
    monkeypatch.setattr(bench_tc, "HIDDEN", 128)
    monkeypatch.setattr(harness, "environment", lambda: dict(harness.run_info(), torch="x", timer="fake"))
    assert bench_tc.main(["bench", "--out", str(tmp_path), "--seqs", "32", "--dtypes", "float16"]) == 0
    import json

    res = json.loads((tmp_path / "tc_bench.json").read_text())
    assert res["meta"]["run_id"] and {r["kernel"] for r in res["rows"] if "tflops" in r} == {"right"}
    assert (tmp_path / "tc_bench.md").read_text().count("right") >= 1


def test_bench_tc_check_and_sweep_run_on_the_harness(fake_gpu, monkeypatch, tmp_path):
    import json

    from bench import bench_tc

    monkeypatch.setattr(bench_tc, "TOKENS", 64)
    monkeypatch.setattr(bench_tc, "HIDDEN", 128)
    monkeypatch.setattr(bench_tc, "CHECK_SHAPES", [(1, 2, 33, 17, 64, True, 1.0), (1, 1, 20, 40, 128, False, 3.0)])
    assert bench_tc.main(["check", "--out", str(tmp_path)]) == 1, "the wrong entry must fail the check"
    rows = json.loads((tmp_path / "tc_check.json").read_text())
    assert {(r["kernel"], r["ok"]) for r in rows} == {("right", True), ("wrong", False)} and len(rows) == 8
    assert all(r["run_id"] for r in rows)
    assert bench_tc.main(["sweep", "--out", str(tmp_path), "--seqs", "32"]) == 0
    sweep = json.loads((tmp_path / "tc_sweep.json").read_text())
    assert {r["label"] for r in sweep if "tflops" in r} == {"right"}


def test_layouts_speed_times_the_layouts_in_balanced_rounds():
    """bench/layouts_speed.py time_rounds: each checked layout timed once a round, the rounds' orders a Williams design's
    rows, its record the mean of its rounds; a drift through the cell (each timing slower than the last) then costs
    every layout the same; a timing that raises marks its record and is counted (the layout is not timed again); a
    layout that failed its check is not timed."""
    from bench import layouts_speed as ls

    calls = []

    def time_fn(fn, sets):
        calls.append(sets)
        if sets == "raises":
            raise RuntimeError("launch failed")
        return dict(median_ms=1.0 + 0.1 * len(calls), min_ms=0.5, max_ms=2.0 + len(calls))

    checked = [({"ok": True}, "a"), ({"ok": True}, "b"), ({"ok": False}, None), ({"ok": True}, "c"), ({"ok": True}, "d")]
    assert ls.time_rounds(checked, None, time_fn, 8, warmup_rounds=0) == 0
    assert len(calls) == 32 and calls[:4] != calls[4:8] and all(sorted(calls[i:i + 4]) == list("abcd")
                                                                  for i in range(0, 32, 4))
    means = [rec.get("median_ms") for rec, _ in checked]
    assert means[2] is None
    assert means[0] == pytest.approx(means[1]) == pytest.approx(means[3]) == pytest.approx(means[4])
    assert means[0] == pytest.approx(1.0 + 0.1 * 16.5)  # the mean call index of 32
    assert len(checked[0][0]["pass_ms"]) == 8 and checked[0][0]["min_ms"] == 0.5
    assert checked[0][0]["max_ms"] == 2.0 + max(i + 1 for i, c in enumerate(calls) if c == "a")
    calls.clear()
    bad = [({"ok": True}, "a"), ({"ok": True}, "raises")]
    assert ls.time_rounds(bad, None, time_fn, 4) == 1  # one warm-up round, timed and dropped
    assert bad[1][0]["ok"] is False and "launch failed" in bad[1][0]["error"] and "median_ms" not in bad[1][0]
    assert calls.count("raises") == 1 and calls.count("a") == 5 and len(bad[0][0]["pass_ms"]) == 4
    assert bad[0][0]["pass_ms"][0] == pytest.approx(1.0 + 0.1 * 3)  # the warm-up's 1.1 is not among them
    # three layouts: rounded up to whole periods of the design (2 x 3 rows), and the drift still cancels
    calls.clear()
    three = [({"ok": True}, x) for x in "abc"]
    assert ls.time_rounds(three, None, time_fn, 4, warmup_rounds=0) == 0
    assert len(calls) == 18 and len({round(rec["median_ms"], 9) for rec, _ in three}) == 1


def test_the_clock_sampler_reads_nvidia_smi_lines_and_timings_carry_the_clock():
    """harness.parse_smi_line reads nvidia-smi's csv (hex throttle reasons included); clock_over takes the window's
    medians (instant power where read, else the averaged one); abba and rounds carry the mean clock of their timings
    only when every timing recorded one, and None otherwise, so a merged record cannot keep one pass's clock."""
    f = harness.SMI_FIELDS
    assert harness.parse_smi_line("1755, 690.12, 58, 0x0000000000000004", f) == {
        "clocks.sm": 1755.0, "power.draw.instant": 690.12, "temperature.gpu": 58.0, "clocks_throttle_reasons.active": 4}
    assert harness.parse_smi_line("1755, 690.12", f) is None
    assert harness.parse_smi_line("[N/A], 690, 58, 0x0", f)["clocks.sm"] is None
    samples = [{"clocks.sm": c, "power.draw.instant": 600.0 + c / 10} for c in (1500.0, 1700.0, 1600.0)]
    assert harness.clock_over(samples) == {"clock_mhz": 1600.0, "power_w": 760.0, "clock_samples": 3}
    assert harness.clock_over([{"clocks.sm": 1500.0, "power.draw": 650.0}])["power_w"] == 650.0
    assert harness.clock_over([]) == {}
    a = dict(median_ms=1.0, min_ms=0.9, max_ms=1.2, clock_mhz=1600.0, power_w=690.0, clock_samples=2)
    b = dict(median_ms=1.2, min_ms=1.1, max_ms=1.3, clock_mhz=1700.0, power_w=700.0, clock_samples=3)
    merged = harness.abba(a, b)
    assert merged["clock_mhz"] == pytest.approx(1650.0) and merged["power_w"] == pytest.approx(695.0)
    assert merged["clock_samples"] == 5
    rec = dict(a)
    rec.update(harness.abba(a, dict(b, clock_mhz=None, power_w=None)))
    assert rec["clock_mhz"] is None and rec["power_w"] is None and rec["median_ms"] == pytest.approx(1.1)
    assert harness.rounds([a, b, a])["clock_mhz"] == pytest.approx(1633.33, abs=0.01)


@pytest.mark.parametrize("script,works", [
    ('while true; do echo "1755, 690.1, 58, 0x4"; sleep 0.02; done', True),
    ("sleep 0.5; exit 3", False),  # a field set the driver refuses, slowly
    ("sleep 30", False),  # prints nothing
])
def test_the_clock_sampler_starts_only_on_a_parsable_line(tmp_path, script, works):
    """ClockSampler accepts an nvidia-smi that prints a parsable line within its wait, and otherwise tries the next
    field set and ends with no process (start_clock then returns None); a missing nvidia-smi is no error."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n" + script + "\n")
    fake.chmod(0o755)
    sampler = harness.ClockSampler(20, wait_s=0.3, cmd=str(fake))
    try:
        assert (sampler.proc is not None) == works
        if works:
            import time

            time.sleep(0.1)
            now = time.monotonic()
            assert harness.clock_over(sampler.window(now - 1, now))["clock_mhz"] == 1755.0
    finally:
        sampler.stop()
    assert harness.ClockSampler(20, wait_s=0.1, cmd=str(tmp_path / "absent")).proc is None


def test_ab_summary_reads_the_lead_in_cycles():
    """lab/ab_wgmma_speed.py clock_lines: each entry's median clock, and its time / cuDNN's in time and in cycles."""
    from lab import ab_wgmma_speed as ab

    rows = [dict(variant=v, dtype="float16", d=128, n=n, causal=True, median_ms=ms, clock_mhz=mhz)
            for n in (512, 4096) for v, ms, mhz in (("fa2_wgmma[default]", 0.50, 1575.0), ("sdpa_cudnn", 0.55, 1680.0))]
    lines = ab.clock_lines(rows)
    assert lines[0] == "SM clock (MHz), median over cells: fa2_wgmma[default] 1575, sdpa_cudnn 1680"
    assert lines[1] == ("time / cuDNN's, median over cells, in time | in cycles: fa2_wgmma[default] "
                        f"{0.50 / 0.55:.3f} | {0.50 * 1575 / (0.55 * 1680):.3f}")
    assert ab.clock_lines([dict(r, clock_mhz=None) for r in rows]) == []


def test_ring_speed_runs_on_gloo_and_cpu(tmp_path):
    """bench/ring_speed.py on two CPU ranks (tests/ring_workers.py: references for kernels, a fake clock): the checks
    against one process pass, every ring cell is checked, then timed with the slowest rank's time, and gets its
    speedup over one GPU; the JSON is written by rank 0."""
    import json

    from ring.launch import spawn
    from tests import ring_workers

    (ok, rows), _ = spawn(ring_workers.ring_speed_on_cpu, 2, str(tmp_path), timeout_s=90)
    assert ok and [r["ok"] for r in rows if r["kind"] == "check"] == [True] * 4
    timed = [r for r in rows if r["kind"] == "time" and r["label"].startswith(("ring", "one_gpu"))]
    assert len(timed) == 2 * 2 * 3 and all("median_ms" in r for r in timed)
    ring = [r for r in timed if r["label"].startswith("ring")]
    assert all(r["median_ms"] == 2.0 and r["rel_err"] < 1e-6 and r["speedup_vs_one_gpu"] == 0.5 for r in ring)
    saved = json.loads((tmp_path / "ring_speed.json").read_text())
    assert saved["rows"][0]["kind"] == "meta" and saved["rows"][0]["world"] == 2 and len(saved["rows"]) == len(rows)
