"""CPU checks of fa2_wgmma's builds and knobs (kernels.fa2_wgmma: CONFIGS, BUILDS, SIZE_RULES, KNOBS): every build
forward() runs and every named build compiles for sm_90a with NVRTC and no spills, ROW_SUM_MMA takes the row sum's
adds out of the softmax (SASS), the size rules pick what they say, the A/B harness (lab/ab_wgmma_speed.py) times and
reads its entries, and a misspelt, removed or impossible knob is refused. The GPU side (exactness vs float64) is
tests/test_kernels_wgmma_speed_gpu.py."""
from __future__ import annotations

import collections
import multiprocessing
import os
import re
import shutil
import subprocess
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from kernels import fa2_tc, fa2_wgmma, loader
from tests.tiers import one_per
from tests.toolchain import TOOLCHAIN, needs_nvrtc

# every build forward()'s rules run (SIZE_RULES and CONFIGS, with the knobs forward() adds), fp16 and bf16, and every
# named build (the rules' builds without those knobs, the cp.async ones) in fp16: NVRTC takes ~3 s a build on 2 cores
BUILDS = [(d, bf16, f"default-{i}", cfg) for i, (d, cfg) in enumerate(fa2_wgmma.default_builds()) for bf16 in (0, 1)]
BUILDS += [(d, 0, name, cfg) for d in fa2_wgmma.HEAD_DIMS for name, cfg in fa2_wgmma.named_builds(d).items()]
# The persistent builds' producer thread may spill up to this many bytes (every local-memory access after its
# setmaxnreg.dec, none in the consumers): d = 256's producer keeps 24 registers so that the consumers get 240 (O alone
# is 128), and the 3-CTA d = 64 builds' producer 24 at 80 registers at launch; at more, the consumers spill in the key loop
PRODUCER_SPILL_BYTES = 104


def _compile(item):
    d, bf16, cfg = item
    defs = fa2_wgmma.defines_for(d, bf16, cfg)
    loader.compile_cubin(fa2_wgmma.source_of(defs)[0], defines=defs, arch=fa2_wgmma.ARCH)


# a plain pytest compiles one build per head dim; the slow tier (pytest -m slow) every one
TIERED = one_per(BUILDS, key=lambda b: b[0], ids=[f"d{b[0]}-{'bf16' if b[1] else 'fp16'}-{b[2]}" for b in BUILDS])


@pytest.fixture(scope="module")
def precompiled(request):
    """NVRTC is single-threaded: the builds this run's tier tests compile in parallel into the disk cache the tests
    then read."""
    builds = BUILDS if request.config.option.markexpr else [p.values[0] for p in TIERED if not p.marks]
    if TOOLCHAIN is None and (os.cpu_count() or 1) > 1:
        with ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(_compile, [(d, bf16, cfg) for d, bf16, _, cfg in builds]))


@needs_nvrtc
@pytest.mark.parametrize("build", TIERED)
def test_speed_build_compiles_without_spills(build, precompiled):
    """No spills, except the persistent builds' producer thread within PRODUCER_SPILL_BYTES: then
    every local-memory access must come after the producer's setmaxnreg.dec (its code), none in the
    consumers' key loop."""
    d, bf16, name, cfg = build
    defs = fa2_wgmma.defines_for(d, bf16, cfg)
    src, kernel = fa2_wgmma.source_of(defs)
    res = loader.resource_usage(src, kernel, defines=defs, arch=fa2_wgmma.ARCH)
    assert 0 < res["registers"] <= 255
    # a serialised wgmma pipeline compiles and runs correctly, only slower (v3d's QK_AHEAD builds were: NOTES-tc.md v7)
    assert not res["wgmma_serialized"], f"ptxas serialised the wgmma pipeline: {res['wgmma_serialized']}"
    spill = max(res["spill_stores"], res["spill_loads"], res["local_bytes"])
    if spill and cfg.get("PERSISTENT"):
        assert spill <= PRODUCER_SPILL_BYTES, res
        if _nvdisasm():
            lines = _sass(defs).splitlines()
            split = next(i for i, x in enumerate(lines) if "USETMAXREG.DEALLOC" in x)
            local = [i for i, x in enumerate(lines) if re.search(r"\b(STL|LDL)(\.\S+)?\s", x)]
            assert local and min(local) > split, f"local memory in the consumers: {res}"
    else:
        assert spill == 0, res


NEUTRAL = [(d, cfg) for d, cfg in fa2_wgmma.default_builds()]


@needs_nvrtc
@pytest.mark.parametrize("build", one_per(NEUTRAL, key=lambda b: b[0], ids=[f"d{d}-{i}" for i, (d, _) in enumerate(NEUTRAL)]))
def test_register_neutral_knobs_keep_the_register_count(build, precompiled):
    """gpumodel.descriptors.registers_of matches forward()'s builds to the measured ones without DESC_STEP and WG_SKIP:
    ptxas must give each the registers of the same build without them."""
    from gpumodel.descriptors import REGISTER_NEUTRAL

    d, cfg = build
    def regs(c):
        defs = fa2_wgmma.defines_for(d, 0, c)
        return loader.resource_usage(fa2_wgmma.source_of(defs)[0], fa2_wgmma.source_of(defs)[1], defines=defs,
                                     arch=fa2_wgmma.ARCH)["registers"]
    assert regs(cfg) == regs({k: v for k, v in cfg.items() if k not in REGISTER_NEUTRAL})


def test_removed_knobs_are_refused_by_name():
    """The knobs only experiments used left the kernel (issue 40): a config naming one is refused with where it lives,
    by the launcher and by the A/B's default+KNOB=V builds (with_knobs); describe() still prices the three that
    forward()'s own builds ran with in committed results."""
    for knob in fa2_wgmma.REMOVED_KNOBS:
        with pytest.raises(ValueError, match=f"{knob}: removed with the experiments.*0bb604a"):
            fa2_wgmma.defines_for(128, 0, dict(fa2_wgmma.CONFIGS[128], **{knob: 1}))
        with pytest.raises(ValueError, match="0bb604a"):
            fa2_wgmma.with_knobs(128, 512, True, {knob: 1})
    src = (Path(fa2_wgmma.__file__).parent / "cuda" / "fa2_wgmma_tma.cu").read_text()
    src += (Path(fa2_wgmma.__file__).parent / "cuda" / "wgmma_fa2.cuh").read_text()
    assert not [k for k in fa2_wgmma.REMOVED_KNOBS if re.search(rf"#ifndef {k}\b", src)]  # no define sets them
    rule = fa2_wgmma.default_config(128, 512, True, True)
    half = fa2_wgmma.describe(128, causal=True, config=dict(rule, HALF_DIAG=1, MAX_TREE=1))
    assert half["half_diag"] and not fa2_wgmma.describe(128, causal=True, config=rule)["half_diag"]
    assert fa2_wgmma.describe(128, causal=True, config=dict(rule, CAUSAL_SECTION_KB=0))["causal_section_kb"] == 0


def test_unknown_knob_is_refused():
    with pytest.raises(ValueError, match=r"unknown config keys \['RESCALE_TRESHOLD'\]"):
        fa2_wgmma.defines_for(64, 0, dict(fa2_wgmma.CONFIGS[64], RESCALE_TRESHOLD=8))


def _nvdisasm() -> str | None:
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import nvidia.cu13 as cu13  # the pip CUDA 13 tools (nvidia-cuda-nvdisasm), where installed

        path = Path(list(cu13.__path__)[0]) / "bin" / "nvdisasm"
        return str(path) if path.exists() else None
    except ImportError:
        return None


def _sass(defs: dict) -> str:
    src, _ = fa2_wgmma.source_of(defs)
    cubin = loader.cubin_path(src, defines=defs, arch=fa2_wgmma.ARCH)
    return subprocess.run([_nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True).stdout


def _opcodes(defs: dict) -> collections.Counter:
    ops = collections.Counter()
    for line in _sass(defs).splitlines():
        if m := re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line):
            ops[m.group(1)] += 1
    return ops


@needs_nvrtc
@pytest.mark.skipif(_nvdisasm() is None, reason="nvdisasm not found")
def test_row_sum_mma_takes_the_row_sum_adds_out_of_the_softmax():
    """ROW_SUM_MMA: l comes from P V over [V | ones] (an m64n72 product at d = 64), so the softmax's one fp32 add
    per exponential goes: in each of its 4 copies (masked / unmasked, first step / loop) BLOCK_N/2 per thread."""
    cfg = NO_RS
    base = fa2_wgmma.defines_for(64, 0, cfg)
    fast = fa2_wgmma.defines_for(64, 0, dict(cfg, ROW_SUM_MMA=1))
    for defs in (base, fast):
        loader.compile_cubin(fa2_wgmma.source_of(defs)[0], defines=defs, arch=fa2_wgmma.ARCH)
    a, b = _opcodes(base), _opcodes(fast)
    fadd = lambda ops: sum(n for op, n in ops.items() if op.startswith("FADD"))  # noqa: E731
    assert fadd(a) - fadd(b) >= 4 * (cfg["BLOCK_N"] // 2), (fadd(a), fadd(b))
    assert b["MUFU.EX2"] >= 4 * (cfg["BLOCK_N"] // 2), "P's exponentials stay on the MUFU"
    assert "HGMMA.64x72x16" not in _sass(base) and "HGMMA.64x72x16" in _sass(fast)


NO_RS = {k: v for k, v in fa2_wgmma.CONFIGS[64].items() if k != "ROW_SUM_MMA"}  # the shipped d = 64 build before v5a


def test_row_sum_mma_is_refused_where_it_does_not_exist():
    with pytest.raises(ValueError, match="ROW_SUM_MMA is a TMA build at d = 64 only"):
        fa2_wgmma.defines_for(128, 0, dict(fa2_wgmma.CONFIGS[128], ROW_SUM_MMA=1))
    with pytest.raises(ValueError, match="ROW_SUM_MMA"):
        fa2_wgmma.defines_for(64, 0, dict(BLOCK_N=128, NWG=2, ROW_SUM_MMA=1))  # cp.async build


def test_ab_summary_reads_its_rows():
    """lab/ab_wgmma_speed.py's table: variant time over base time, the best build over cuDNN, failures."""
    from lab import ab_wgmma_speed as ab

    def row(v, ms, ok=True, n=4096):
        return dict(variant=v, dtype="float16", d=64, n=n, causal=False, median_ms=ms, tflops=100.0 / ms, ok=ok)

    rows = [row("sdpa_cudnn", 1.0), row("sdpa_flash", 1.5), row("fa2_wgmma[base]", 1.2),
            row("fa2_wgmma[poly]", 0.9), row("fa2_wgmma[rescale]", 1.3, ok=False)]
    text = ab.summary(dict(rows=rows, not_run=[dict(d=256)]))
    line = next(x for x in text.splitlines() if x.startswith("float16"))
    assert "0.750" in line and "fail" in line and line.rstrip().endswith("1.111"), line
    assert "cells with best/cuDNN >= 1.0: 1 of 1" in text
    assert "failed or skipped entries: 1" in text and "cells not run (time budget): 1" in text
    # a run without base (forward()'s default against candidates): ratios to the first build, not "fail"
    rows = [row("sdpa_cudnn", 1.0), row("fa2_wgmma[default]", 1.0), row("fa2_wgmma[bc128-dyn-oq]", 0.9)]
    line = next(x for x in ab.summary(dict(rows=rows)).splitlines() if x.startswith("float16"))
    assert "0.900" in line and "fail" not in line, line


def test_sanitizer_runs_the_builds_at_scale():
    """issue 14 item 4: the first 4 fa2_wgmma sanitizer shapes (racecheck's) cover d = 64/128/256/96 with each
    K/V ring slot refilled at least 8 times by CONFIGS[d], one tile per CTA and persistent, and several Q blocks per
    head."""
    from bench import sanitize

    shapes = sanitize.shapes_for("fa2_wgmma", shapes=[], kernel_shapes=4)
    for d in fa2_wgmma.HEAD_DIMS:
        for cfg in (fa2_wgmma.CONFIGS[d], dict(fa2_wgmma.CONFIGS[d], PERSISTENT=2)):
            defs = fa2_wgmma.defines_for(d, 0, cfg)
            assert any(s[4] == d and s[3] >= 8 * defs["STAGES"] * defs["BLOCK_N"]
                       and s[2] >= 2 * fa2_wgmma.block_m(defs) for s in shapes), (d, cfg)


def test_size_rule_picks_the_first_matching_build():
    b64, b128 = fa2_wgmma.BUILDS[64], fa2_wgmma.BUILDS[128]
    cp, tma, wide = b64["cp.async-small"], b64["small-tma3-dyn-od2"], b128["rescale"]
    rules = {64: [(1024, "cp.async-small", None), (2048, "small-tma3-dyn-od2", None)],
             128: [(1024, "cp.async", "causal"), (None, "rescale", None)]}
    assert fa2_wgmma.choose_config(64, 1000, True, rules) is cp
    assert fa2_wgmma.choose_config(64, 1000, False, rules) is tma, "cp.async builds: contiguous, equal heads only"
    assert fa2_wgmma.choose_config(64, 2000, True, rules) is tma
    assert fa2_wgmma.choose_config(64, 4096, True, rules) is None
    assert fa2_wgmma.choose_config(96, 100, True, rules) is None
    assert fa2_wgmma.choose_config(128, 1000, True, rules, causal=True) is b128["cp.async"]
    assert fa2_wgmma.choose_config(128, 1000, True, rules, causal=False) is wide, "a causal entry skips non-causal"
    assert fa2_wgmma.choose_config(128, 10**6, True, rules) is wide, "None: any Nk"
    for d, rules_d in fa2_wgmma.SIZE_RULES.items():  # every rule names a TMA build of BUILDS[d]
        assert all(fa2_wgmma.BUILDS[d][name].get("TMA") and only in (None, "causal") for _, name, only in rules_d), d


def test_d64_causal_short_rows_run_the_64_key_four_slot_build_to_896():
    """stop 23 (results/fwd_wgmma_d64_causal_rule/bc64_vs_bc96_run1, d64c23b): the 3-CTA Bc = 64 four-slot build runs d = 64 causal rows up to
    Nk = 896 (0.947-0.989 of the Bc = 96 build's time at 768 and 896 in two runs each), Bc = 96 from 897 keys (level at
    960 and 1k, slower at 1.5k)."""
    bc64 = fa2_wgmma.BUILDS[64]["small-tma3-bc64-dyn-od2-s4"]
    assert (bc64["BLOCK_N"], bc64["STAGES"], bc64["MIN_BLOCKS"]) == (64, 4, 3)
    for n_k in (1, 512, 640, 768, 896):
        assert fa2_wgmma.choose_config(64, n_k, True, causal=True) is bc64, n_k
    assert fa2_wgmma.choose_config(64, 897, True, causal=True) is fa2_wgmma.BUILDS[64]["small-tma3-dyn-od2"]
    assert fa2_wgmma.choose_config(64, 768, True, causal=False)["NWG"] == 3, "non-causal keeps Br = 192"


def test_the_model_describes_the_build_the_size_rule_runs():
    """fa-traffic predict at a short Nk models the SIZE_RULES build forward() runs; the benchmark files timed before
    the rule keep the CONFIGS[d] of their day (results/fa2_wgmma_runs.json)."""
    from gpumodel.descriptors import describe
    from gpumodel.measured import bench_cells

    # d = 96 at 8k: a cell no SIZE_RULES entry takes (d = 128 has one at every Nk since the threshold, d = 256 since v13)
    small, large = describe("fa2_wgmma", 64, n_q=512, n_k=512), describe("fa2_wgmma", 96, n_q=8192, n_k=8192)
    rule = fa2_wgmma.choose_config(64, 512, True)
    assert rule is not None and (small.block_q, small.block_k) == (64 * rule["NWG"], rule["BLOCK_N"])
    assert small.grid == ("persistent" if rule.get("PERSISTENT") else "q_blocks")
    assert small.next_tile_prefetch == bool(rule.get("O_TILE")), "O_TILE: the next tile's Q loads under this one"
    assert "SIZE_RULES" in small.source and "CONFIGS" in large.source
    assert fa2_wgmma.choose_config(96, 8192, True) is None and large.block_k == fa2_wgmma.CONFIGS[96]["BLOCK_N"]
    # d = 256 since v13: persistent at every Nk, O from registers (O_DIRECT), so the next tile's Q loads under this one
    d256 = describe("fa2_wgmma", 256, n_q=8192, n_k=8192)
    assert d256.grid == "persistent" and d256.next_tile_prefetch and d256.options.get("O_DIRECT") == 2
    # d = 64 at Nk = 2048: causal and not run different builds, and the model follows
    c2k, n2k = (describe("fa2_wgmma", 64, causal=c, n_q=2048, n_k=2048) for c in (True, False))
    assert (c2k.block_q, n2k.block_q) == (64, 192) and "SIZE_RULES" in n2k.source
    old = [c for c in bench_cells() if c["kernel"] == "fa2_wgmma" and c["d"] == 64 and c["n_k"] <= 2048
           and c["label"] == "fa2_wgmma"]
    ruled = [fa2_wgmma.BUILDS[d][name] for d, rules in fa2_wgmma.SIZE_RULES.items() for _, name, _ in rules]
    assert old and all(c["options"].get("config") and c["options"]["config"] not in ruled for c in old)


def test_ab_variants_can_be_limited_to_head_dims():
    from lab import ab_wgmma_speed as ab

    variants = "base,cp.async@64+128,small-tma3-dyn-od2@64"
    assert ab.parse_variants(variants) == [("base", None), ("cp.async", {64, 128}), ("small-tma3-dyn-od2", {64})]
    names = [e.label for e in ab.entries(128, ab.parse_variants(variants), 512, ("cudnn",))]
    assert names == ["fa2_wgmma[base]", "fa2_wgmma[cp.async]", "sdpa_cudnn"]
    ents = ab.entries(64, ab.parse_variants("base,default,small-tma3-dyn-od2@64"), 8192, ())
    assert [e.label for e in ents] == ["fa2_wgmma[default]", "fa2_wgmma[base]", "fa2_wgmma[small-tma3-dyn-od2]"]
    assert ents[0].config is None  # forward() picks: the size rule
    assert ents[2].config == fa2_wgmma.BUILDS[64]["small-tma3-dyn-od2"]  # a named build at any N


def test_ab_decision_rule():
    """A build faster in every cell goes into CONFIGS, one faster only at small N into SIZE_RULES."""
    from lab import ab_wgmma_speed as ab

    rows = []
    for n in (512, 2048, 8192):
        rows += [dict(variant="fa2_wgmma[base]", dtype="float16", d=64, n=n, causal=False, median_ms=1.0, ok=True),
                 dict(variant="fa2_wgmma[dynamic]", dtype="float16", d=64, n=n, causal=False,
                      median_ms=0.9 if n <= 2048 else 1.05, ok=True),
                 dict(variant="fa2_wgmma[ahead]", dtype="float16", d=64, n=n, causal=False, median_ms=0.95, ok=True),
                 dict(variant="fa2_wgmma[poly]", dtype="float16", d=64, n=n, causal=False, median_ms=1.1, ok=True)]
    calls = {line.split()[1]: line.split("  ")[-1].strip() for line in ab.decisions(rows)[1:]}
    assert calls == {"ahead": "CONFIGS[64]", "dynamic": "SIZE_RULES[64] (Nk <= 2048)", "poly": "off"}, calls
    # with causal cells beside, the rule is also called per flag (SIZE_RULES entries may be causal-only)
    causal = [dict(r, causal=True, median_ms=r["median_ms"] * (0.8 if r["variant"] == "fa2_wgmma[poly]" else 1))
              for r in rows if r["variant"] in ("fa2_wgmma[base]", "fa2_wgmma[poly]")]
    lines = ab.decisions(rows + causal)
    assert any("poly" in x and x.endswith("CONFIGS[64]  [causal cells]") for x in lines), lines
    assert any("poly" in x and x.endswith("off  [non-causal cells]") for x in lines), lines


def test_row_sum_mma_is_an_fp16_build():
    """bf16 keeps the fp32 row sum (P's bf16 rounding would move lse past its 2e-3): the same build as without."""
    cfg = dict(fa2_wgmma.CONFIGS[64], ROW_SUM_MMA=1)
    assert fa2_wgmma.defines_for(64, 0, cfg)["ROW_SUM_MMA"] == 1
    assert fa2_wgmma.defines_for(64, 1, cfg) == fa2_wgmma.defines_for(64, 1, NO_RS)


def test_runs_timed_before_row_sum_mma_are_modelled_without_it():
    """The benchmark files timed before v5a ran d = 64 without ROW_SUM_MMA (results/fa2_wgmma_runs.json)."""
    from gpumodel.measured import bench_cells

    assert fa2_wgmma.CONFIGS[64].get("ROW_SUM_MMA") == 1
    old = [c for c in bench_cells() if c["kernel"] == "fa2_wgmma" and c["d"] == 64 and c["label"] == "fa2_wgmma"]
    assert old and all("ROW_SUM_MMA" not in c["options"]["config"] for c in old)


def test_the_model_prices_row_sum_mma():
    """The descriptor says where l is summed: 8 more P V columns on the tensor cores, one add fewer per score."""
    from gpumodel import gpu_model
    from gpumodel.descriptors import describe

    no_rs = NO_RS
    base = describe("fa2_wgmma", d=64, dtype="fp16", config=no_rs)
    rs = describe("fa2_wgmma", d=64, dtype="fp16", config=dict(no_rs, ROW_SUM_MMA=1))
    assert (base.row_sum_cols, rs.row_sum_cols) == (0, 8)
    params = gpu_model.load_params()
    terms = [gpu_model.tile_terms(gpu_model.prepare(desc, 4, 32, 4096, 4096, 64, "fp16", False), params)
             for desc in (base, rs)]
    assert terms[1]["tensor"] == pytest.approx(terms[0]["tensor"] * (2 * 64 + 2 * 72) / (4 * 64))
    assert terms[1]["softmax"] < terms[0]["softmax"]


def _fake_ab(monkeypatch, tmp_path, forwards: dict, measure, time_fn, seqs="512"):
    """lab/ab_wgmma_speed.run on the CPU: one fa2_wgmma[name] entry per forward, the harness's check (measure) and
    timer (time_fn) replaced; returns the run's arguments (abba, entries in the listed order)."""
    import argparse
    import types

    from lab import ab_wgmma_speed as ab
    from bench import harness

    monkeypatch.setattr(harness, "input_sets", lambda *a, **k: [None])
    monkeypatch.setattr(harness, "environment", lambda: {})
    monkeypatch.setattr(harness, "measure", measure)
    monkeypatch.setattr(harness, "time_fn", time_fn)
    monkeypatch.setattr(harness, "start_clock", lambda *a, **k: None)  # no nvidia-smi poller from a CPU test
    same = [types.SimpleNamespace(label=f"fa2_wgmma[{x}]", forward=f) for x, f in forwards.items()]
    monkeypatch.setattr(ab, "entries", lambda d, variants, n, sdpa: same)
    return argparse.Namespace(variants="a", sdpa="", dims="64", seqs=seqs, dtypes="float16", out=str(tmp_path),
                              budget_s=1e9, warmup_ms=1, rep_ms=1, order="abba", rotate=False)


def test_ab_four_passes_alternate_and_cancel_a_drift(monkeypatch, tmp_path):
    """--passes 4 (with --order abba): the cell's entries in order, reversed, in order, reversed; each median the mean of
    its four passes, so a linear drift through the cell still gives identical builds the same time."""
    import argparse

    from lab import ab_wgmma_speed as ab

    clock, order = {"t": 0}, []

    def measure(e, sets, causal, timed=True, **kw):
        return dict(flops=1e9, ok=True)

    def time_fn(fn, sets, **kw):
        fn(None, None, None)
        clock["t"] += 1
        return dict(median_ms=100.0 + clock["t"], min_ms=0.0, max_ms=9e9)
    args = _fake_ab(monkeypatch, tmp_path, {x: lambda q, k, v, c, x=x: order.append(x) for x in "abc"}, measure,
                    time_fn)
    res = ab.run(argparse.Namespace(**dict(vars(args), passes=4)))
    assert order[:12] == list("abccbaabccba")
    first = res["rows"][:3]
    assert [len(r["pass_ms"]) for r in first] == [4, 4, 4]
    assert {r["median_ms"] for r in first} == {100.0 + 6.5}


def test_ab_abba_order_cancels_a_drift(monkeypatch, tmp_path):
    """--order abba times a cell's entries in order, then in reverse, and keeps the mean: a clock that slows
    linearly through the cell then gives identical builds the same time whatever their position."""
    import argparse

    from lab import ab_wgmma_speed as ab

    clock = {"t": 100}

    def tick():  # every timing costs 1 ms more than the one before it (the drift; passes within RETIME_SPREAD)
        clock["t"] += 1
        return float(clock["t"])

    order = []

    def measure(e, sets, causal, timed=True, **kw):  # the A/B checks every entry first (timed=False), then times
        order.append(e.label)
        return dict(flops=1e9, ok=True, **(dict(median_ms=tick(), min_ms=0.0, max_ms=9e9) if timed else {}))

    def time_fn(fn, sets, **kw):
        fn(None, None, None)
        return dict(median_ms=tick(), min_ms=0.0, max_ms=9e9, clock_mhz=1500.0 + clock["t"])
    args = _fake_ab(monkeypatch, tmp_path, {x: lambda q, k, v, c, x=x: order.append(x) for x in "abc"}, measure,
                    time_fn)
    res = ab.run(args)
    # each row keeps the mean SM clock of its two passes (harness.abba), as its time
    assert res["rows"][0]["clock_mhz"] == pytest.approx(1500.0 + 103.5)
    # causal and not: the three checks, then the passes in order and reversed
    assert order == 2 * ["fa2_wgmma[a]", "fa2_wgmma[b]", "fa2_wgmma[c]", "a", "b", "c", "c", "b", "a"]
    meds = [r["median_ms"] for r in res["rows"]]
    assert meds == [103.5] * 3 + [109.5] * 3 and res["rows"][0]["pass_ms"] == [101.0, 106.0]
    assert "retimed_from_ms" not in res["rows"][0]
    assert res["env"]["order"] == "abba"
    # rotated (the default): the second cell starts at its second entry, and the drift still cancels
    order.clear()
    clock["t"] = 100
    res = ab.run(argparse.Namespace(**dict(vars(args), rotate=True)))
    assert order == ["fa2_wgmma[a]", "fa2_wgmma[b]", "fa2_wgmma[c]", "a", "b", "c", "c", "b", "a",
                     "fa2_wgmma[b]", "fa2_wgmma[c]", "fa2_wgmma[a]", "b", "c", "a", "a", "c", "b"]
    assert [r["median_ms"] for r in res["rows"]] == [103.5] * 3 + [109.5] * 3
    assert [r["position"] for r in res["rows"]] == [0, 1, 2] * 2 and res["rows"][3]["variant"] == "fa2_wgmma[b]"


def test_ab_times_a_disturbed_cell_again(monkeypatch, tmp_path):
    """A cell where one entry's two passes differ by more than RETIME_SPREAD (a spike) is timed again, every entry,
    and the table keeps the second timing; the first stays in the row (retimed_from_ms). A cell within it is not."""
    from lab import ab_wgmma_speed as ab

    calls, fwd = [], []

    def measure(e, sets, causal, timed=True, **kw):  # the check (the A/B times later)
        calls.append(e.label)
        return dict(flops=1e9, ok=True)

    def time_fn(fn, sets, **kw):
        fn(None, None, None)
        spike = fwd[-1] == ("b", True) and fwd.count(("b", True)) == 1  # b's first causal pass
        return dict(median_ms=3.0 if spike else 1.0, min_ms=1.0, max_ms=3.0)
    args = _fake_ab(monkeypatch, tmp_path, {x: lambda q, k, v, c, x=x: fwd.append((x, c)) for x in "ab"}, measure,
                    time_fn)
    rows = ab.run(args)["rows"]
    assert calls == ["fa2_wgmma[a]", "fa2_wgmma[b]"] * 3  # non-causal once; causal twice (the spike)
    plain, causal = rows[:2], rows[2:]
    assert all("retimed_from_ms" not in r and r["median_ms"] == 1.0 for r in plain)
    assert [r["retimed_from_ms"] for r in causal] == [[1.0, 1.0], [3.0, 1.0]]
    assert all(r["median_ms"] == 1.0 and r["pass_ms"] == [1.0, 1.0] for r in causal)


def test_named_build_names_every_build_the_ab_names():
    """kernels.fa2_wgmma.named_build: CONFIGS ("base") and BUILDS by name (the A/B's and the visit scripts' names);
    the cp.async kernel by "cp.async"; an A/B candidate of issue 14 says where it lives."""
    assert fa2_wgmma.named_build(64, "small-tma3-dyn-od2") is fa2_wgmma.BUILDS[64]["small-tma3-dyn-od2"]
    assert fa2_wgmma.named_build(128, "base") == fa2_wgmma.CONFIGS[128]
    for d in fa2_wgmma.CP_ASYNC_HEAD_DIMS:
        defs = fa2_wgmma.defines_for(d, 0, fa2_wgmma.named_build(d, "cp.async"))
        assert fa2_wgmma.source_of(defs) == (fa2_wgmma.SOURCE, fa2_wgmma.KERNEL) and fa2_wgmma.block_m(defs) == 128
    with pytest.raises(KeyError, match="no build named 'br192' at d=128.*0bb604a"):
        fa2_wgmma.named_build(128, "br192")


def test_causal_section_default_matches_the_kernel():
    """The model's persistent causal order (gpumodel.gpu_model.prepare) uses the kernel's section size."""
    src = (Path(fa2_wgmma.__file__).parent / "cuda" / "fa2_wgmma_tma.cu").read_text()
    m = re.search(r"#define CAUSAL_SECTION_KB (\d+)", src)
    assert m and int(m.group(1)) == fa2_wgmma.CAUSAL_SECTION_KB
    desc = fa2_wgmma.describe(128, causal=True, n_k=2048)
    assert desc["grid"] == "persistent" and desc["causal_section_kb"] == fa2_wgmma.CAUSAL_SECTION_KB
    assert fa2_wgmma.describe(128, causal=True, config=fa2_wgmma.CONFIGS[128])["causal_section_kb"] == 0


def test_desc_step_is_the_descriptor_of_the_stepped_address():
    """DESC_STEP (wgmma_fa2.cuh desc_step): desc(a + off) == desc(a) + (off >> 4) for 16-byte aligned shared
    addresses below 2^18, the only ones a CTA has (every build's smem is under 228 KB): the address field (bits
    0-13) never carries into the leading-byte offset."""
    def desc(addr, lbo, sbo):  # desc_sw128, as in wgmma_fa2.cuh
        return ((addr & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1 << 62)

    for d, cands in [(d, list(fa2_wgmma.named_builds(d).values())) for d in fa2_wgmma.HEAD_DIMS]:
        for c in cands:
            assert fa2_wgmma.smem_bytes(fa2_wgmma.defines_for(d, 0, c)) < 1 << 18
    top = 228 * 1024
    for a in range(0, top, 1040):  # 16-byte aligned bases across the window
        a -= a % 16
        for off in (0, 32, 96, 2048, 16 * 128 * 7, 128 * 128 * 3 + 96, top - 16 - a):
            if a + off < top:
                for lbo in (16, 128 * 128, 176 * 128):
                    assert desc(a + off, lbo, 1024) == desc(a, lbo, 1024) + (off >> 4)


def _walked_by_mask(cfg, n_q, n_k):
    """causal_walk_steps from the causal mask itself: per Q block and warpgroup, the leading key blocks (j = T-1 down)
    in which none of its rows below Nq sees a key, capped so that one block is always run."""
    nwg, bc = cfg.get("NWG", 2), cfg["BLOCK_N"]
    walked = total = 0
    for m0 in range(0, n_q, 64 * nwg):
        rows = range(m0, min(m0 + 64 * nwg, n_q))
        keys = max((min(n_k, r + 1 + n_k - n_q) for r in rows), default=0)
        t = -(-max(0, keys) // bc)
        for cg in range(nwg):
            mine = [r for r in rows if m0 + 64 * cg <= r < m0 + 64 * cg + 64]
            if not mine:
                continue
            sk = 0
            for j in range(t - 1, 0, -1):  # block 0 always runs
                if any(r + n_k - n_q >= j * bc for r in mine):  # row r sees key j*bc
                    break
                sk += 1
            walked, total = walked + sk, total + t
    return walked, total


def test_causal_walk_steps_follows_the_mask():
    """v11 WG_CAUSAL_SKIP's walk count (kernels.fa2_wgmma.causal_walk_steps, the kernel's formula) against the mask, on
    every build the knob's GPU tests run, at those tests' shapes and a grid of ragged ones; each build walks somewhere."""
    from tests.test_kernels_wgmma_speed_gpu import CSKIP, CSKIP_SHAPES

    for d, cfg in CSKIP:
        assert cfg["WG_CAUSAL_SKIP"] == 1 and cfg.get("NWG", 2) >= 2
        shapes = CSKIP_SHAPES + [(n_q, n_k) for n_q in (1, 63, 65, 200, 333) for n_k in (1, 64, 150, 333, 700)]
        for n_q, n_k in shapes:
            assert fa2_wgmma.causal_walk_steps(cfg, n_q, n_k) == _walked_by_mask(cfg, n_q, n_k), (d, cfg, n_q, n_k)
        assert any(fa2_wgmma.causal_walk_steps(cfg, n_q, n_k)[0] for n_q, n_k in CSKIP_SHAPES), (d, cfg)
    # d = 256's Bc = 64 at N = 512: warpgroup 0 walks the diagonal block of each of the 4 Q blocks (4 of 40 steps);
    # Br = Bc = 128 at Nq = Nk has nothing to walk
    assert fa2_wgmma.causal_walk_steps(fa2_wgmma.BUILDS[256]["bc64-dyn-od2"], 512, 512) == (4, 40)
    assert fa2_wgmma.causal_walk_steps(fa2_wgmma.BUILDS[128]["bc128-dyn-oqt-r"], 512, 512) == (0, 20)


def test_ab_default_rows_carry_forward_knobs_to_the_model(tmp_path, monkeypatch):
    """An A/B `default` row records the knobs forward() added (lab/ab_wgmma_speed.py `knobs`), and the GPU model's
    reader puts them in the build it describes, so idle_skip / causal_walk reach validate; rows without them (runs before
    stop 19) stay the bare rule build."""
    import json

    from gpumodel import measured

    cfg = fa2_wgmma.choose_config(256, 512, True, causal=True)
    row = dict(variant="fa2_wgmma[default]", dtype="float16", d=256, n=512, b=32, h=8, causal=True, median_ms=0.2,
               ok=True, config=cfg)
    run = tmp_path / "run"
    run.mkdir()
    (run / measured.AB_FILE).write_text(json.dumps({"rows": [dict(row, knobs=fa2_wgmma.default_knobs(cfg)), row]}))
    monkeypatch.setattr(measured, "RESULTS", tmp_path)
    with_knobs, bare = (c["options"]["config"] for c in measured.ab_cells())
    assert with_knobs == fa2_wgmma.default_config(256, 512, True, causal=True) and with_knobs["WG_CAUSAL_SKIP"] == 1
    assert bare == cfg
    from gpumodel.descriptors import describe

    assert describe("fa2_wgmma", 256, config=with_knobs).causal_walk


def test_ab_rotates_the_entries_and_times_a_control():
    """lab/ab_wgmma_speed.py: each cell's entries in the next row of a Williams design (over a run every entry takes
    every slot of the abba order and follows every other entry equally often), and default-again times forward()'s
    build as a second entry (the run's order/noise floor)."""
    from lab import ab_wgmma_speed as ab

    from collections import Counter

    for n in range(1, 8):  # a Williams design: every slot, and every neighbour, equally often over its rows
        entries = [chr(ord("a") + k) for k in range(n)]
        rows = [ab.rotate(entries, i) for i in range(n if n % 2 == 0 else 2 * n)]
        assert all(sorted(r) == entries for r in rows)  # nothing lost or repeated
        slots = Counter((e, p) for r in rows for p, e in enumerate(r))
        assert len(slots) == n * n and len(set(slots.values())) == 1
        if n >= 3:
            pairs = Counter(p for r in rows for p in zip(r, r[1:]))
            assert len(pairs) == n * (n - 1) and len(set(pairs.values())) == 1
    assert ab.rotate([], 3) == [] and ab.rotate(list("abcd"), 4) == ab.rotate(list("abcd"), 0)
    labels = [e.label for e in ab.entries(64, ab.parse_variants("default,default-again"), 512, ())]
    assert labels == ["fa2_wgmma[default]", "fa2_wgmma[default-again]"]


def test_builds_that_do_not_fit_the_sm_are_refused():
    """A build whose shared memory cannot launch, or cannot hold MIN_BLOCKS CTAs on one SM (it would run at fewer and
    time as another build: d = 128's old TMA small-tma, 144 B over two CTAs), is a ValueError before any compile."""
    with pytest.raises(ValueError, match="do not fit"):
        fa2_wgmma.defines_for(128, 0, dict(TMA=1, BLOCK_N=96, NWG=1, MIN_BLOCKS=2, PINGPONG=0))
    with pytest.raises(ValueError, match="per CTA"):
        fa2_wgmma.defines_for(128, 0, dict(fa2_wgmma.BUILDS[128]["bc128-dyn-oqt-r"], STAGES=3))
    with pytest.raises(ValueError, match="do not fit"):  # the 3-CTA Bc = 96 build with four slots: 3 x 105 KB
        fa2_wgmma.defines_for(64, 0, dict(fa2_wgmma.BUILDS[64]["small-tma3-dyn-od2"], STAGES=4))
    fits = fa2_wgmma.defines_for(128, 0, dict(fa2_wgmma.BUILDS[128]["bc128-dyn-oqt-r"], O_TILE=0, O_TMA=0,
                                              O_DIRECT=2, STAGES=3))
    assert fa2_wgmma.smem_bytes(fits) <= fa2_tc.SMEM_PER_BLOCK  # O's tile freed makes room for a third slot
    # the boundary: d = 128's cp.async two-CTA build fills the SM to the byte, and is taken
    exact = fa2_wgmma.defines_for(128, 0, fa2_wgmma.BUILDS[128]["cp.async-small"])
    assert 2 * (fa2_wgmma.smem_bytes(exact) + 1024) == fa2_tc.SMEM_PER_SM


def test_ab_summary_counts_cudnn_on_its_faster_pass():
    """The summary's second count divides each entry's faster pass (cuDNN's first pass runs 3-7% faster than its
    second), and it prints each library's first / second pass ratio."""
    from lab import ab_wgmma_speed as ab

    def row(v, passes):
        return dict(variant=v, dtype="float16", d=64, n=512, causal=False, median_ms=sum(passes) / 2, ok=True,
                    tflops=1e9 / (sum(passes) / 2) / 1e9, pass_ms=passes)
    rows = [row("fa2_wgmma[default]", [1.0, 1.0]), row("sdpa_cudnn", [0.95, 1.1])]  # mean 1.025: ahead; fast: behind
    text = ab.summary(dict(rows=rows))
    assert "cells with best/cuDNN >= 1.0: 1 of 1" in text
    assert "faster pass: >= 1.0 in 0 of 1 cells, worst 0.950" in text
    assert "sdpa_cudnn 0.864" in text and "fa2_wgmma[default] 1.000" in text


def test_ab_an_error_while_timing_fails_the_entry_not_the_run(monkeypatch, tmp_path):
    """An exception inside a timing pass (an OOM, a launch failure) marks that entry failed, as harness.measure marks
    one, and the other entries and cells are still timed."""
    from lab import ab_wgmma_speed as ab

    def time_fn(fn, sets, **kw):
        fn(None, None, None)
        return dict(median_ms=1.0, min_ms=1.0, max_ms=1.0)

    def boom(q, k, v, c):
        raise RuntimeError("CUDA out of memory")
    args = _fake_ab(monkeypatch, tmp_path, {"a": lambda q, k, v, c: None, "b": boom},
                    lambda e, sets, causal, timed=True, **kw: dict(flops=1e9, ok=True), time_fn, seqs="512,1024")
    rows = ab.run(args)["rows"]
    assert len(rows) == 8  # two N, causal and not, both entries: the run went on
    assert all(r["median_ms"] == 1.0 for r in rows if r["variant"] == "fa2_wgmma[a]")
    bad = [r for r in rows if r["variant"] == "fa2_wgmma[b]"]
    assert all(r["ok"] is False and "out of memory" in r["skipped"] and r["median_ms"] is None for r in bad)


def test_ab_decisions_per_flag_keep_the_reference():
    """The per-flag lines divide by the same reference build as the table (forward()'s default), not by whichever
    build the rotation timed first in the first causal cell."""
    from lab import ab_wgmma_speed as ab

    def row(v, causal, ms):
        return dict(variant=v, dtype="float16", d=64, n=512, causal=causal, median_ms=ms, ok=True)
    rows = [row("fa2_wgmma[default]", False, 1.0), row("fa2_wgmma[x]", False, 0.9),
            row("fa2_wgmma[x]", True, 0.9), row("fa2_wgmma[default]", True, 1.0)]  # causal cell: x timed first
    assert ab.reference(rows) == "fa2_wgmma[default]"
    causal_lines = [line for line in ab.decisions(rows) if line.endswith("[causal cells]")]
    assert causal_lines and all(" x " in line and "0.900" in line for line in causal_lines)


def test_ab_decisions_divide_by_the_control_too():
    """Each build's line also gives its geomean against the control (default-again: forward()'s build timed twice), so
    a gain inside the run's order and noise floor shows as such ('-' when the run timed no control)."""
    from lab import ab_wgmma_speed as ab

    def row(v, n, ms):
        return dict(variant=v, dtype="float16", d=128, n=n, causal=False, median_ms=ms, ok=True)
    rows = [row("fa2_wgmma[default]", n, 1.0) for n in (512, 1024)] + \
        [row(ab.CONTROL, 512, 1.02), row(ab.CONTROL, 1024, 1.02), row("fa2_wgmma[x]", 512, 0.98),
         row("fa2_wgmma[x]", 1024, 0.98)]
    lines = {line.split()[1]: line for line in ab.decisions(rows)[1:]}
    assert "/ctrl" in ab.decisions(rows)[0]
    assert lines["x"].split()[-2] == "0.961" and lines["x"].endswith("CONFIGS[128]")  # 0.98 / 1.02
    assert lines["default-again"].split()[-2] == "-"  # the control against itself: not given
    alone = ab.decisions([r for r in rows if r["variant"] != ab.CONTROL])
    assert alone[1].split()[-2] == "-"


def _every_real_build():
    """(d, where, config) of every build this repo names: CONFIGS, BUILDS, forward()'s rule builds with their knobs."""
    out = [(d, f"named_builds({d})[{n!r}]", c) for d in fa2_wgmma.HEAD_DIMS for n, c in fa2_wgmma.named_builds(d).items()]
    return out + [(d, "default_builds", c) for d, c in fa2_wgmma.default_builds()]


def _removed(defs: dict) -> bool:
    """A build of a knob (or knob value) removed in issue 40."""
    return bool(set(defs) & set(fa2_wgmma.REMOVED_KNOBS)) or defs.get("PERSISTENT") == 1 or defs.get("O_DIRECT") == 1


def test_every_real_build_passes_the_kernels_rules():
    """The rules that mirror the kernels' static_asserts (fa2_wgmma.knob_errors) reject no build this repo names or has
    compiled (results/tc_resources.json: ptxas ran on each; the builds of removed knobs aside)."""
    import json

    for d, where, cfg in _every_real_build():
        for bf16 in (0, 1):
            assert fa2_wgmma.knob_errors(fa2_wgmma.defines_for(d, bf16, cfg)) == [], where
    compiled = [r["defines"] for r in json.loads((Path(fa2_wgmma.__file__).parents[1] / "results" /
                                                  "tc_resources.json").read_text()) if r["kernel"] == "fa2_wgmma"]
    kept = [defs for defs in compiled if not _removed(defs)]
    assert len(kept) > 60 and all(fa2_wgmma.knob_errors(defs) == [] for defs in kept)


@pytest.mark.parametrize("knobs,why", [
    (dict(STAGES=-1), "STAGES=-1: the K/V ring needs a slot"),
    (dict(STAGES=0), "STAGES=0: the K/V ring needs a slot"),
    (dict(BLOCK_N=7), "BLOCK_N=7: a multiple of 16, at most 256 (TMA box)"),
    (dict(BLOCK_N=24), "BLOCK_N=24: a multiple of 16"),
    (dict(BLOCK_N=272), "BLOCK_N=272: a multiple of 16, at most 256"),
    (dict(PERSISTENT=5), "PERSISTENT=5: 0 (one tile per CTA) or 2 (tiles from an atomic counter)"),
    (dict(PERSISTENT=1), "PERSISTENT=1: 0 (one tile per CTA) or 2"),
    (dict(PERSISTENT=2, O_DIRECT=1), "O_DIRECT=1: 0, or 2 (16-byte stores)"),
    (dict(PINGPONG=7), "PINGPONG=7: PINGPONG is a switch, 0 or 1"),
    (dict(NWG=1, PINGPONG=1), "PINGPONG=1 with NWG=1: ping-pong needs two consumer warpgroups"),
    (dict(NWG=4), "NWG=4: 1 to 3 consumer warpgroups"),
    (dict(QK_AHEAD=1, PINGPONG=0), "QK_AHEAD: removed with the experiments that used it"),
    (dict(O_TMA=1, O_TILE=0), "O_TMA stores from O_TILE's staging tile"),
    (dict(O_TILE=1, PERSISTENT=0), "O_TILE: a persistent build (its Q goes back early)"),
    (dict(O_DIRECT=2, PERSISTENT=0), "O_DIRECT: a persistent build without O_TILE"),
    (dict(TURN_CARRY=1, PINGPONG=0), "TURN_CARRY carries the ping-pong turn"),
    (dict(RESCALE_THRESHOLD=16), "RESCALE_THRESHOLD=16: 0..15"),
    (dict(EXP2_POLY=2), "EXP2_POLY: removed with the experiments that used it"),
    (dict(MIN_BLOCKS=0), "MIN_BLOCKS=0: at least one CTA per SM"),
    (dict(PRODUCER_REGS=20), "setmaxnreg takes 24 to 256 registers"),
    (dict(TMA=0, BLOCK_N=80), "BLOCK_N=80: must be a wgmma N of wgmma.cuh"),
    (dict(TMA=0, STAGES=1), "STAGES=1: 2..4 ring slots"),
])
def test_builds_the_kernel_cannot_compile_are_refused(knobs, why):
    """A knob value the kernel's static_asserts (or its ring, its register budget) refuse is a ValueError with the
    kernel's reason, from the launcher (defines_for) and from `fa-traffic predict --knobs` alike (it used to price
    STAGES=-1 at 789 TFLOP/s)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from analysis.cli import main

    base = {k: v for k, v in fa2_wgmma.CONFIGS[128].items()}  # TMA, Bc = 176, two ping-ponging warpgroups
    with pytest.raises(ValueError, match=re.escape(why)):
        fa2_wgmma.defines_for(128, 0, dict(base, **knobs))
    err = io.StringIO()
    with redirect_stdout(io.StringIO()) as out, redirect_stderr(err):
        rc = main(["predict", "--kernel", "fa2_wgmma", "--seq-len", "16k", "--head-dim", "128", "--knobs",
                   ",".join(f"{k}={v}" for k, v in knobs.items())])
    assert rc == 2 and out.getvalue() == "" and why in err.getvalue() and err.getvalue().count("\n") == 1


def test_the_kernels_static_asserts_are_mirrored():
    """Each static_assert of the forward kernels' sources is stated by knob_errors (its message, up to a leading
    "KNOB=value"), or by another check of defines_for (listed here with where)."""
    elsewhere = {"HEAD_DIM must be 64, 96, 128 or 256": "defines_for: HEAD_DIMS",
                 "HEAD_DIM must be 64 or 128": "defines_for: CP_ASYNC_HEAD_DIMS",
                 "PV_N: d, or d padded to whole panels": "defines_for: PV_N",
                 "ROW_SUM_MMA: d = 64 only": "defines_for: ROW_SUM_MMA",
                 "1..3 warpgroups": "knob_errors' NWG rule, the same for both kernels",
                 "copy mapping": "fa2_wgmma.cu's own tile copy (NTHREADS, CH fixed by NWG and d)",
                 "O_DIRECT: whole groups of four 8-column blocks": "every head dim is a multiple of 32"}
    src = Path(fa2_wgmma.__file__).read_text()
    cuda = Path(fa2_wgmma.__file__).parent / "cuda"
    for name in ("fa2_wgmma_tma.cu", "fa2_wgmma.cu", "wgmma_fa2.cuh"):
        for msg in re.findall(r'static_assert\([^;]*?,\s*"([^"]+)"\)', (cuda / name).read_text(), re.S):
            tail = re.sub(r"^[A-Z_0-9]+:? ", "", msg)  # "BLOCK_N: ..." is stated as "BLOCK_N=7: ..."
            assert tail in src or any(msg.startswith(k) for k in elsewhere), (name, msg)
