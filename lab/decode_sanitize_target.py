"""The decode kernels (kernels.split_kv, kernels.split_kv_fast) on small caches, for compute-sanitizer (issue 44;
lab/visits/sanitize_new.sh).

    compute-sanitizer --tool memcheck|racecheck|synccheck python3 lab/decode_sanitize_target.py \
        [split_kv,split_kv_fast] [small]

Contiguous and paged caches (pages of every sequence in a random order, page sizes that do and do not divide the
key block), GQA (g = 1, 2, 4, 8; MQA), num_splits > 1 so the merge runs (split_kv's merge kernel, split_kv_fast's
last-CTA merge and its arrival counters), an empty cache and a one-token cache beside a longer one, causal Nq > 1
with rows that see nothing (Nq > L_b), several packed row tiles (g Nq > 16), d = 256. A case outside a kernel's
limits (split_kv_fast: fp16/bf16, d in {64, 128, 256}, Nq <= 64) is skipped for it, and says so. The contract is
docs/decoding.md's. Each launch runs inside bench.harness.Poisoned (o, lse and the fp32 workspace start as NaN);
the oracle is a float64 softmax over the gathered cache positions each row sees (o = 0, lse = -inf where it sees
none). A marker line (bench.sanitize.MARK) before each case puts each sanitizer report in its section. Prints one
line per case and kernel; exits 1 on a non-finite or wrong output, 2 without a GPU.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAMES = ("split_kv", "split_kv_fast")
# (B, H_kv, g, Nq, d, cache lengths L_b, dtype, page_size or None (contiguous), causal, num_splits)
CASES = [
    (2, 2, 4, 1, 128, [700, 333], "float16", None, False, 4),     # contiguous GQA, 4 splits of 3 blocks
    (2, 1, 8, 1, 64, [1000, 129], "bfloat16", 16, False, 3),      # paged MQA, g = 8
    (3, 2, 2, 1, 128, [0, 1, 250], "bfloat16", 16, True, 3),      # paged: an empty and a one-token cache
    (3, 2, 4, 2, 64, [0, 1, 300], "float16", None, False, 2),     # contiguous: the same, Nq = 2
    (2, 2, 4, 5, 64, [3, 300], "float16", None, True, 4),         # causal Nq = 5 > L_0 = 3: rows that see nothing
    (1, 2, 4, 16, 128, [517], "bfloat16", 48, True, 5),           # causal, 64 packed rows (4 row tiles); page 48
    (1, 2, 2, 3, 256, [1001], "float16", 32, False, 7),           # d = 256, 7 splits that do not divide the cache
    (1, 4, 2, 1, 128, [6000], "float16", None, False, None),      # the split rule's own S (many splits)
    (2, 1, 3, 2, 96, [90, 0], "float32", 8, True, 3),             # teaching only: fp32, d = 96, g = 3
]
# `small` (racecheck within a minute): the merge on both kernels, paged GQA, causal Nq > 1, an empty cache
SMALL = [
    (2, 1, 4, 1, 128, [300, 0], "float16", 16, False, 3),
    (1, 2, 2, 4, 64, [130], "bfloat16", None, True, 2),
    (1, 1, 2, 2, 256, [200], "bfloat16", 64, False, 2),
]
DEVICE = "cuda"  # the tests run the glue on "cpu" with the launch replaced by the oracle
TOL = {"float32": 2e-4, "float16": 1.5e-2, "bfloat16": 4e-2}  # max abs error of o (|v| ~ 1), as the GPU tests


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def make_cache(b, h_kv, d, lens, dtype, page_size, gen):
    """(k, v, block_table): contiguous (B, H_kv, max L, d), or pages (num_pages, H_kv, page_size, d) of every
    sequence in a random order with 3 spare pages nobody owns, block_table (B, max_pages) int32."""
    import torch

    cap = max(max(lens), 1)
    if page_size is None:
        return (*(torch.randn(b, h_kv, cap, d, generator=gen, device=DEVICE).to(dtype) for _ in range(2)), None)
    max_pages = -(-cap // page_size)
    num_pages = b * max_pages + 3
    k, v = (torch.randn(num_pages, h_kv, page_size, d, generator=gen, device=DEVICE).to(dtype) for _ in range(2))
    perm = torch.randperm(num_pages, generator=gen, device=DEVICE)[: b * max_pages]
    return k, v, perm.reshape(b, max_pages).to(torch.int32).contiguous()


def gather(k, b, n, table, page_size):
    """Cache positions 0..n-1 of sequence b: (H_kv, n, d)."""
    import torch

    if table is None:
        return k[b, :, :n]
    t = torch.arange(n, device=k.device)
    return k[table[b, t // page_size].long(), :, t % page_size].permute(1, 0, 2)


def oracle(q, k, v, lens, table, page_size, causal):
    """float64 o, lse: query i of sequence b sees position t < L_b (causal: t <= i + L_b - Nq); nothing: 0, -inf."""
    import torch

    b_, h, n_q, d = q.shape
    g = h // k.shape[1]
    o = torch.zeros(q.shape, dtype=torch.float64, device=q.device)
    lse = torch.full((b_, h, n_q), -math.inf, dtype=torch.float64, device=q.device)
    for b, n in enumerate(lens):
        if n == 0:
            continue
        kb, vb = (gather(t, b, n, table, page_size).double().repeat_interleave(g, 0) for t in (k, v))
        s = q[b].double() @ kb.transpose(1, 2) / math.sqrt(d)  # (H, Nq, L_b)
        if causal:
            i = torch.arange(n_q, device=q.device)[:, None]
            s = s.masked_fill(torch.arange(n, device=q.device)[None, :] > i + n - n_q, -math.inf)
        lb = torch.logsumexp(s, -1)
        seen = lb > -math.inf
        o[b] = torch.where(seen[..., None], torch.exp(s - lb[..., None]), torch.zeros_like(s)) @ vb
        lse[b] = lb
    return o, lse


def skip_reason(name, case) -> str | None:
    b, h_kv, g, n_q, d, lens, dt, page, causal, splits = case
    if name == "split_kv_fast" and (dt == "float32" or d not in (64, 128, 256) or n_q > 64):
        return "outside split_kv_fast's limits (fp16/bf16, d in {64, 128, 256}, Nq <= 64)"
    return None


def run_case(name, case) -> bool:
    import torch

    from bench.harness import Poisoned
    from kernels import KERNELS

    b, h_kv, g, n_q, d, lens, dt, page, causal, splits = case
    dtype = getattr(torch, dt)
    gen = torch.Generator(device=DEVICE).manual_seed(sum(lens) + d + n_q)
    k, v, table = make_cache(b, h_kv, d, lens, dtype, page, gen)
    q = torch.randn(b, h_kv * g, n_q, d, generator=gen, device=DEVICE).to(dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEVICE)
    with Poisoned():  # o, lse and the split workspace start as NaN
        o, lse = KERNELS[name].forward(q, k, v, causal=causal, cache_seqlens=seqlens, block_table=table,
                                       num_splits=splits)
    sync()
    ro, rl = oracle(q, k, v, lens, table, page, causal)
    empty = torch.isinf(rl)
    finite = not bool(torch.isnan(o).any() or torch.isnan(lse).any())
    empty_ok = torch.equal(torch.isinf(lse) & (lse < 0), empty) and bool((o.double()[empty] == 0).all())
    err = float((o.double() - ro).abs().max())
    lerr = float((lse.double()[~empty] - rl[~empty]).abs().max()) if bool((~empty).any()) else 0.0
    ok = finite and empty_ok and err <= TOL[dt] and lerr <= 4 * TOL[dt] + 1e-4
    notes = " NaN" * (not finite) + " EMPTY-ROWS" * (not empty_ok)
    print(f"{name} {dt} B={b} H_kv={h_kv} g={g} Nq={n_q} d={d} L={lens} page={page} causal={causal} "
          f"num_splits={splits}: max err o {err:.1e} lse {lerr:.1e}{notes} {'ok' if ok else 'BAD'}", flush=True)
    return ok


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    small = argv[-1:] == ["small"]
    names = argv[0].split(",") if argv and argv[0] != "small" else list(NAMES)
    if any(n not in NAMES for n in names) or len(argv) > 1 + small:
        print(f"usage: decode_sanitize_target.py [{','.join(NAMES)}] [small]; got {argv}", file=sys.stderr)
        return 2
    from bench import harness

    if harness.no_gpu("decode_sanitize_target"):  # one line and exit 2, not the first CUDA call's traceback
        return 2
    from bench.sanitize import MARK

    bad = 0
    for name in names:
        for case in SMALL if small else CASES:
            b, h_kv, g, n_q, d, lens, dt, page, causal, splits = case
            what = f"{name} {dt} B={b} H_kv={h_kv} g={g} Nq={n_q} d={d} L={lens} page={page} causal={causal} S={splits}"
            if why := skip_reason(name, case):
                print(f"@@SKIPPED {what}: {why}", flush=True)
                continue
            print(MARK + what, flush=True)
            try:
                bad += not run_case(name, case)
            except Exception as exc:  # a launch error: report it, run the other cases
                bad += 1
                print(f"@@FAILED {what}: {type(exc).__name__}: {exc}"[:400], flush=True)
    print("@@DONE", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
