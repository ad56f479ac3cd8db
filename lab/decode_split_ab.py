"""The split count of split-KV decoding, A/B on a GPU (issue 44): today's rule against whole-residency splits.

    PYTHONPATH=. python lab/decode_split_ab.py --out DIR [--budget-s 150]

counting/split_rule.num_splits takes S = ceil(2 SMs / (B H_kv row_tiles)): at B = 8, H_kv = 8 that is S = 5, 320 CTAs
for 264 resident slots (2 per SM at d <= 128), so 56 CTAs run in a second round with little in flight; the H100 run
(results/decode_speed/) has split_kv_fast at 80-92% of the copy bandwidth there against SDPA's 102-106%. The
candidate: S = floor(2 SMs / (B H_kv row_tiles)) (at least 1, at most Tc), every CTA resident at once, each split a
little longer. For each shape where the two differ (B = 2, 4, 8, 16; caches 32k and 128k; d = 64, 128; fp16; H = 32,
H_kv = 8, Nq = 1; contiguous and paged, page 256), both are checked against float64 (bench/decode_speed.check_subset)
and timed (do_bench medians), with SDPA cuDNN beside them; K/V bandwidth as % of the device copy. Writes
decode_split_ab.json under --out and prints one line per shape.

--base DIR (a tree's `git archive REF kernels` unpacked there) also times that tree's kernels/split_kv_fast.py with
its own .cu, launched by this tree's code, at both split counts ("base_ceil", "base_floor", paged and not), so a
kernel change is an A/B within one run (here: the paged path's one block_table lookup per tile, load_kv).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import decode_speed as ds  # noqa: E402
from bench import harness  # noqa: E402

BATCHES, CACHES, DIMS = (2, 4, 8, 16), (32768, 131072), (64, 128)


def bench(fn) -> float:
    """do_bench median (ms) through bench.harness, as bench/decode_speed.py times its cells."""
    return harness.time_fn(fn, [()], warmup_ms=10, rep_ms=40)["median_ms"]


def splits(b: int, n: int, d: int, sms: int) -> dict:
    """{'ceil': today's rule, 'floor': whole residency} for this shape (counting/split_rule.py's arithmetic)."""
    from counting import split_rule
    from kernels import split_kv_fast

    row_tiles, bk = -(-(ds.H // ds.H_KV) * ds.N_Q // 16), split_kv_fast.block_k(d)
    ctas = b * ds.H_KV * row_tiles
    return dict(ceil=split_rule.num_splits(b, ds.H_KV, row_tiles, n, bk, sms),
                floor=max(1, min((2 * sms) // ctas, -(-n // bk))))


def base_module(tree: Path):
    """kernels/split_kv_fast.py of another tree as its own module: its SOURCE is that tree's .cu (and headers)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("base_split_kv_fast", tree / "kernels" / "split_kv_fast.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_shape(d, b, n, copy_gbps, sms, base=None) -> dict:
    import torch

    from kernels import split_kv_fast

    s = splits(b, n, d, sms)
    row = dict(d=d, batch=b, cache=n, splits=s, ms={}, pct_copy={}, err={})
    gen = torch.Generator(device="cuda").manual_seed(b * 7 + d)
    dt = torch.float16
    q = torch.randn(b, ds.H, ds.N_Q, d, device="cuda", generator=gen, dtype=dt)
    k, v = (torch.randn(b, ds.H_KV, n, d, device="cuda", generator=gen, dtype=dt) for _ in range(2))
    pages = b * (-(-n // ds.PAGE))
    kp, vp = (torch.randn(pages, ds.H_KV, ds.PAGE, d, device="cuda", generator=gen, dtype=dt) for _ in range(2))
    table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).reshape(b, -1).contiguous()
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    kv_bytes = 2 * b * ds.H_KV * n * d * 2
    runs = [("", split_kv_fast)] + ([("base_", base)] if base is not None else [])
    for (tag, mod), (rule, S), paged in ((m, r, p) for m in runs for r in s.items() for p in (False, True)):
        name = f"{tag}{rule}{'_paged' if paged else ''}"
        args = (q, kp, vp) if paged else (q, k, v)
        kw = dict(cache_seqlens=lens, block_table=table) if paged else {}
        o, lse = mod.forward(*args, num_splits=S, **kw)
        row["err"][name] = max(ds.check_subset(o, lse, q, *args[1:], table if paged else None, paged))
        row["ms"][name] = bench(lambda a=args, w=kw, S=S, f=mod.forward: f(*a, num_splits=S, **w))
        row["pct_copy"][name] = 100 * kv_bytes / (row["ms"][name] * 1e-3) / 1e9 / copy_gbps
    fn, _ = ds.sdpa_call("cudnn", q, k, v)
    row["ms"]["sdpa_cudnn"] = bench(fn)
    row["pct_copy"]["sdpa_cudnn"] = 100 * kv_bytes / (row["ms"]["sdpa_cudnn"] * 1e-3) / 1e9 / copy_gbps
    row["ok"] = all(e <= 2e-2 for e in row["err"].values())
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--base", type=Path, help="a tree holding another kernels/split_kv_fast.py (+ its cuda/) to time")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    t0, sms = time.time(), torch.cuda.get_device_properties(0).multi_processor_count
    copy = ds.copy_bandwidth()
    base = base_module(args.base) if args.base else None
    res = dict(device=torch.cuda.get_device_name(), copy=copy, base=str(args.base or ""), rows=[])
    for d in DIMS:
        for n in CACHES:
            for b in BATCHES:
                s = splits(b, n, d, sms)
                if s["ceil"] == s["floor"] or time.time() - t0 > args.budget_s:
                    continue
                r = run_shape(d, b, n, copy["gbps"], sms, base)
                res["rows"].append(r)
                pc = r["pct_copy"]
                print(f"d={d} B={b:2d} N={n:6d} S ceil {s['ceil']:2d} / floor {s['floor']:2d}: "
                      f"{pc['ceil']:5.1f}% / {pc['floor']:5.1f}% (paged {pc['ceil_paged']:5.1f}% / "
                      f"{pc['floor_paged']:5.1f}%), cuDNN {pc['sdpa_cudnn']:5.1f}%{'' if r['ok'] else '  CHECK FAILED'}"
                      + (f"; base paged {pc['base_ceil_paged']:5.1f}% / {pc['base_floor_paged']:5.1f}%, contiguous "
                         f"{pc['base_ceil']:5.1f}% / {pc['base_floor']:5.1f}%" if base else ""),
                      flush=True)
                torch.cuda.empty_cache()
                (args.out / "decode_split_ab.json").write_text(json.dumps(res, indent=1))
    print(f"done in {time.time() - t0:.0f} s; {sum(not r['ok'] for r in res['rows'])} shapes failed the check")
    return 0 if all(r["ok"] for r in res["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
