"""NVRTC every build the backward checks launch, in parallel, into the kernel cache (lab/gpu_check_bwd.sh).

    PYTHONPATH=. python lab/precompile_bwd.py [--jobs 16] [--teaching | --new]

The builds: compile_configs() of every kernel with a backward, kernels.fa2_wgmma_bwd's own builds, the decode
kernels' (split_kv, split_kv_fast), v4's A/B alternatives (lab/bwd_ws.py), both backwards' ORDER=1 / LPT=1 builds
(lab/bwd_order_ab.py), plus the teaching fa2 and naive forwards
and backwards at the block shapes tests/test_kernels_backward.py and lab/bwd_sanitize_target.py use (--teaching: the teaching tier only, and the
frozen fa2_bwd_v1.cu of lab/teach_bwd_ab.py; --new: the Hopper backward's and the decode kernels' builds only).
Serially they take minutes; the GPU tests then find them cached. Exit 1 if one fails to compile (its log is printed).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TEACHING_BLOCKS = ((64, 64), (16, 64), (64, 16), (32, 16), (32, 32))


def new_builds() -> list[tuple]:
    """The Hopper backward's own builds (a spec's compile_configs() are its forward's: v3's d = 64, 96, 128, 256's three
    passes, deterministic, v4's default main kernels at d = 64, 128, both dtypes, each of which
    lab/bwd_wgmma_sanitize_target.py launches) and the decode
    kernels' (lab/decode_sanitize_target.py)."""
    from kernels import KERNELS, fa2_wgmma_bwd, loader
    from lab import bwd_ws

    arch = loader.default_arch()
    return ([(src, defs, fa2_wgmma_bwd.ARCH) for src, _, defs in fa2_wgmma_bwd.compile_configs()]
            + [(src, defs, spec.arch or arch) for spec in KERNELS.values() if spec.decode
               for src, _, defs in spec.compile_configs()]
            + [(src, defs, bwd_ws.ARCH) for src, _, defs in bwd_ws.compile_configs()]  # v4's ALTERNATIVES too
            # issue 42's order A/B (lab/bwd_order_ab.py, the order1 GPU tests): both kernels' ORDER=1 / LPT=1 builds
            + [(src, defs, fa2_wgmma_bwd.ARCH) for src, _, defs in fa2_wgmma_bwd.order_configs()]
            + [(src, defs, bwd_ws.ARCH) for src, _, defs in bwd_ws.order_configs()])


def builds(teaching_only: bool = False, new_only: bool = False) -> list[tuple]:
    from kernels import KERNELS, _teaching, fa2, loader, naive

    if new_only:
        return unique(new_builds())
    arch = loader.default_arch()
    jobs = [(src, defs, spec.arch or arch) for spec in KERNELS.values() if spec.backward is not None
            and (spec.tier == "teaching" or not teaching_only) for src, _, defs in spec.compile_configs()]
    if not teaching_only:
        jobs += new_builds()
    for dt in _teaching.DTYPES:
        for br, bc in TEACHING_BLOCKS:
            jobs += [(fa2.SOURCE, _teaching.defines(dt, br, bc, FA2_OWN_V=v), arch) for v in (0, 1)]
            jobs += [(fa2.BWD_SOURCE, _teaching.defines(dt, br, bc, **knobs), arch)
                     for knobs in fa2.bwd_builds(dt, br, bc)]
            jobs += [(src, _teaching.defines(dt, br, bc), arch) for src in (naive.SOURCE, naive.BWD_SOURCE)]
        for br, bc in ((64, 32), (48, 32)):  # lab/teach_bwd_ab.py's other block shapes at d = 128
            jobs += [(fa2.BWD_SOURCE, _teaching.defines(dt, br, bc, **fa2.bwd_defines(dt, 128, br, bc)), arch)]
        if teaching_only:  # the frozen v1 lab/teach_bwd_ab.py times beside the shipped backward
            jobs += [(str(Path(__file__).resolve().parent / "cuda" / "fa2_bwd_v1.cu"), _teaching.defines(dt, 64, 64, D_PAD=p), arch) for p in (64, 128)]
    return unique(jobs)


def unique(jobs: list[tuple]) -> list[tuple]:
    """(source, defines, arch) jobs without repeats, in first-seen order."""
    return list({(str(s), tuple(sorted(d.items())), a): (s, d, a) for s, d, a in jobs}.values())


def compile_one(source, defines, arch):
    from kernels import loader

    loader.compile_cubin(source, defines=defines, arch=arch)


def compile_all(jobs: list[tuple], processes: int) -> list[str]:
    """NVRTC every (source, defines, arch) job into the kernel cache in `processes` processes; the failures' messages
    (lab/bwd_ws_ab.py and lab/bwd_order_ab.py precompile through it too)."""
    # spawn, not fork: default_arch() or the caller may have initialised CUDA, and a forked child must not inherit it
    with cf.ProcessPoolExecutor(max(1, processes), mp_context=mp.get_context("spawn")) as ex:
        futures = [ex.submit(compile_one, *job) for job in jobs]
        return [str(f.exception()) for f in futures if f.exception() is not None]


def compile_or_exit(jobs: list[tuple], processes: int) -> None:
    """compile_all, then one line with the count and the time; SystemExit with the first failure's message (the
    A/Bs' precompile step: a build that does not compile ends the run before any cell is timed)."""
    import time

    t0 = time.time()
    bad = compile_all(jobs, processes)
    if bad:
        raise SystemExit(f"a build failed to compile:\n{bad[0][:3000]}")
    print(f"precompiled {len(jobs)} builds in {time.time() - t0:.0f} s", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--teaching", action="store_true", help="only the teaching tier (fa2, naive)")
    ap.add_argument("--new", action="store_true",
                    help="only the Hopper backward's and the decode kernels' builds (lab/visits/sanitize_new.sh)")
    args = ap.parse_args(argv)
    from bench import harness

    harness.positive_int(ap, "--jobs", args.jobs)
    if args.teaching and args.new:
        ap.error("--teaching and --new name disjoint sets of builds; give one")
    jobs = builds(args.teaching, args.new)
    bad = compile_all(jobs, args.jobs)
    print(f"precompiled {len(jobs) - len(bad)} of {len(jobs)} builds" + (f"; FAILED: {bad[0][:2000]}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
