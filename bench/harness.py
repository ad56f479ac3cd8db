"""The one benchmark harness: what is timed, how it is checked first, how it is timed, how it is named.

    from bench import harness
    for e in harness.entries(names, sdpa=("flash", "cudnn")):       # KERNELS + SDPA backends, one table
        ok = harness.check_entry(e)["ok"]                            # the correctness rule, before timing
        sets = harness.input_sets(b, h, n, n, d, torch.float16)
        rec = harness.measure(e, sets, causal)                       # re-checked on these inputs, then timed
        rec.update(harness.run_info())                               # every record carries the run id

Entries. One per (KernelSpec, option set) of kernels.KERNELS, labelled KernelSpec.label(**options)
("fa2", "v_once_tc_sram_lazy"), one per launcher config when a sweep passes configs= (labelled
label + the config as JSON; forward(config=...) receives it: no module's CONFIGS is ever mutated), and
one per torch SDPA backend ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "sdpa_math").

Correctness rule (check_entry, and again in measure before any timing): fresh random inputs from a
seeded generator; kernel outputs poisoned with NaN (passed as out= where the launcher takes it) so an
unwritten element cannot pass; compared with the float64 reference (variants.attention_reference):
relative Frobenius error of o under TOL[dtype], lse within 2e-3 (+1e-5·|lse|) on rows that see a key,
and rows that see no key (causal, Nq > Nk) must give o = 0, lse = -inf. SDPA returns fresh tensors (no
poisoning) and no lse; its is_causal is top-left aligned, so causal problems with Nq != Nk are skipped.

Timing (time_fn), one method: triton.testing.do_bench where triton imports, the field's standard: each
call is timed alone between two CUDA events, and before each call do_bench zeroes a 256 MB buffer,
which flushes the L2 (50-60 MB on an H100/H200), outside the timed window. What the window includes:
the GPU work of the call, plus whatever host work of the call (argument checks, output allocation,
the launch) outlasts the flush still running on the GPU (~0.1 ms at 3 TB/s), i.e. in practice the
kernel alone. The median is reported (min and max beside it). Inputs also rotate over several sets
totalling more than the L2 (input_sets), so even without the flush no call finds its inputs cached.
Without triton: per-call CUDA events after the previous call finished (the window then includes the
call's host work), median over the rotating sets, no explicit flush; the record's "timer" field says
which ran, and launch_overhead.py measures the host work on its own. Calls over SLOW_CALL_S are timed a
few times with events only (do_bench would first run them five times to size its loop).

FLOPs: flops() is the one formula every TFLOP/s here divides by (counting.headline.attention_flops,
4·d per visible (query, key) pair).

Run id: run_info() gives {"run_id": "<UTC time>-<git describe>-<GPU>", ...}, computed once per
process; every script puts it in every record it writes, so notebooks and docs cannot mix runs.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOL = {"float16": 4e-3, "bfloat16": 2e-2, "float32": 1e-4}  # relative Frobenius error of o vs float64
SDPA_BACKENDS = ("flash", "cudnn", "efficient", "math")
L2_BYTES = 60 * 2**20  # H200; input_sets makes several times this
SLOW_CALL_S = 0.05
DEVICE = "cuda"  # where inputs are made (the CPU tests of this module set "cpu")
# (b, h, Nq, Nk, d, causal, input scale): odd sizes and tails, Nq != Nk both ways, causal rows that see
# no key (Nq > Nk), d = 64 and 128. (Large scores are bench_tc's extra problems: the teaching naive
# rounds S to 16 bits by design.)
CHECK_PROBLEMS = [
    (2, 3, 128, 128, 64, False, 1.0), (1, 2, 77, 203, 128, True, 1.0),
    (1, 2, 300, 100, 64, True, 1.0), (1, 2, 333, 1100, 128, False, 1.0),
    (2, 4, 1000, 1000, 64, True, 1.0),
]


# ----------------------------------------------------------------------------------------- entries

@dataclass
class Entry:
    label: str
    tier: str  # "teaching" | "tensor-core" | "torch"
    spec: object = None  # kernels.KernelSpec; None for SDPA
    options: dict = field(default_factory=dict)
    config: dict | None = None  # a launcher config (its .cu defines) or {d: config}, passed as forward(config=...)
    backend: str | None = None  # SDPA backend name
    fn: object = None  # an experiment's own build: fn(q, k, v, causal, out=None) -> (o, lse)

    @property
    def kind(self) -> str:
        return "sdpa" if self.backend is not None else "kernel"

    @property
    def takes_out(self) -> bool:
        """Whether forward takes out=(o, lse) (the tensor-core launchers), so outputs can be poisoned."""
        import inspect

        fn = self.fn or (self.spec.forward if self.spec is not None else None)
        return fn is not None and "out" in inspect.signature(fn).parameters

    def forward(self, q, k, v, causal: bool, out=None):
        """(o, lse or None)."""
        if self.fn is not None:
            return self.fn(q, k, v, causal, out=out)
        if self.spec is None:
            return sdpa(self.backend, q, k, v, causal), None
        kw = dict(self.options)
        config = self.config
        if config and all(isinstance(key, int) for key in config):  # {head dim: config} (a tuned set)
            config = config.get(q.shape[-1])
        if config is not None:
            kw["config"] = config
        if out is not None:
            kw["out"] = out
        return self.spec.forward(q, k, v, causal=causal, **kw)

    def skip_reason(self, n_q: int, n_k: int, d: int, causal: bool, dtype=None) -> str | None:
        """Why this entry does not run a shape (None: it does)."""
        if self.backend is not None:
            if causal and n_q != n_k:
                return "SDPA's is_causal is top-left aligned when Nq != Nk"
            return None
        if self.spec is None:
            return None
        if not self.spec.supports_head_dim(d):
            return f"d={d} unsupported by {self.spec.name}"
        if dtype is not None and dtype not in self.spec.dtypes:
            return f"{dtype} unsupported by {self.spec.name}"
        plan = getattr(self.spec.module, "plan", None)  # v_once_tc: does the f row fit in shared memory?
        if plan is not None and "placement" in self.options:
            try:
                p = plan(n_q, n_k, d, causal=causal, rescale=self.options.get("rescale", "lazy"))
            except ValueError as exc:  # not even spilled
                return str(exc)
            if self.options["placement"] == "sram" and not p["fits_sram"]:
                return "the f row does not fit in shared memory"
        return None


def entries(names=(), *, sdpa=SDPA_BACKENDS, all_options=False, configs=None) -> list[Entry]:
    """Every available kernel's BENCH_OPTIONS (all OPTIONS combinations with all_options), then the SDPA
    backends. names: registry names or labels (empty: all; "sdpa" selects every backend); configs:
    {kernel name: [config, ...]} adds one entry per launcher config (a tuning sweep)."""
    from kernels import KERNELS

    names = set(names or ())
    out = []
    for spec in KERNELS.values():
        # getattr: bench/ab_speed.py runs this harness against an older tree's registry, whose specs have no decode
        if getattr(spec, "decode", False) or not spec.available():  # decode kernels take caches: bench/decode_speed.py
            continue
        for options in (spec.configs() if all_options else spec.bench_options):
            label = spec.label(**options)
            if not names or spec.name in names or label in names:
                out.append(Entry(label, spec.tier, spec, dict(options)))
        for config in (configs or {}).get(spec.name, ()):
            out.append(Entry(spec.label() + json.dumps(config, sort_keys=True), spec.tier, spec, {}, dict(config)))
    for backend in sdpa:
        if not names or "sdpa" in names or f"sdpa_{backend}" in names:
            out.append(Entry(f"sdpa_{backend}", "torch", backend=backend))
    return out


def entry_names(*, all_options=False) -> list[str]:
    """Every name entries() selects by (registry names, their labels, "sdpa", "sdpa_<backend>"), on any machine:
    what a script's --kernels may say (entries() itself keeps only the kernels this GPU runs)."""
    from kernels import KERNELS

    names = []
    for spec in KERNELS.values():
        if spec.decode:
            continue
        names += [spec.name] + [spec.label(**o) for o in (spec.configs() if all_options else spec.bench_options)]
    return list(dict.fromkeys(names + ["sdpa"] + [f"sdpa_{b}" for b in SDPA_BACKENDS]))


def sdpa(backend: str, q, k, v, causal: bool, **kw):
    """PyTorch's SDPA restricted to one backend; kw goes to scaled_dot_product_attention (enable_gqa=True: k, v with
    H_kv heads, bench/decode_speed.py)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
             "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    with sdpa_kernel([which]):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)


# ----------------------------------------------------------------------------------------- figures

def flops(batch: int, heads: int, n_q: int, n_k: int, d: int, causal: bool) -> float:
    """The FLOPs every TFLOP/s divides by (one formula; see the module docstring)."""
    from counting.headline import attention_flops

    return float(attention_flops(batch, heads, n_q, n_k, d, causal))


def flops_formula() -> str:
    return "attention_flops = 4*d*B*H*visible (query, key) pairs"


_RUN: dict = {}


def source_root() -> Path:
    """The tree whose kernels run (the `kernels` package's parent; bench/ab_speed.py times another tree)."""
    import importlib.util

    spec = importlib.util.find_spec("kernels")
    return Path(spec.origin).resolve().parent.parent if spec and spec.origin else ROOT


def tree_hash(root: Path) -> str:
    """A short hash of the sources that decide a result (a copy without .git still gets a distinct id)."""
    h = hashlib.sha256()
    for pattern in ("kernels/*.py", "kernels/cuda/*", "variants/*.py", "counting/*.py", "gpumodel/*.py", "analysis/*.py",
                    "bench/*.py"):
        for f in sorted(root.glob(pattern)):
            if f.is_file():
                h.update(f.name.encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:10]


def write_rows(out_dir, name: str, rows: list) -> Path:
    """out_dir/name: {"run": run_info(), "rows": rows} as JSON (the bench scripts' result file); the folder is made."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(dict(run=run_info(), rows=rows), indent=1, default=str))
    return out / name


def run_info() -> dict:
    """{"run_id", "utc", "git", "gpu"}: one value per process, stamped on every record. git: $FA_GIT_DESCRIBE,
    else `git describe --always --dirty` of the tree, else "tree-<hash of its sources>"."""
    if not _RUN:
        utc = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        root = source_root()
        git = os.environ.get("FA_GIT_DESCRIBE", "")
        if not git:
            try:
                git = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=root,
                                     capture_output=True, text=True, timeout=10).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                git = ""
        git = git or f"tree-{tree_hash(root)}"
        try:
            import torch

            gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        except Exception:
            gpu = "unknown"
        _RUN.update(run_id=f"{utc}-{git}-{gpu.replace(' ', '_')}", utc=utc, git=git, gpu=gpu)
    return dict(_RUN)


def environment() -> dict:
    """run_info plus the versions a result depends on (torch, triton, the CUDA runtime pieces)."""
    import platform

    import torch

    from kernels import loader

    env = dict(run_info(), torch=torch.__version__, python=platform.python_version(), **loader.runtime_versions())
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = "missing"
    env["timer"] = timer_name()
    env["flops_formula"] = flops_formula()
    return env


# ----------------------------------------------------------------------------------------- inputs

def random_qkv(b, h, n_q, n_k, d, dtype, *, seed=0, scale=1.0, device=None):
    """Fresh random q, k (times scale: larger scores) and v from a seeded generator."""
    import torch

    device = device or DEVICE
    g = torch.Generator(device=device).manual_seed(seed)
    q = (torch.randn(b, h, n_q, d, generator=g, device=device) * scale).to(dtype)
    k = (torch.randn(b, h, n_k, d, generator=g, device=device) * scale).to(dtype)
    v = torch.randn(b, h, n_k, d, generator=g, device=device).to(dtype)
    return q, k, v


def input_sets(b, h, n_q, n_k, d, dtype, *, min_total_bytes=4 * L2_BYTES, max_sets=8, seed=0):
    """At least two independent (q, k, v) sets, together over min_total_bytes when max_sets allows."""
    import torch

    one = (2 * b * h * n_q * d + 2 * b * h * n_k * d) * torch.empty((), dtype=dtype).element_size()
    n = max(2, min(max_sets, -(-min_total_bytes // max(one, 1))))
    return [random_qkv(b, h, n_q, n_k, d, dtype, seed=seed + i) for i in range(n)]


# ----------------------------------------------------------------------------------------- checking

# unit roundoff of the input dtypes: a kernel that keeps S in HBM in the input dtype (naive, as unfused
# attention does) carries that rounding of every score into lse
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24}


def compare(o, lse, q, k, v, causal: bool, dtype_name: str, *, scores_rounded: bool = False) -> dict:
    """o (and lse when given) against the float64 reference: the one correctness rule.

    scores_rounded: the kernel stores S in the input dtype (naive): lse may then be off by the rounding of
    the row's largest score, u·max|S_row|, on top of the common 2e-3 + 1e-5·|lse|."""
    import torch

    from variants import attention_reference

    if o.numel() == 0 or o.shape != q.shape:  # a check of nothing proves nothing
        return dict(ok=False, rel_err=float("nan"), error=f"output of shape {tuple(o.shape)} for q {tuple(q.shape)}")
    ro, rl = attention_reference(q, k, v, causal=causal)
    od = o.double()
    res = dict(o_finite=bool(torch.isfinite(od).all()))
    res["rel_err"] = float((od - ro).norm() / ro.norm().clamp_min(1e-30)) if res["o_finite"] else float("inf")
    empty = ~torch.isfinite(rl)
    res["empty_rows"] = int(empty.sum())
    ok = res["o_finite"] and res["rel_err"] <= TOL[dtype_name] and bool((od[empty] == 0).all())
    if lse is not None:
        fin = ~empty
        lerr = (lse.double()[fin] - rl[fin]).abs()
        res["lse_max_err"] = float(lerr.max()) if lerr.numel() else 0.0
        ltol = 2e-3 + 1e-5 * rl[fin].abs()
        if scores_rounded:
            scale = q.shape[-1] ** -0.5
            s_max = (q.double() @ k.double().transpose(-1, -2)).abs().amax(dim=-1) * scale
            ltol = ltol + 2 * UNIT_ROUNDOFF[dtype_name] * s_max[fin]
        ok = ok and bool((lse[empty] == float("-inf")).all() and torch.isfinite(lse.double()[fin]).all()
                         and (lerr <= ltol).all())
    res["ok"] = bool(ok)
    return res


class Poisoned:
    """Within the block, every floating tensor from torch.empty / empty_like starts as NaN, so an
    element a kernel fails to write (or scratch it reads before writing) shows up. Used by the GPU tests
    and bench scripts that call launchers without an out= to poison."""

    def __enter__(self):
        import torch

        self.torch, self.empty, self.empty_like = torch, torch.empty, torch.empty_like

        def poison(t):
            if t.is_floating_point():
                t.fill_(float("nan"))
            return t

        torch.empty = lambda *a, **kw: poison(self.empty(*a, **kw))
        torch.empty_like = lambda *a, **kw: poison(self.empty_like(*a, **kw))
        return self

    def __exit__(self, *exc):
        self.torch.empty, self.torch.empty_like = self.empty, self.empty_like


def check_one(entry: Entry, b, h, n_q, n_k, d, dtype, causal, *, input_scale=1.0, seed=0) -> dict:
    """One problem: fresh inputs, poisoned outputs, compare()."""
    import torch

    dname = str(dtype).replace("torch.", "")
    rec = dict(shape=[b, h, n_q, n_k, d], dtype=dname, causal=causal, input_scale=input_scale)
    why = entry.skip_reason(n_q, n_k, d, causal, dtype)
    if why:
        return dict(rec, skipped=why)
    try:
        q, k, v = random_qkv(b, h, n_q, n_k, d, dtype, seed=seed, scale=input_scale)
        out = None
        if entry.takes_out:
            out = (torch.full_like(q, float("nan")), torch.full((b, h, n_q), float("nan"), device=q.device))
        o, lse = entry.forward(q, k, v, causal, out=out)
        torch.cuda.synchronize()
        if out is not None and (o.data_ptr() != out[0].data_ptr() or lse.data_ptr() != out[1].data_ptr()):
            return dict(rec, ok=False, error="forward ignored out=")
        rounded = entry.spec is not None and entry.spec.variant == "naive"  # S, P in HBM, input dtype
        rec.update(compare(o, lse, q, k, v, causal, dname, scores_rounded=rounded))
    except Exception as exc:  # one broken entry must not hide the others
        rec.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
    return rec


def check_entry(entry: Entry, problems=CHECK_PROBLEMS, dtypes=None) -> dict:
    """{"ok", "problems": [...]} over problems x dtypes (default: fp16, and bf16 where supported)."""
    import torch

    if dtypes is None:
        dtypes = [torch.float16] + ([torch.bfloat16] if entry.spec is None or torch.bfloat16 in entry.spec.dtypes
                                    else [])
    recs = [check_one(entry, b, h, n_q, n_k, d, dt, causal, input_scale=sc, seed=i)
            for i, (b, h, n_q, n_k, d, causal, sc) in enumerate(problems) for dt in dtypes]
    return dict(ok=all(r.get("ok", True) for r in recs) and any("ok" in r for r in recs), problems=recs)


def check_on(entry: Entry, q, k, v, causal: bool) -> dict:
    """The rule on timed inputs (the first (batch, head) pair only, to bound the reference's memory)."""
    import torch

    o, lse = entry.forward(q, k, v, causal)
    torch.cuda.synchronize()
    return compare(o[:1, :1], None if lse is None else lse[:1, :1], q[:1, :1], k[:1, :1], v[:1, :1],
                   causal, str(q.dtype).replace("torch.", ""))


# ----------------------------------------------------------------------------------------- timing

# -------------------------------------------------------------------------------------- the SM clock
# The H200 runs attention kernels at its board power cap: the SM clock is set by what each kernel draws (1545-1980 MHz
# over one run; bf16 3-5% faster than fp16 at d = 128 for the same cycle count; results/probe_gpu/sm_clock_power_cap). So a time is
# cycles / clock, and two timings of one kernel on two chips or at two temperatures differ by their clocks. When a
# script starts the sampler (start_clock), time_fn records the median SM clock and board power nvidia-smi read over
# each timing's window, so a record can be read in cycles (median_ms x clock_mhz = kilocycles).
# power.draw is a one-second average on Ampere and later (adjacent ~50 ms timings read the same watts);
# power.draw.instant, where the driver has it, is the reading at the sample
SMI_FIELDS = ("clocks.sm", "power.draw.instant", "temperature.gpu", "clocks_throttle_reasons.active")
SMI_FALLBACKS = (SMI_FIELDS, ("clocks.sm", "power.draw", "temperature.gpu", "clocks_throttle_reasons.active"),
                 ("clocks.sm", "power.draw", "temperature.gpu"), ("clocks.sm",))
POWER_FIELDS = ("power.draw.instant", "power.draw")
_CLOCK = None


def parse_smi_line(line: str, fields) -> dict | None:
    """One `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` line as {field: number}; None if malformed."""
    parts = [x.strip() for x in line.split(",")]
    if len(parts) != len(fields):
        return None
    rec = {}
    for f, x in zip(fields, parts):
        try:
            rec[f] = int(x, 16) if x.startswith("0x") else float(x)
        except ValueError:
            rec[f] = None
    return rec


def _this_gpu() -> list[str]:
    """nvidia-smi's -i for the GPU torch computes on (by UUID: CUDA_VISIBLE_DEVICES renumbers indices); without it
    nvidia-smi prints a line per GPU and a window would mix them."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        return ["-i", uuid if uuid.startswith("GPU-") else "GPU-" + uuid]
    except Exception:
        return []


class ClockSampler:
    """nvidia-smi --loop-ms in the background, one GPU; each line stamped with time.monotonic() on receipt. A field
    set the driver refuses (nvidia-smi exits, or prints nothing parsable within `wait_s`) falls back to the next."""

    def __init__(self, period_ms: int = 20, gpu: list[str] | None = None, wait_s: float = 3.0, cmd="nvidia-smi"):
        import collections
        import threading

        self.samples = collections.deque(maxlen=200_000)  # ~1 h at 20 ms
        self.fields, self.proc = None, None
        for fields in SMI_FALLBACKS:
            try:
                p = subprocess.Popen([cmd, *(gpu or []), f"--query-gpu={','.join(fields)}",
                                      "--format=csv,noheader,nounits", f"--loop-ms={period_ms}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            except OSError:
                return
            self.proc, self.fields = p, fields
            threading.Thread(target=self._read, args=(p, fields), daemon=True).start()
            t_end = time.monotonic() + wait_s
            while time.monotonic() < t_end and not self.samples and p.poll() is None:
                time.sleep(0.02)
            if self.samples:
                return
            p.terminate()
            self.proc, self.fields = None, None

    def _read(self, proc, fields):
        for line in proc.stdout:
            rec = parse_smi_line(line, fields)
            if rec is not None and self.proc is proc:
                rec["t"] = time.monotonic()
                self.samples.append(rec)

    def window(self, t0: float, t1: float) -> list:
        return [x for x in list(self.samples) if t0 <= x["t"] <= t1]

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()


def start_clock(period_ms: int = 20):
    """Start the process's one clock sampler for the GPU torch computes on (idempotent); None where nvidia-smi does not
    run or prints nothing."""
    global _CLOCK
    if _CLOCK is None:
        import atexit

        _CLOCK = ClockSampler(period_ms, _this_gpu())
        atexit.register(_CLOCK.stop)
    return _CLOCK if _CLOCK.proc is not None else None


def clock_over(samples: list) -> dict:
    """The median SM clock (MHz) and board power (W) of a window's samples, and their count; {} for none."""
    out = {}
    clocks = [x["clocks.sm"] for x in samples if x.get("clocks.sm") is not None]
    watts = [next((x[k] for k in POWER_FIELDS if x.get(k) is not None), None) for x in samples]
    watts = [w for w in watts if w is not None]
    if clocks:
        out["clock_mhz"] = statistics.median(clocks)
    if watts:
        out["power_w"] = statistics.median(watts)
    return dict(out, clock_samples=len(samples)) if out else {}


def _clock_window(t0: float, t1: float) -> dict:
    """clock_over the samples between two time.monotonic() readings (nothing without a running sampler)."""
    return clock_over(_CLOCK.window(t0, t1)) if _CLOCK is not None and _CLOCK.proc is not None else {}


def _do_bench():
    try:
        from triton.testing import do_bench

        return do_bench
    except Exception:
        return None


def timer_name() -> str:
    return "triton.testing.do_bench (median, L2 flushed)" if _do_bench() else "cuda events (median, rotated inputs)"


def time_events(fn, sets, *, warmup=3, reps=20) -> dict:
    """Median/min/max ms of fn(*sets[r % len]) over reps calls, each between two CUDA events."""
    import torch

    for r in range(warmup):
        fn(*sets[r % len(sets)])
    torch.cuda.synchronize()
    times = []
    t0 = time.monotonic()
    for r in range(reps):
        args = sets[r % len(sets)]
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return dict(median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times), reps=reps,
                timer="cuda events", **_clock_window(t0, time.monotonic()))


def time_fn(fn, sets, *, warmup_ms=25, rep_ms=100, force_events=False) -> dict:
    """The one timing method (module docstring): fn(*set) rotating over sets; median ms and the timer."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn(*sets[0])
    end.record()
    end.synchronize()
    probe_ms = start.elapsed_time(end)
    do_bench = None if force_events else _do_bench()
    if do_bench is None or probe_ms > SLOW_CALL_S * 1e3:
        reps = int(min(20, max(3, rep_ms * 3 / max(probe_ms, 1e-3))))
        return time_events(fn, sets, warmup=1 if probe_ms > SLOW_CALL_S * 1e3 else 3, reps=reps)
    i = [0]

    def call():
        fn(*sets[i[0] % len(sets)])
        i[0] += 1
    t_start = time.monotonic()
    try:
        med, lo, hi = do_bench(call, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.0, 1.0])
    except TypeError:  # a triton whose do_bench lacks quantiles=
        med = lo = hi = do_bench(call, warmup=warmup_ms, rep=rep_ms)
    # the clock over the timed calls: do_bench's timed loop runs about rep_ms and ends at its last sync (before it come
    # one call, five estimate calls and the warm-up, whose length depends on the kernel)
    t1 = time.monotonic()
    return dict(median_ms=float(med), min_ms=float(lo), max_ms=float(hi), reps=None,
                timer="triton.testing.do_bench", **_clock_window(max(t_start, t1 - rep_ms / 1e3), t1))


def back_to_back_ms(fn, sets, calls=50) -> float:
    """ms per call of `calls` calls queued back to back (no flush, no sync between), between two events: the GPU's
    rate when the host keeps ahead of it, its launch gaps included."""
    import torch

    for i in range(3):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(calls):
        fn(*sets[i % len(sets)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def host_us(fn, calls=1000):
    """Host µs per call: wall time of `calls` back-to-back calls without synchronising (what the host
    spends launching), after one warm call; the GPU catches up after the clock stops."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def measure(entry: Entry, sets, causal: bool, timed: bool = True, **timing) -> dict:
    """Checked on the timed inputs (check_on), then timed (time_fn); an entry that fails is not timed.
    Returns the record: label, tier, shape, rel_err, ok, median_ms, tflops, gbps, run_id. timed=False: the check
    alone (the caller times it later, e.g. after every entry of a cell is checked: lab/ab_wgmma_speed.py)."""
    from counting.headline import min_hbm_bytes

    q, k, v = sets[0]
    b, h, n_q, d = q.shape
    n_k = k.shape[2]
    rec = dict(label=entry.label, kernel=entry.label, tier=entry.tier, b=b, h=h, batch=b, heads=h, n=n_q,
               n_q=n_q, n_k=n_k, d=d, causal=causal, dtype=str(q.dtype).replace("torch.", ""),
               flops=flops(b, h, n_q, n_k, d, causal), min_hbm_bytes=min_hbm_bytes(b, h, n_q, n_k, d, q.element_size()),
               run_id=run_info()["run_id"])
    why = entry.skip_reason(n_q, n_k, d, causal, q.dtype)
    if why:
        return dict(rec, skipped=why)
    try:
        chk = check_on(entry, q, k, v, causal)
        rec.update(rel_err=chk["rel_err"], ok=chk["ok"])
        if not chk["ok"]:
            return dict(rec, skipped="failed the correctness check on the timed inputs")
        if not timed:
            return rec
        t = time_fn(lambda q_, k_, v_: entry.forward(q_, k_, v_, causal), sets, **timing)
        rec.update(t, tflops=rec["flops"] / t["median_ms"] / 1e9, gbps=rec["min_hbm_bytes"] / t["median_ms"] / 1e6)
    except Exception as exc:
        failed(rec, exc)
    return rec


def abba(first: dict, second: dict) -> dict:
    """Two timings of one entry, in order and then reversed (abba): the mean of their medians (a drift through the
    run then favours no position), both medians in pass_ms, the extremes of both."""
    return rounds([first, second])


def _mean_clock(timings: list) -> dict:
    """The mean of the timings' SM clocks and powers where every timing recorded one (time_fn with start_clock), else
    None: a record that takes the merge (rec.update) then drops a clock its first timing alone had."""
    out = {}
    for key in ("clock_mhz", "power_w"):
        vals = [t.get(key) for t in timings]
        out[key] = sum(vals) / len(vals) if vals and all(v is not None for v in vals) else None
    out["clock_samples"] = sum(t.get("clock_samples") or 0 for t in timings) if out["clock_mhz"] is not None else None
    return out


def rotate(cell_entries: list, i: int) -> list:
    """The cell's entries in row i of a Williams design (a Latin square balanced for the entry timed just before): over
    n cells (2n for an odd count n) each entry takes every slot of the abba order equally often, and follows every other
    entry equally often. A fixed order (forward()'s default first, its last timing the cell's last) gave two entries of
    one build 0.980 of each other's time over a run (results/fwd_wgmma_o_direct_store_d64/d96od: default-again's purpose). A cyclic
    rotation (stop 21-22) balanced the slots but not the neighbours: each entry always followed the same one, and an
    added entry (listed after default-again, before SDPA flash) ran 1-2% under the control whatever it timed, even
    forward()'s own build (results/lab_ab_method/entry_order_cyclic: 0.992 against the control's 1.006 with flash in the run, 1.007
    against 1.010 without it)."""
    n = len(cell_entries)
    if n < 3:
        return cell_entries[i % n:] + cell_entries[:i % n] if n else []
    base, lo, hi = [0], 1, n - 1  # 0, 1, n-1, 2, n-2, ...: each difference mod n once
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    r = i % (n if n % 2 == 0 else 2 * n)  # odd n: the n rows and their mirror images
    row = [cell_entries[(x + r % n) % n] for x in base]
    return row if r < n else row[::-1]


def rounds(timings: list) -> dict:
    """R timings of one entry in balanced rounds (rotate's rows): the mean of their medians (a linear drift through the
    cell then costs every entry the same, as each takes every slot equally often), all medians in pass_ms, the
    extremes of all."""
    return dict(median_ms=sum(t["median_ms"] for t in timings) / len(timings),
                pass_ms=[t["median_ms"] for t in timings],
                min_ms=min(t["min_ms"] for t in timings), max_ms=max(t["max_ms"] for t in timings),
                **_mean_clock(timings))


def failed(rec: dict, exc: Exception) -> dict:
    """Record an entry that raised while checked or timed (ok False, the error as its skip reason), and let the
    device finish what it had queued, so one broken entry does not hide the others."""
    import torch

    rec.update(ok=False, skipped=f"error: {type(exc).__name__}: {exc}"[:300])
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return rec


def predict(history, n):
    """Predicted seconds per call at n from the last two measured (n, seconds) (t ~ n^p, 1 <= p <= 3)."""
    if not history:
        return None
    if len(history) == 1:
        (n1, t1), = history
        return t1 * (n / n1) ** 2  # pessimistic until a second point gives the exponent
    (n1, t1), (n2, t2) = history[-2:]
    p = min(3.0, max(1.0, math.log(max(t2, 1e-9) / max(t1, 1e-9)) / math.log(n2 / n1)))
    return t2 * (n / n2) ** p


# ----------------------------------------------------------------------------------------- command lines
# The GPU scripts check every argument right after parsing, before any GPU work: a bad value is ap.error (the usage,
# then one line "prog: error: ...", exit 2). Then no_gpu(): a machine without a CUDA GPU is told so in one line and
# the script exits 2, instead of a traceback from the first CUDA call.

def no_gpu(prog: str) -> bool:
    """True, after one line on stderr, where torch sees no CUDA GPU (the caller then returns 2)."""
    import sys

    import torch

    if torch.cuda.is_available():
        return False
    print(f"{prog}: needs a CUDA GPU (torch {torch.__version__} sees none)", file=sys.stderr)
    return True


def _items(ap, flag: str, text) -> list[str]:
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        ap.error(f"{flag}: empty list {text!r}")
    return items


def name_list(ap, flag: str, text, choices, what: str = "name") -> list[str]:
    """--flag's comma-separated names ("float16,bfloat16"), each one of `choices`; else ap.error naming it."""
    items = _items(ap, flag, text)
    for s in items:
        if s not in choices:
            ap.error(f"{flag}: unknown {what} {s!r}; choose from {', '.join(map(str, choices))}")
    return items


def int_list(ap, flag: str, text, *, choices=None, at_most: int | None = None, why: str = "") -> list[int]:
    """--flag's comma-separated positive integers ("512,1024"), each one of `choices` and at most `at_most` where
    given (why: the reason, for the message); else ap.error naming the value."""
    out = []
    for s in _items(ap, flag, text):
        if not (s.isascii() and s.isdigit()) or int(s) <= 0:  # "-5", "2.5", "1e3", "0", "²"
            ap.error(f"{flag} must be a comma-separated list of positive integers, got {s!r}")
        v = int(s)
        if choices is not None and v not in choices:
            ap.error(f"{flag}: {v} unsupported{f' ({why})' if why else ''}; choose from "
                     f"{', '.join(map(str, choices))}")
        if at_most is not None and v > at_most:
            ap.error(f"{flag}: {v} is over {at_most}{f' ({why})' if why else ''}")
        out.append(v)
    return out


def flag_list(ap, flag: str, text) -> list[bool]:
    """--causal's "0", "1" or "0,1" as bools; anything else is ap.error."""
    return [s == "1" for s in name_list(ap, flag, text, ("0", "1"), "value")]


def positive_int(ap, flag: str, value: int) -> int:
    """An integer option (argparse's type=int) that must be at least 1 (--rounds, --jobs, ...); else ap.error."""
    if value < 1:
        ap.error(f"{flag} must be a positive integer, got {value}")
    return value


def positive(ap, flag: str, value, *, zero: bool = False):
    """A finite number > 0 (>= 0 with zero=True) from --flag; else ap.error."""
    if not (math.isfinite(value) and (value > 0 or zero and value == 0)):
        ap.error(f"{flag} must be a {'non-negative' if zero else 'positive'} finite number, got {value!r}")
    return value


def cell_list(ap, flag: str, text) -> list[tuple[int, int, bool]]:
    """--cells "d:N:causal,..." (the probes' cells of fa2_wgmma and SDPA) as (d, N, causal); a malformed cell, a head
    dim fa2_wgmma does not take, N < 1 or a causal flag other than 0 or 1 is ap.error."""
    from kernels import fa2_wgmma

    out = []
    for cell in _items(ap, flag, text):
        parts = cell.split(":")
        if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts) or parts[2] not in ("0", "1"):
            ap.error(f"{flag}: malformed cell {cell!r}; give d:N:causal, e.g. 128:4096:1 (causal 0 or 1)")
        d, n, causal = int(parts[0]), int(parts[1]), parts[2] == "1"
        if d not in fa2_wgmma.HEAD_DIMS:
            ap.error(f"{flag}: {cell}: d={d} unsupported; fa2_wgmma takes d in {', '.join(map(str, fa2_wgmma.HEAD_DIMS))}")
        if n < 1:
            ap.error(f"{flag}: {cell}: N must be a positive integer")
        out.append((d, n, causal))
    return out
