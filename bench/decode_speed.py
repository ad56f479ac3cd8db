"""Split-KV decoding speed (issue 44): kernels.split_kv_fast against PyTorch's SDPA backends and fa2_wgmma on
decode shapes, as achieved K/V bandwidth against a device copy. Finishes in under 4 minutes on an H100.

    python bench/decode_speed.py --out results/decode_speed [--budget-s 220] [--quick]

Timing is bench.harness.time_fn (triton.testing.do_bench medians), SDPA is bench.harness.sdpa.
1. Copy bandwidth: dst.copy_(src) on a 2 GiB buffer, median of do_bench, bytes = read + write.
2. Per dtype (fp16, bf16), d (64, 128), batch (1, 8, 64), cache length (1k, 32k, 128k, 256k where memory allows),
   H = 32 query heads, H_kv = 8, Nq = 1, non-causal, full caches:
     check   split_kv_fast (contiguous and paged) against float64 on a subset (first and last (b, kv head)): a row
             that fails is recorded (ok = false) and its timings are still reported, marked.
     time    (do_bench medians, L2 flushed before each call by do_bench)
       split_kv_fast         contiguous cache (B, H_kv, N, d), default splits (counting/split_rule.py)
       split_kv_fast_paged   page 256, pages in a random permutation
       split_kv              the teaching kernel, caches of at most 64 MB only
       sdpa_flash / sdpa_cudnn / sdpa_efficient   one SDPA backend each, enable_gqa=True where the
                             backend takes it, else K/V repeated to H heads (the row says which; the repeat is made
                             before timing, so it is not timed); a backend that refuses the shape is recorded as such
       fa2_wgmma             kernels.fa2_wgmma.forward (GQA native: k, v with H_kv heads)
   Bandwidth = bytes of K and V read once (2 B H_kv N d x element size) / time, and as % of the copy bandwidth.
Writes decode_speed.json and decode_speed.md under --out (rewritten after every shape).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

H, H_KV, N_Q = 32, 8, 1
PAGE = 256
CACHES = (1024, 32768, 131072, 262144)
BATCHES = (1, 8, 64)
TEACHING_MAX_BYTES = 64 * 2**20
SDPA = ("flash", "cudnn", "efficient")


def bench(fn, rep_ms=40):
    from bench import harness

    return harness.time_fn(fn, [()], warmup_ms=10, rep_ms=rep_ms)["median_ms"]


def copy_bandwidth() -> dict:
    import torch

    n = 2 * 2**30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    src.fill_(1)
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), rep_ms=200)
    return dict(bytes=2 * n, ms=ms, gbps=2 * n / (ms * 1e-3) / 1e9)  # the buffers go with this frame


def check_subset(o, lse, q, k, v, table, paged):
    """max |o - o64| and |lse - lse64| on the first and last (b, kv head): a plain float64 softmax."""
    import torch

    b_, h, n_q, d = q.shape
    h_kv = k.shape[1]
    g = h // h_kv
    scale = 1.0 / math.sqrt(d)
    err_o = err_l = 0.0
    for b in {0, b_ - 1}:
        for hk in {0, h_kv - 1}:
            if paged:
                kk = k[table[b].long(), hk].reshape(-1, d)
                vv = v[table[b].long(), hk].reshape(-1, d)
            else:
                kk, vv = k[b, hk], v[b, hk]
            qq = q[b, hk * g:(hk + 1) * g].double().reshape(-1, d)
            s = scale * qq @ kk.double().T
            lse64 = torch.logsumexp(s, -1)
            o64 = torch.exp(s - lse64[:, None]) @ vv.double()
            err_o = max(err_o, (o[b, hk * g:(hk + 1) * g].double().reshape(-1, d) - o64).abs().max().item())
            err_l = max(err_l, (lse[b, hk * g:(hk + 1) * g].double().reshape(-1) - lse64).abs().max().item())
    return err_o, err_l


def sdpa_call(backend, q, k, v):
    """(fn, how) for one SDPA backend: enable_gqa=True if the backend runs it, else K/V repeated to H heads."""
    import torch

    from bench import harness

    errors = []
    try:
        harness.sdpa(backend, q, k, v, False, enable_gqa=True)
        torch.cuda.synchronize()
        return (lambda: harness.sdpa(backend, q, k, v, False, enable_gqa=True)), "enable_gqa"
    except Exception as exc:  # the backend refuses GQA (or the kwarg is unknown): repeat K/V
        errors.append(f"enable_gqa: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    free = torch.cuda.mem_get_info()[0]
    g = q.shape[1] // k.shape[1]
    if 2 * k.numel() * k.element_size() * g > 0.8 * free:
        raise RuntimeError("; ".join(errors + ["repeating K/V to H heads does not fit in memory"]))
    kr, vr = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    try:
        harness.sdpa(backend, q, kr, vr, False)
        torch.cuda.synchronize()
    except Exception as exc:
        errors.append(f"repeat: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        raise RuntimeError("; ".join(errors)) from None
    return (lambda: harness.sdpa(backend, q, kr, vr, False)), "repeat_kv"


def run_shape(dtype, d, b, n, copy_gbps, quick) -> dict:
    import torch

    row = dict(dtype=str(dtype).replace("torch.", ""), d=d, batch=b, cache=n, H=H, H_kv=H_KV, Nq=N_Q)
    kv_bytes = 2 * b * H_KV * n * d * torch.empty((), dtype=dtype).element_size()
    row["kv_bytes"] = kv_bytes
    free = torch.cuda.mem_get_info()[0]
    if kv_bytes * 1.3 + 2 * 2**30 > free:
        row["skipped"] = f"K/V {kv_bytes / 2**30:.1f} GiB does not fit ({free / 2**30:.1f} GiB free)"
        return row
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, H, N_Q, d, device="cuda", generator=gen, dtype=dtype)
    times, how = {}, {}

    def record(name, fn):
        try:
            fn()
            torch.cuda.synchronize()
            times[name] = bench(fn, rep_ms=20 if quick else 40)
        except Exception as exc:  # a refusal or an out-of-memory: recorded, the run goes on
            times[name] = None
            how[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            torch.cuda.synchronize()

    _contiguous(q, dtype, d, b, n, gen, row, record, times, how)
    torch.cuda.empty_cache()
    _paged(q, dtype, d, b, n, gen, row, record)
    torch.cuda.empty_cache()
    tol = 2e-2 if dtype == torch.float16 else 5e-2
    row["ok"] = all(row.get(key, math.inf) <= tol for key in ("err_o", "err_lse", "err_o_paged", "err_lse_paged"))
    row["ms"] = times
    row["how"] = how
    row["gbps"] = {k_: (kv_bytes / (t * 1e-3) / 1e9 if t else None) for k_, t in times.items()}
    row["pct_copy"] = {k_: (100 * g / copy_gbps if g else None) for k_, g in row["gbps"].items()}
    others = [t for name, t in times.items() if name.startswith("sdpa_") and t]
    fast = times.get("split_kv_fast")
    row["speedup_vs_best_sdpa"] = min(others) / fast if others and fast else None
    row["splits"] = _splits(b, n, d)
    return row


def _contiguous(q, dtype, d, b, n, gen, row, record, times, how):
    """The contiguous cache (B, H_kv, N, d): check, then split_kv_fast, the teaching split_kv (small), SDPA, fa2_wgmma;
    the cache (and any repeated K/V) is freed when this returns."""
    import torch

    from kernels import split_kv, split_kv_fast

    k = torch.randn(b, H_KV, n, d, device="cuda", generator=gen, dtype=dtype)
    v = torch.randn(b, H_KV, n, d, device="cuda", generator=gen, dtype=dtype)
    try:  # checked before it is timed; a failure is recorded (err = inf) and the run goes on
        o, lse = split_kv_fast.forward(q, k, v)
        row["err_o"], row["err_lse"] = check_subset(o, lse, q, k, v, None, False)
    except Exception as exc:
        row["err_o"] = row["err_lse"] = math.inf
        how["split_kv_fast_check"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        torch.cuda.synchronize()
    record("split_kv_fast", lambda: split_kv_fast.forward(q, k, v))
    if row["kv_bytes"] <= TEACHING_MAX_BYTES:
        record("split_kv", lambda: split_kv.forward(q, k, v))
    for backend in SDPA:
        try:
            fn, how[f"sdpa_{backend}"] = sdpa_call(backend, q, k, v)
            record(f"sdpa_{backend}", fn)
        except Exception as exc:
            times[f"sdpa_{backend}"] = None
            how[f"sdpa_{backend}"] = f"refused: {str(exc)[:300]}"
        fn = None
        torch.cuda.empty_cache()
    try:
        from kernels import fa2_wgmma

        record("fa2_wgmma", lambda: fa2_wgmma.forward(q, k, v))
    except Exception as exc:
        times["fa2_wgmma"], how["fa2_wgmma"] = None, f"{type(exc).__name__}: {exc}"[:200]


def _paged(q, dtype, d, b, n, gen, row, record):
    """The paged cache: page 256, every sequence's pages in a random permutation of the pool."""
    import torch

    from kernels import split_kv_fast

    pages = b * (-(-n // PAGE))
    kp = torch.randn(pages, H_KV, PAGE, d, device="cuda", generator=gen, dtype=dtype)
    vp = torch.randn(pages, H_KV, PAGE, d, device="cuda", generator=gen, dtype=dtype)
    table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).reshape(b, -1).contiguous()
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    try:
        o, lse = split_kv_fast.forward(q, kp, vp, cache_seqlens=lens, block_table=table)
        row["err_o_paged"], row["err_lse_paged"] = check_subset(o, lse, q, kp, vp, table, True)
    except Exception as exc:
        row["err_o_paged"] = row["err_lse_paged"] = math.inf
        row["paged_check_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        torch.cuda.synchronize()
    record("split_kv_fast_paged", lambda: split_kv_fast.forward(q, kp, vp, cache_seqlens=lens, block_table=table))


def _splits(b, n, d):
    import torch

    from counting import split_rule
    from kernels import split_kv_fast

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return split_rule.num_splits(b, H_KV, -(-(H // H_KV) * N_Q // 16), n, split_kv_fast.block_k(d), sms)


def table_md(res) -> str:
    names = ("split_kv_fast", "split_kv_fast_paged", "split_kv", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient",
             "fa2_wgmma")
    lines = [f"# Split-KV decoding speed ({res['device']})", "",
             f"Copy bandwidth: {res['copy']['gbps']:.0f} GB/s (dst.copy_(src), 2 GiB, read + write). H = {H}, "
             f"H_kv = {H_KV}, Nq = {N_Q}, non-causal, full caches. Cells: µs (% of copy bandwidth, K/V read once). "
             "— = not run (size), x = refused or failed (see the JSON's `how`).", "",
             "| dtype | d | B | cache | S | ok | " + " | ".join(names) + " | fast vs best SDPA |",
             "|---|---|---|---|---|---|" + "---|" * len(names) + "---|"]
    for r in res["rows"]:
        if "skipped" in r:
            lines.append(f"| {r['dtype']} | {r['d']} | {r['batch']} | {r['cache']} | | skipped: {r['skipped']} |"
                         + " |" * (len(names) + 1))
            continue
        cells = []
        for n_ in names:
            if n_ not in r["ms"]:
                cells.append("—")
            elif r["ms"][n_] is None:
                cells.append("x")
            else:
                cells.append(f"{r['ms'][n_] * 1e3:.1f} ({r['pct_copy'][n_]:.0f}%)")
        sp = r["speedup_vs_best_sdpa"]
        lines.append(f"| {r['dtype']} | {r['d']} | {r['batch']} | {r['cache']} | {r['splits']} | "
                     f"{'yes' if r['ok'] else 'NO'} | " + " | ".join(cells) + (f" | {sp:.2f}x |" if sp else " | |"))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=220.0, help="stop starting new shapes after this long")
    ap.add_argument("--quick", action="store_true", help="shorter do_bench windows, caches 1k and 32k only")
    args = ap.parse_args(argv)
    from bench import harness

    if harness.no_gpu("decode_speed"):
        return 2
    import torch

    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    res = dict(device=torch.cuda.get_device_name(0), torch=torch.__version__, environment=harness.environment(),
               copy=copy_bandwidth(), rows=[], budget_s=args.budget_s)
    print(f"copy: {res['copy']['gbps']:.0f} GB/s", flush=True)
    caches = CACHES[:2] if args.quick else CACHES
    for d in (128, 64):  # d = 128 first: what a short --budget-s keeps
        for dtype in (torch.float16, torch.bfloat16):
            for b in BATCHES:
                for n in caches:
                    if time.time() - t0 > args.budget_s:
                        res["rows"].append(dict(dtype=str(dtype), d=d, batch=b, cache=n, skipped="time budget"))
                        continue
                    row = run_shape(dtype, d, b, n, res["copy"]["gbps"], args.quick)
                    res["rows"].append(row)
                    if "ms" in row:
                        print(f"{row['dtype']} d={d} B={b} N={n}: ok={row['ok']} fast "
                              f"{row['ms'].get('split_kv_fast')} ms ({row['pct_copy'].get('split_kv_fast')}% copy), "
                              f"paged {row['ms'].get('split_kv_fast_paged')}, vs best SDPA "
                              f"{row['speedup_vs_best_sdpa']}", flush=True)
                    else:
                        print(f"{dtype} d={d} B={b} N={n}: {row.get('skipped')}", flush=True)
                    res["elapsed_s"] = time.time() - t0
                    (args.out / "decode_speed.json").write_text(json.dumps(res, indent=1, default=str))
                    (args.out / "decode_speed.md").write_text(table_md(res))
    bad = [r for r in res["rows"] if r.get("ok") is False]
    print(f"done in {time.time() - t0:.0f} s; {len(bad)} shapes failed the float64 check", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
