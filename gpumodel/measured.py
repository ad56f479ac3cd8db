"""The committed measurements the GPU model is checked against, read into one cell format (torch-free).

    results/tc_bench*.json      tensor-core kernels vs SDPA flash / cuDNN (bench/bench_tc.py bench);
                                      each file's meta names the fa2_tc / fa2_wgmma builds it timed
    results/bench_kernels.json  the teaching tier (bench/bench_kernels.py), fp16, Br = Bc = 64
    results/*ncu*.csv           ncu --csv output of `bench_tc.py target` (gpu_visit.sh ncu,
                                      lab/ncu_levels.sh): one launch per kernel, matched to the
                                      "target launched NAME n=.. d=.. b=.. h=.. [causal=..] [dtype=..]" lines

A cell: dict(source, kernel, options, batch, heads, n_q, n_k, d, dtype, causal, time_s, and for ncu rows
the counters: dram_bytes, lts_bytes, l2_tex_bytes (L2-slice side, srcunit_tex), l2_sm_bytes (SM side:
l1tex <-> crossbar read + write bytes), duration_s, when profiled).
"""
from __future__ import annotations

import csv
import glob
import importlib
import io
import json
import re
import statistics
from functools import lru_cache
from pathlib import Path

from gpumodel.resources import registers_of


ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "fp16": "fp16", "bf16": "bf16"}

# ncu kernel names -> the registry / external name they belong to (launch order resolves several builds)
NCU_KERNELS = (("v_once_cluster", "v_once_cluster"), ("fa2_wgmma_tma_fwd", "fa2_wgmma"), ("fa2_wgmma_fwd", "fa2_wgmma"), ("fa2_tc_fwd", "fa2_tc"),
               ("v_once_tc_fwd", "v_once_tc"), ("pytorch_flash::flash_fwd", "sdpa_flash"),
               ("flash_fprop", "sdpa_cudnn"))


def _kernel_of(label: str) -> tuple[str, dict]:
    """'v_once_tc[hbm,lazy]' -> ('v_once_tc', {placement, rescale}); 'fa2_wgmma{...}' -> config."""
    if re.match(r"^v_once_cluster(\b|_|\[|$)", label):  # issue 18: the build follows from Nk (counting.cluster)
        return "v_once_cluster", {}
    m = re.match(r"^v_once_tc\[(\w+),(\w+)\]$", label) or re.match(r"^v_once_tc_(sram|hbm|auto)_(lazy|eager)$", label)
    if m:
        return "v_once_tc", {"placement": m.group(1), "rescale": m.group(2)}
    m = re.match(r"^(fa2_wgmma|fa2_tc)(\{.*\})$", label)
    if m:
        return m.group(1), {"config": json.loads(m.group(2))}
    m = re.match(r"^v_once_auto_(\w+)$", label)
    if m:
        return "v_once", {"placement": "auto", "rescale": m.group(1)}
    if label == "v_once_tc":
        return "v_once_tc", {"placement": "auto", "rescale": "lazy"}
    return label, {}


def _meta_configs(meta: dict) -> dict:
    """kernel -> {d: config} of the builds a bench file timed (its meta), when it says."""
    out = {}
    for key, kernel in (("fa2_tc_configs", "fa2_tc"), ("fa2_wgmma_configs", "fa2_wgmma")):
        if key in meta:
            out[kernel] = {int(d): cfg for d, cfg in meta[key].items()}
    return out


# the benchmark files read: tc_bench*.json (bench/bench_tc.py bench), and the cluster kernel's run under either
# that name or cluster_bench*.json (issue 18): rows labelled v_once_cluster validate with no code change
BENCH_PATTERNS = ("tc_bench*.json", "cluster_bench*.json")
# which fa2_wgmma build a committed run ran where its file does not say (the builds of the day: data, not code)
RUNS_FILE = RESULTS / "fa2_wgmma_runs.json"


@lru_cache(maxsize=1)
def fa2_wgmma_runs() -> dict:
    try:
        return json.loads(RUNS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def run_options(kernel: str, file: str, d: int, options: dict | None = None) -> dict:
    """The launcher options a default (config-less) row of `file` ran with, for the model to describe that build:
    for fa2_wgmma the build results/fa2_wgmma_runs.json names for that file (runs timed before the launcher's rules
    and knobs of today); otherwise nothing to add (the build forward() runs now)."""
    if kernel == "fa2_wgmma" and "config" not in (options or {}):
        cfg = fa2_wgmma_runs().get("default_build", {}).get(file, {}).get(str(d))
        if cfg is not None:
            return {"config": dict(cfg)}
    return {}


# The per-call CUDA-event medians of the older bench files (tc_bench*.json: no `timer`) hold the host's launch work
# beside the kernel's. The same runs timed each cell back to back too (b2b_ms: calls queued with no sync, the host
# hidden), so each run says what its host added: median - b2b per kernel and head dim, over its cells at N <= GAP_MAX_N
# (longer cells are seconds of back-to-back calls, where the board's clock moves the two apart by +-5%:
# tc_bench_wgmma_tma.json cuDNN d = 64 N = 8192, b2b 5% over the median). It is not one constant per kernel:
# tc_bench_wgmma_tma.json (the fit's training run) has 52 us for cuDNN at d = 64 against 34 at d = 128, and 91 / 58
# for fa2_wgmma, where launch_overhead.json's one tiny call says 35 and 67. So those cells are compared as GPU
# time: the median less the run's own gap (EVENTS_LESS_GAP below). Before (stop 25's model) the excess host time
# went into the training cells' GPU constants, the d = 64 ones most.
GAP_MAX_N = 2048
# the timer of such a cell: an older bench file's per-call CUDA-event median less the host gap that run measured (its
# median less its back-to-back time, per kernel and head dim: host_gaps): what the GPU alone took. Here, where the gap
# is measured; gpumodel/gpu_model.py as_timed reads a cell so timed as GPU time
EVENTS_LESS_GAP = "cuda events less the run's measured host gap"


def host_gaps(rows) -> dict:
    """(kernel label, d) -> seconds an events-timed call took over its back-to-back time: the median over the run's
    cells at N <= GAP_MAX_N (clipped at 0). Empty for a run with no b2b_ms."""
    gaps: dict = {}
    for r in rows:
        if r.get("ok", True) and r.get("b2b_ms") and r.get("median_ms") and r["n"] <= GAP_MAX_N:
            gaps.setdefault((r["kernel"], r["d"]), []).append((r["median_ms"] - r["b2b_ms"]) * 1e-3)
    return {k: max(0.0, statistics.median(v)) for k, v in gaps.items()}


def bench_cells(pattern: str | tuple = BENCH_PATTERNS) -> list[dict]:
    """Every timed row of the bench files. Events-timed rows of a run that measured its host gap (host_gaps) carry
    time_s less that gap, timer EVENTS_LESS_GAP and the gap itself (host_gap_s)."""
    cells = []
    patterns = (pattern,) if isinstance(pattern, str) else pattern
    for path in sorted({p for pat in patterns for p in RESULTS.glob(pat)}):
        data = json.loads(path.read_text())
        configs = _meta_configs(data.get("meta", {}))
        gaps = host_gaps(data.get("rows", []))
        for r in data.get("rows", []):
            if not r.get("ok", True) or not r.get("median_ms"):
                continue
            kernel, opts = _kernel_of(r["kernel"])
            if kernel in configs and r["d"] in configs[kernel]:
                opts = dict(opts, config=configs[kernel][r["d"]])
            else:
                opts = dict(opts, **run_options(kernel, path.name, r["d"], opts))
            cells.append(dict(source=path.name, kernel=kernel, options=opts, label=r["kernel"], batch=r["b"],
                              heads=r["h"], n_q=r["n"], n_k=r["n"], d=r["d"], dtype=DTYPE[r["dtype"]],
                              causal=bool(r["causal"]), time_s=r["median_ms"] * 1e-3, timer=r.get("timer")))
            gap = gaps.get((r["kernel"], r["d"]))
            if gap is not None and not r.get("timer"):
                cells[-1].update(time_s=r["median_ms"] * 1e-3 - gap, timer=EVENTS_LESS_GAP, host_gap_s=gap)
    return cells


# lab/ab_wgmma_speed.py runs (issue 14's A/Bs, none in the model's fit): the rows of builds the descriptors
# price -- the shipped build of the day ("base", its config recorded in the file's "variants"), the ROW_SUM_MMA
# pair (v5a), the builds SIZE_RULES runs or ran (d = 64: small-tma3, small-tma, br192[-rs]; v6: the persistent
# builds below) -- and SDPA's two backends. Builds whose knob the model does not price (EXP2_POLY, QK_AHEAD) and
# persistent builds no rule runs are left out: their rows time a negative result, not a kernel the launcher runs.
AB_FILE = "ab_wgmma_speed.json"
AB_VARIANTS = {"fa2_wgmma[default]": None, "fa2_wgmma[base]": None, "fa2_wgmma[rowsum]": None, "fa2_wgmma[no-rs]": None,  # variant: its d
               "fa2_wgmma[small-tma3]": (64,), "fa2_wgmma[small-tma]": (64,), "fa2_wgmma[br192]": (64,),
               "fa2_wgmma[br192-rs]": (64,), "sdpa_flash": None, "sdpa_cudnn": None,
               # v6: the persistent builds the rules now run (next tile's Q under this one's end: O_TILE), and the
               # dynamic persistent build of d = 256's causal rule
               "fa2_wgmma[bc128-dyn-oq]": (128,), "fa2_wgmma[small-tma3-dyn-oq]": (64,),
               "fa2_wgmma[br192-rs-dyn-oq]": (64,), "fa2_wgmma[dynamic]": (256,),
               "fa2_wgmma[bc128-dyn-oqt]": (128,), "fa2_wgmma[br192-rs-dyn-oqt]": (64,),  # v6d: O stored by TMA
               # v6f: the rules' builds with the rescale threshold at d = 128, and d = 256's Bc = 64 persistent build
               "fa2_wgmma[bc128-dyn-oqt-r]": (128,), "fa2_wgmma[rescale]": (128,), "fa2_wgmma[bc64-dyn]": (256,),
               # fresh11: d = 96's short-N build (SIZE_RULES[96])
               "fa2_wgmma[dyn-oqt-r]": (96,)}


def ab_cells(pattern: str = "**/" + AB_FILE) -> list[dict]:
    cells = []
    # persistent builds order their causal tiles in sections of heads since fa2_wgmma_tma.cu v6; the runs the table
    # names were timed before, with every head in one section
    one_section_runs = tuple(fa2_wgmma_runs().get("one_causal_section", ()))
    for path in sorted(RESULTS.glob(pattern)):
        data = json.loads(path.read_text())
        variants, timer = data.get("variants", {}), data.get("env", {}).get("timer")
        source = str(path.relative_to(RESULTS))
        one_section = bool(one_section_runs) and source.startswith(one_section_runs)
        for r in data.get("rows", []):
            if r["variant"] not in AB_VARIANTS or not r.get("ok", True) or not r.get("median_ms"):
                continue
            if AB_VARIANTS[r["variant"]] is not None and r["d"] not in AB_VARIANTS[r["variant"]]:
                continue
            if r["variant"].startswith("fa2_wgmma["):  # a row's own config (forward()'s rule), else the named build
                cfg = r.get("config") or variants.get(str(r["d"]), {}).get(r["variant"][len("fa2_wgmma["):-1])
                if cfg is None:
                    continue
                # the knobs forward() added to the rule build, where the run recorded them (runs from stop 19 on;
                # earlier rows are modelled as the bare rule build)
                cfg = dict(cfg, **r.get("knobs", {}))
                if one_section and cfg.get("PERSISTENT") and "CAUSAL_SECTION_KB" not in cfg:
                    cfg = dict(cfg, CAUSAL_SECTION_KB=0)  # timed before v6: one causal section (the old order)
                kernel, opts = "fa2_wgmma", {"config": cfg}
            else:
                kernel, opts = r["variant"], {}
            cells.append(dict(source=source, kernel=kernel, options=opts,
                              label=r["variant"], batch=r["b"], heads=r["h"], n_q=r["n"], n_k=r["n"], d=r["d"],
                              dtype=DTYPE[r["dtype"]], causal=bool(r["causal"]), time_s=r["median_ms"] * 1e-3,
                              timer=timer))
    return cells


TEACHING_LABELS = ("naive", "fa1", "fa2", "v_once_auto_lazy", "v_once_auto_eager")


def teaching_cells(path: Path = RESULTS / "bench_kernels.json") -> list[dict]:
    try:
        data = json.loads(Path(path).read_text())
    except OSError:
        return []
    cells = []
    for r in data.get("records", []):
        if r["label"] not in TEACHING_LABELS or not r.get("median_ms"):
            continue
        kernel, opts = _kernel_of(r["label"])
        cells.append(dict(source=Path(path).name, kernel=kernel, options=opts, label=r["label"],
                          batch=r["batch"], heads=r["heads"], n_q=r["n"], n_k=r["n"], d=r["d"],
                          dtype=DTYPE[r["dtype"]], causal=bool(r["causal"]), time_s=r["median_ms"] * 1e-3))
    return cells


_LAUNCH = re.compile(r"^target launched (.+?) n=(\d+) d=(\d+) b=(\d+) h=(\d+)(.*)$")


def _num(text: str) -> float:
    return float(text.replace(",", "")) if text not in ("", "n/a") else float("nan")


def ncu_cells(pattern: str = "*ncu*.csv") -> list[dict]:
    """One cell per profiled attention launch of every ncu CSV in results."""
    cells = []
    for name in sorted(glob.glob(str(RESULTS / pattern))):
        cells += read_ncu_csv(name)
    return cells


def read_ncu_csv(path) -> list[dict]:
    lines = Path(path).read_text().splitlines()
    launches = []
    for line in lines:
        m = _LAUNCH.match(line.strip())
        if m:
            extra = dict(kv.split("=", 1) for kv in m.group(6).split() if "=" in kv)
            launches.append(dict(label=m.group(1), n=int(m.group(2)), d=int(m.group(3)), b=int(m.group(4)),
                                 h=int(m.group(5)), causal=extra.get("causal", "0") in ("1", "True", "true"),
                                 dtype=DTYPE.get(extra.get("dtype", "fp16"), "fp16")))
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    kernels = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        if not row.get("Metric Name"):
            continue
        family = next((fam for pat, fam in NCU_KERNELS if pat in row["Kernel Name"]), None)
        if family is None:
            continue
        k = kernels.setdefault(row["ID"], dict(family=family, metrics={}, grid=row.get("Grid Size", ""),
                                               block=row.get("Block Size", "")))
        k["metrics"][row["Metric Name"]] = _num(row["Metric Value"])
    cells = []
    queue = list(launches)
    for _, k in sorted(kernels.items(), key=lambda kv: int(kv[0])):
        while queue and _kernel_of(queue[0]["label"])[0] != k["family"]:
            queue.pop(0)  # a launch ncu did not profile (or one of another family)
        if not queue:
            break
        launch = queue.pop(0)
        kernel, opts = _kernel_of(launch["label"])
        m = k["metrics"]
        if kernel in ("fa2_tc", "fa2_wgmma") and "config" not in opts:  # the default of its day
            cfg = infer_config(kernel, launch["d"], launch["n"], k["grid"], k["block"],
                               m.get("launch__shared_mem_per_block_dynamic"), m.get("launch__registers_per_thread"))
            if cfg is not None:
                opts = {"config": cfg}
        tex = m.get("lts__t_sectors_srcunit_tex.sum")
        cells.append(dict(source=Path(path).name, kernel=kernel, options=opts, label=launch["label"],
                          batch=launch["b"], heads=launch["h"], n_q=launch["n"], n_k=launch["n"], d=launch["d"],
                          dtype=launch["dtype"], causal=launch["causal"],
                          duration_s=m.get("gpu__time_duration.sum", float("nan")) * 1e-9,
                          dram_bytes=m.get("dram__bytes_read.sum", 0) + m.get("dram__bytes_write.sum", 0),
                          lts_bytes=m.get("lts__t_bytes.sum"),
                          l2_tex_bytes=None if tex is None else tex * 32,
                          l2_sm_bytes=_sm_side(m),
                          l2_sm_write_bytes=m.get("l1tex__m_l1tex2xbar_write_bytes.sum"),
                          instructions=m.get("smsp__inst_executed.sum")))
    return cells


def _sm_side(m: dict):
    """Bytes the SMs' L1TEX/TMA units exchange with the crossbar: what every SM asked the L2 for, before
    the H100's L2 request coalescer merges the same line asked by several SMs at once (None: not profiled)."""
    r, w = m.get("l1tex__m_xbar2l1tex_read_bytes.sum"), m.get("l1tex__m_l1tex2xbar_write_bytes.sum")
    return None if r is None or w is None else r + w


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text or "")]


def infer_config(kernel: str, d: int, n: int, grid: str, block: str, smem, registers=None) -> dict | None:
    """The build an ncu row ran, from its launch shape (Tr = grid x, threads, dynamic smem), among the
    launcher's CONFIGS and SWEEP candidates (fa2_wgmma: the builds results/fa2_wgmma_runs.json lists): a profile
    taken before the defaults changed stays right."""
    mod = importlib.import_module(f"kernels.{kernel}")
    grid_x, threads = (_ints(grid) or [0])[0], (_ints(block) or [0])[0]
    ran = fa2_wgmma_runs().get("ncu_builds", {}).get(str(d), []) if kernel == "fa2_wgmma" else []
    for cfg in [mod.CONFIGS[d]] + list(getattr(mod, "SWEEP", {}).get(d, [])) + ran:
        defs = mod.defines_for(d, False, cfg)
        br = defs["BLOCK_M"] if kernel == "fa2_tc" else mod.block_m(defs)
        thr = 32 * defs["NWARPS"] if kernel == "fa2_tc" else mod.threads(defs)
        regs = registers_of(kernel, defs)
        if (-(-n // br) == grid_x and thr == threads and (smem is None or mod.smem_bytes(defs) == int(smem))
                and (registers is None or regs is None or regs == int(registers))):
            return cfg
    return None
