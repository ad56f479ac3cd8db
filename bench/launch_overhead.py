"""Host work per kernel call, ours (kernels.loader: cuda.bindings' cuLaunchKernel) beside torch SDPA's.

    PYTHONPATH=. python bench/launch_overhead.py [--out DIR] [--kernels fa2_tc,fa2,...]

Why: a CUDA-event-timed call includes the host work of the call (argument checks, output allocation,
the launch) whenever that is longer than the GPU's work, so at N = 512…2k it is part of every
benchmark figure (lab/NOTES-tc.md v2). On a tiny problem whose kernel time is negligible this measures:
  host_us    wall time per call of 2000 back-to-back calls without synchronising (the host's cost),
  event_ms   the per-call median of bench.harness.time_events (per-call CUDA events),
for each entry of bench.harness's table (default: fa2_tc, fa2_wgmma, v_once_tc, teaching fa2, SDPA's
flash and cuDNN). Each is checked by the harness's rule first. Writes launch_overhead.json, every
row stamped with the run id.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402

SHAPE = (1, 2, 128, 64)  # B, H, N, d




def loader_pieces(q, k, v) -> dict:
    """Where fa2_tc's host time goes: kernels.loader's memoised lookup, its launch alone (the same
    arguments each time), torch's current-stream query inside it; the rest is the launcher's checks
    and output allocation."""
    import math

    import torch

    try:
        from kernels import fa2_tc, loader

        b, h, n, d = q.shape
        defs = fa2_tc.defines_for(d, False)
        o, lse = torch.empty_like(q), torch.empty((b, h, n), device=q.device)
        kern = loader.get_function(fa2_tc.SOURCE, fa2_tc.KERNEL, defines=defs, device=q.device.index)
        args = (q, k, v, o, lse, n, n, 1.0 / math.sqrt(d) * fa2_tc.LOG2E, 1.0 / math.sqrt(d), 0)
        grid, block = (-(-n // defs["BLOCK_M"]), b * h, 1), (32 * defs["NWARPS"], 1, 1)
        smem = fa2_tc.smem_bytes(defs)
        return dict(
            get_function=harness.host_us(calls=2000, fn=lambda: loader.get_function(fa2_tc.SOURCE, fa2_tc.KERNEL, defines=defs,
                                                             device=q.device.index)),
            launch=harness.host_us(lambda: kern.launch(grid, block, args, shared_mem=smem), 2000),
            current_stream=harness.host_us(lambda: torch.cuda.current_stream(q.device.index).cuda_stream, 2000),
            two_empty=harness.host_us(lambda: (torch.empty_like(q), torch.empty((b, h, n), device=q.device)), 2000))
    except Exception as exc:  # a renamed launcher internal: report, do not fail the measurement
        return dict(error=f"{type(exc).__name__}: {exc}"[:200])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).resolve().parent.parent / "results"))
    ap.add_argument("--kernels", default="fa2_tc,fa2_wgmma,v_once_tc_auto_lazy,fa2,sdpa_flash,sdpa_cudnn")
    args = ap.parse_args(argv)
    harness.name_list(ap, "--kernels", args.kernels, harness.entry_names(all_options=True), "kernel")
    if harness.no_gpu("launch_overhead"):
        return 2
    import torch

    b, h, n, d = SHAPE
    wanted = [x for x in args.kernels.split(",") if x]
    table = {e.label: e for e in harness.entries(wanted, all_options=True)}
    q, k, v = harness.random_qkv(b, h, n, n, d, torch.float16)
    rows, bad = [], 0
    for label in wanted:
        e = table.get(label)
        if e is None:
            rows.append(dict(kernel=label, skipped="not in the harness's table on this GPU"))
            continue
        chk = harness.check_one(e, b, h, n, n, d, torch.float16, False)
        fn = lambda e=e: e.forward(q, k, v, False)  # noqa: E731
        row = dict(kernel=label, path="torch" if e.spec is None else "loader", rel_err=chk.get("rel_err"),
                   ok=chk.get("ok"), run_id=harness.run_info()["run_id"])
        if chk.get("ok"):
            row.update(host_us=harness.host_us(fn, 2000),
                       event_ms=harness.time_events(lambda *_: fn(), [()], warmup=20, reps=200)["median_ms"])
        else:
            bad += 1
            row["error"] = chk.get("error", "failed the correctness check")
        rows.append(row)
        print(row, flush=True)
    pieces = loader_pieces(q, k, v)
    print("fa2_tc per-call pieces (µs):", pieces, flush=True)
    sdpa = [r["host_us"] for r in rows if r.get("path") == "torch" and "host_us" in r]
    ours = [r["host_us"] for r in rows if r.get("path") == "loader" and "host_us" in r]
    summary = dict(sdpa_min_host_us=min(sdpa) if sdpa else None, ours_max_host_us=max(ours) if ours else None)
    print(summary)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch_overhead.json").write_text(json.dumps(
        dict(harness.environment(), device=torch.cuda.get_device_name(), shape=list(SHAPE), dtype="float16",
             rows=rows, summary=summary, fa2_tc_pieces_us=pieces), indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
