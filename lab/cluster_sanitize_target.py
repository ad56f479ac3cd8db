"""The cluster v_once kernel on bench/sanitize.py's shapes for it, every build, for compute-sanitizer.

    compute-sanitizer --tool memcheck|racecheck --report-api-errors no python3 lab/cluster_sanitize_target.py \
        [--configs default,NWG=2,...] [--dtypes float16,bfloat16]

bench/sanitize.py runs the registry's option sets (placement) on the default build; this runs each build of
kernels.v_once_cluster (the default and its SWEEP candidates: two consumer warpgroups, a 4-slot ring, Bc = 128;
and MAX_CLUSTER=16, the non-portable cluster, on SHAPES16) on KERNEL_SHAPES["v_once_cluster"] (every cluster size, each CTA's slice several times round the ring, several Q
blocks, causal ranks with nothing to do, a GQA view), each launch judged by bench.harness.compare (poisoned
outputs, float64 reference). One line per launch; exit 1 on a wrong result.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


SHAPES16 = [(1, 1, 130, 15000, 128, True), (1, 1, 70, 20000, 64, False)]
# --small (racecheck, which is slow on shared memory): one Q block, one head, a cluster of each size
SMALL = [(1, 1, 64, 200, 64, True), (1, 1, 64, 1600, 64, False), (1, 1, 64, 3100, 64, True), (1, 1, 64, 6200, 64, False)]
# --forced: short rows split over a cluster larger than they need (config CLUSTER=k), so racecheck sees every
# cluster size's reductions, idle ranks (no key block) and a reused ring slot in seconds, not minutes:
# (B, H, Nq, Nk, d, causal, k)
FORCED = [(1, 1, 64, 600, 64, False, 2), (1, 1, 64, 1100, 64, True, 4), (1, 1, 64, 900, 128, False, 8),
          (1, 1, 100, 2100, 128, True, 8)]


def parse_config(text: str) -> dict | None:
    """"default" (None) or "KNOB=V[+KNOB=V]" with integer values; ValueError naming the form otherwise."""
    if text == "default":
        return None
    try:
        return {k: int(v) for k, v in (item.split("=") for item in text.split("+"))}
    except ValueError:
        raise ValueError("a build is default or KNOB=V[+KNOB=V] with integer values") from None


def main(argv=None) -> int:
    import torch

    from bench import harness
    from bench.sanitize import KERNEL_SHAPES
    from kernels import v_once_cluster as vc

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(["default"] + ["+".join(f"{k}={v}" for k, v in c.items())
                                                                 for c in vc.SWEEP]))
    ap.add_argument("--dtypes", default="float16")
    ap.add_argument("--small", action="store_true", help="SMALL shapes (one Q block, one head, CS 1/2/4/8)")
    ap.add_argument("--forced", action="store_true", help="FORCED shapes (short rows over clusters of 2/4/8)")
    args = ap.parse_args(argv)
    for cfg_text in (c for c in args.configs.split(",")):  # each build, before any GPU work (one line, exit 2)
        try:
            vc.build_config(parse_config(cfg_text))
        except ValueError as exc:
            ap.error(f"--configs: {cfg_text!r}: {exc}")
    harness.name_list(ap, "--dtypes", args.dtypes, ("float16", "bfloat16"), "dtype")
    if harness.no_gpu("cluster_sanitize_target"):
        return 2
    bad = 0
    for cfg_text in args.configs.split(","):
        config = parse_config(cfg_text)
        for dt in args.dtypes.split(","):
            dtype = getattr(torch, dt)
            shapes = SMALL if args.small else KERNEL_SHAPES["v_once_cluster"]
            if args.forced:
                shapes = FORCED
            if config and config.get("MAX_CLUSTER") == 16:  # rows only a cluster of 16 holds
                shapes = SHAPES16
            for b, h, n_q, n_k, d, causal, *extra in shapes:
                h_kv = extra[0] if extra and not args.forced else h
                if args.forced:
                    config = dict(parse_config(cfg_text) or {}, CLUSTER=extra[0])
                g = torch.Generator(device="cuda").manual_seed(n_q + n_k)
                q = torch.randn(b, h, n_q, d, generator=g, device="cuda").to(dtype)
                k, v = (torch.randn(b, h_kv, n_k, d, generator=g, device="cuda").to(dtype) for _ in range(2))
                out = (torch.full_like(q, float("nan")), torch.full((b, h, n_q), float("nan"), device="cuda"))
                label = f"v_once_cluster {cfg_text} {dt} {(b, h, n_q, n_k, d)} causal={causal} H_kv={h_kv}"
                print("@@SANITIZE kernel=" + label, flush=True)
                try:
                    o, lse = vc.forward(q, k, v, causal=causal, placement="cluster", config=config, out=out)
                    torch.cuda.synchronize()
                    rep = h // h_kv
                    res = harness.compare(o, lse, q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1),
                                          causal, dt)
                except Exception as exc:  # one failing launch must not hide the others
                    res = dict(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
                bad += not res["ok"]
                print(f"{label} CS={vc.last_plan().get('cluster_size')}: {'ok' if res['ok'] else 'BAD ' + str(res)}",
                      flush=True)
    print("@@DONE", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
