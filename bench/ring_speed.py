"""Ring attention on 2, 4 and 8 GPUs against one GPU and PyTorch's context parallelism (issue 45, item 4; GPUs).

    torchrun --nproc-per-node 8 bench/ring_speed.py --out results/ring8 [--seqs 16384,...,524288] [--d 128]
    torchrun --nproc-per-node 2 bench/ring_speed.py --out results/ring2 --seqs 16384,65536,131072

NCCL_NVLS_ENABLE=0 is set before the process group starts (NVLink SHARP multicast stays off on these machines).
Without torchrun it runs as a ring of one. Everything is checked before it is timed:
  1. correctness first, at --check-seq tokens: ring_attention (each --layouts, causal and not, local=--local) against
     one GPU (the same kernel on the whole sequence, every rank computing it alone on the same seeded inputs): this
     rank's o, lse, dq, dk, dv, as relative Frobenius errors; and at --check-small tokens the gathered o against the
     float64 reference (harness.compare). A failed check ends the run (exit 1) before any timing.
  2. timing, per d, N (the whole sequence) and causal: forward and forward+backward of
       one_gpu       the local kernel on the whole sequence (kernels.attention), on rank 0 while the others wait;
       ring_<layout> ring_attention, each layout; its o checked against the one-GPU o (sharded) first;
       torch_cp_<b>  torch.distributed.tensor.experimental.context_parallel around SDPA backend b (flash, cudnn),
                     its o checked against the one-GPU o sharded by context_parallel itself (passed as a buffer).
     Every ring call is collective, so every rank makes the same calls: harness.time_events (CUDA events, a fixed
     number of calls that rank 0 picks from a probe and broadcasts), and the slowest rank's median is the time.
     A cell that runs out of memory or raises is recorded as skipped (harness.failed) and the run goes on.
Writes ring_speed.json to --out (rank 0, after every cell): the run, the checks, and per timing its median, TFLOP/s
(harness.flops; x3.5 for forward+backward) and its speedup over one GPU. counting/ring.py predicts what to expect
(`fa-traffic report --ranks P`): the ring hides its sends above ~2,200 tokens per rank (bf16, H100 peak, NVLink 4).
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import harness  # noqa: E402

SEQS = "16384,65536,131072,262144,524288"
LAYOUTS = ("contiguous", "zigzag")
CP_BACKENDS = ("flash", "cudnn")
FWDBWD_FACTOR = 3.5  # forward + backward FLOPs over the forward's (bench/bench_bwd.py)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "results" / "ring"))
    ap.add_argument("--seqs", default=SEQS, help="whole-sequence lengths N (split over the ranks)")
    ap.add_argument("--d", default="128", help="head dims")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--local", default="fa2_wgmma", help="the kernel each rank runs on the block in hand")
    ap.add_argument("--cp", default=",".join(CP_BACKENDS), help="SDPA backends under context_parallel, or none")
    ap.add_argument("--passes", default="fwd,fwdbwd")
    ap.add_argument("--check-seq", type=int, default=16384)
    ap.add_argument("--check-small", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=10, help="timed calls per entry at most")
    ap.add_argument("--target-s", type=float, default=3.0, help="time spent per entry (fewer calls when slow)")
    ap.add_argument("--timeout-s", type=float, default=900.0, help="the process group's timeout")
    args = ap.parse_args(argv)
    args.seq_list = harness.int_list(ap, "--seqs", args.seqs)
    args.d_list = harness.int_list(ap, "--d", args.d, choices=(64, 128), why="fa2_wgmma's backward")
    args.causal_list = harness.flag_list(ap, "--causal", args.causal)
    harness.name_list(ap, "--dtype", args.dtype, ("float16", "bfloat16"), "dtype")
    args.layout_list = harness.name_list(ap, "--layouts", args.layouts, LAYOUTS, "layout")
    args.cp_list = [] if args.cp == "none" else harness.name_list(ap, "--cp", args.cp, CP_BACKENDS, "SDPA backend")
    args.pass_list = harness.name_list(ap, "--passes", args.passes, ("fwd", "fwdbwd"), "pass")
    for flag in ("heads", "batch", "check_seq", "check_small", "reps"):
        harness.positive_int(ap, "--" + flag.replace("_", "-"), getattr(args, flag))
    harness.positive(ap, "--target-s", args.target_s)
    harness.positive(ap, "--timeout-s", args.timeout_s)
    from kernels import KERNELS

    if args.local not in KERNELS or KERNELS[args.local].backward is None:
        ap.error(f"--local: {args.local!r} is not a kernel with a backward; choose from "
                 f"{', '.join(n for n, s in KERNELS.items() if s.backward is not None)}")
    return args


def init():
    """The process group from torchrun's environment (a ring of one without it); NVLS off before NCCL starts."""
    import torch
    import torch.distributed as dist

    os.environ["NCCL_NVLS_ENABLE"] = "0"
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "127.0.0.1"),
                       ("MASTER_PORT", "29517")):
        os.environ.setdefault(key, value)
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    return dist, torch.device("cuda", local)


def log(rank, *a):
    if rank == 0:
        print(*a, file=sys.stderr, flush=True)


def rel(a, b) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp(min=1e-30))


class Run:
    def __init__(self, args, dist, device):
        import torch

        self.args, self.dist, self.device, self.torch = args, dist, device, torch
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.dtype = getattr(torch, args.dtype)
        self.rows = [dict(kind="meta", world=self.world, nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"),
                          local=args.local, **harness.environment())]

    # -- inputs and the contenders ---------------------------------------------------------------------------------
    def inputs(self, n, d, seed=0):
        q, k, v = harness.random_qkv(self.args.batch, self.args.heads, n, n, d, self.dtype, seed=seed,
                                     device=self.device)
        do = harness.random_qkv(self.args.batch, self.args.heads, n, n, d, self.dtype, seed=seed + 1,
                                device=self.device)[0]
        return q, k, v, do

    def one_gpu(self, q, k, v, causal, do=None):
        """The whole sequence on this GPU: (o, lse), or with do the gradients too."""
        from kernels import KERNELS, attention

        if do is None:
            return KERNELS[self.args.local].forward(q, k, v, causal=causal)
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        o = attention(qg, kg, vg, causal=causal, kernel=self.args.local)
        return (o, *self.torch.autograd.grad(o, (qg, kg, vg), do))

    def ring(self, q, k, v, causal, layout, do=None):
        from ring import ring_attention

        qr, kr, vr = (t.detach().requires_grad_(do is not None) for t in (q, k, v))
        o, lse = ring_attention(qr, kr, vr, causal=causal, layout=layout, local=self.args.local, return_lse=True)
        if do is None:
            return o, lse
        return (o, *self.torch.autograd.grad(o, (qr, kr, vr), do))

    def shard(self, x, layout, dim=-2):
        from ring import shard

        return shard(x, self.rank, self.world, layout, dim).contiguous()

    # -- 1. correctness --------------------------------------------------------------------------------------------
    def check(self) -> bool:
        from ring import unshard

        tol, ok = harness.TOL[self.args.dtype], True
        for d in self.args.d_list:
            for causal in self.args.causal_list:
                n = self.args.check_seq
                q, k, v, do = self.inputs(n, d, seed=7)
                o1, lse1 = self.one_gpu(q, k, v, causal)
                _, dq1, dk1, dv1 = self.one_gpu(q, k, v, causal, do)
                for layout in self.args.layout_list:
                    sq, sk, sv, sdo = (self.shard(t, layout) for t in (q, k, v, do))
                    o, lse = self.ring(sq, sk, sv, causal, layout)
                    _, dq, dk, dv = self.ring(sq, sk, sv, causal, layout, sdo)
                    errs = dict(o=rel(o, self.shard(o1, layout)), dq=rel(dq, self.shard(dq1, layout)),
                                dk=rel(dk, self.shard(dk1, layout)), dv=rel(dv, self.shard(dv1, layout)),
                                lse=float((lse - self.shard(lse1, layout, -1)).abs().max()))
                    # the worst rank: o within the dtype's tolerance, each gradient within twice it (dk, dv are sums
                    # of P partials rounded to the input dtype), lse within 1e-3 (float32 on both sides)
                    o_err, g_err, lse_err = self.gather_max([errs["o"], max(errs["dq"], errs["dk"], errs["dv"]),
                                                             errs["lse"]])
                    good = o_err <= tol and g_err <= 2 * tol and lse_err <= 1e-3
                    rec = dict(kind="check", what="ring vs one GPU", layout=layout, n=n, d=d, causal=causal,
                               rank0_errors=errs, worst=dict(o=o_err, grads=g_err, lse=lse_err), ok=bool(good))
                    small = self.args.check_small
                    qs, ks, vs, _ = self.inputs(small, d, seed=8)
                    os_ = self.ring(*(self.shard(t, layout) for t in (qs, ks, vs)), causal, layout)[0]
                    full = unshard(self.all_gather(os_, small, layout), layout)
                    cmp = harness.compare(full[:1, :1], None, qs[:1, :1], ks[:1, :1], vs[:1, :1], causal,
                                          self.args.dtype)
                    rec.update(float64=cmp, ok=bool(good and cmp["ok"]))
                    ok &= rec["ok"]
                    self.rows.append(rec)
                    log(self.rank, f"check {layout} d={d} causal={causal}: {errs} vs float64 {cmp.get('rel_err')}"
                                   f" -> {'ok' if rec['ok'] else 'FAILED'}")
        return ok

    def gather_max(self, values):
        t = self.torch.tensor(values, device=self.device, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def all_gather(self, x, n, layout):
        from counting import ring as counts

        sizes = counts.sizes(n, self.world, layout)
        out = [x.new_empty(*x.shape[:-2], s, x.shape[-1]) for s in sizes]
        if len(set(sizes)) == 1:
            self.dist.all_gather(out, x.contiguous())
        else:  # ragged: all_gather needs equal sizes, so pad to the largest
            big = max(sizes)
            pad = x.new_zeros(*x.shape[:-2], big, x.shape[-1])
            pad[..., :x.shape[-2], :] = x
            tmp = [pad.clone() for _ in sizes]
            self.dist.all_gather(tmp, pad)
            out = [t[..., :s, :] for t, s in zip(tmp, sizes)]
        return out

    # -- 2. timing ---------------------------------------------------------------------------------------------------
    def time(self, fn, collective=True) -> dict:
        """harness.time_events with a call count every rank agrees on (rank 0's probe, broadcast)."""
        torch = self.torch
        torch.cuda.synchronize()
        probe = harness.time_events(fn, [()], warmup=1, reps=1)["median_ms"] / 1e3
        reps = max(2, min(self.args.reps, int(self.args.target_s / max(probe, 1e-6))))
        if collective:
            t = torch.tensor([reps], device=self.device)
            self.dist.broadcast(t, 0)
            reps = int(t.item())
        t = harness.time_events(fn, [()], warmup=1, reps=reps)
        if collective:
            med = self.gather_max([t["median_ms"], t["max_ms"]])
            t.update(median_ms=med[0], max_ms=med[1], slowest_rank="median over calls, max over ranks")
        return t

    def timed(self, label, n, d, causal, pass_name, fn, collective=True, check=None) -> dict:
        rec = dict(kind="time", label=label, n=n, d=d, causal=causal, pass_name=pass_name, world=self.world,
                   batch=self.args.batch, heads=self.args.heads, dtype=self.args.dtype,
                   run_id=harness.run_info()["run_id"])
        flops = harness.flops(self.args.batch, self.args.heads, n, n, d, causal)
        rec["flops"] = flops * (FWDBWD_FACTOR if pass_name == "fwdbwd" else 1)
        try:
            if check is not None:
                err = check()
                err = self.gather_max([err])[0] if collective else err
                rec.update(rel_err=err, ok=err <= harness.TOL[self.args.dtype])
                if not rec["ok"]:
                    return dict(rec, skipped="failed the check against one GPU on the timed inputs")
            rec.update(self.time(fn, collective))
            rec["tflops"] = rec["flops"] / rec["median_ms"] / 1e9
        except Exception as exc:  # out of memory, an API that is missing: recorded, the run goes on
            harness.failed(rec, exc)
        return rec

    def cell(self, n, d, causal):
        args = self.args
        q, k, v, do = self.inputs(n, d)
        o1 = self.one_gpu(q, k, v, causal)[0]  # what every contender is checked against
        rows = []
        for pass_name in args.pass_list:
            back = pass_name == "fwdbwd"
            self.dist.barrier()
            if self.rank == 0:
                rows.append(self.timed("one_gpu", n, d, causal, pass_name,
                                       lambda: self.one_gpu(q, k, v, causal, do if back else None), collective=False))
            self.dist.barrier()
            for layout in args.layout_list:
                sq, sk, sv, sdo = (self.shard(t, layout) for t in (q, k, v, do))
                rows.append(self.timed(
                    f"ring_{layout}", n, d, causal, pass_name,
                    lambda: self.ring(sq, sk, sv, causal, layout, sdo if back else None),
                    check=lambda: rel(self.ring(sq, sk, sv, causal, layout)[0], self.shard(o1, layout))))
            for backend in args.cp_list:
                rows.append(self.torch_cp(backend, n, d, causal, pass_name, q, k, v, do, o1))
        base = {r["pass_name"]: r.get("median_ms") for r in rows if r["label"] == "one_gpu"}
        for r in rows:
            b = base.get(r["pass_name"])
            if b and r.get("median_ms"):
                r["speedup_vs_one_gpu"] = b / r["median_ms"]
                r["efficiency"] = r["speedup_vs_one_gpu"] / self.world
        return rows

    def torch_cp(self, backend, n, d, causal, pass_name, q, k, v, do, o1) -> dict:
        """SDPA under torch's context parallelism: q, k, v, dO and the one-GPU o as its buffers, so it shards them
        all by its own layout (load-balanced when causal) and the check compares like with like."""
        torch = self.torch
        label = f"torch_cp_{backend}"
        try:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.experimental import context_parallel
        except ImportError as exc:
            return dict(kind="time", label=label, n=n, d=d, causal=causal, pass_name=pass_name,
                        skipped=f"torch {torch.__version__} has no context_parallel ({exc})")
        try:
            if not hasattr(self, "_mesh"):
                self._mesh = init_device_mesh(self.device.type, (self.world,))
            bufs = [t.clone() for t in (q, k, v, do, o1)]
            with context_parallel(self._mesh, buffers=bufs, buffer_seq_dims=[2] * 5, no_restore_buffers=set(bufs)):
                cq, ck, cv, cdo, co1 = bufs

                def run():
                    qg, kg, vg = (t.detach().requires_grad_(pass_name == "fwdbwd") for t in (cq, ck, cv))
                    o = harness.sdpa(backend, qg, kg, vg, causal)
                    return torch.autograd.grad(o, (qg, kg, vg), cdo) if pass_name == "fwdbwd" else o

                return self.timed(label, n, d, causal, pass_name, run,
                                  check=lambda: rel(harness.sdpa(backend, cq, ck, cv, causal), co1))
        except Exception as exc:  # entering the context (e.g. N not a multiple of 2P): every rank alike
            return harness.failed(dict(kind="time", label=label, n=n, d=d, causal=causal, pass_name=pass_name), exc)

    def save(self):
        if self.rank == 0:
            harness.write_rows(self.args.out, "ring_speed.json", self.rows)


def main(argv=None) -> int:
    args = parse(argv)
    if harness.no_gpu("ring_speed"):
        return 2
    dist, device = init()
    dist.init_process_group("nccl", timeout=timedelta(seconds=args.timeout_s), device_id=device)
    try:
        run = Run(args, dist, device)
        log(run.rank, f"ring_speed: {run.world} ranks, {args.local}, NCCL_NVLS_ENABLE=0, {args.dtype}")
        if not run.check():
            run.save()
            log(run.rank, "ring_speed: a correctness check failed; nothing timed")
            return 1
        run.save()
        for d in args.d_list:
            for n in args.seq_list:
                for causal in args.causal_list:
                    rows = run.cell(n, d, causal)
                    run.torch.cuda.empty_cache()  # the cell's whole-sequence tensors are gone
                    run.rows += rows
                    run.save()  # after every cell: a run cut short still leaves what it measured
                    for r in rows:
                        log(run.rank, f"{r['label']:22s} N={n:>7d} d={d} causal={int(causal)} {r['pass_name']:6s} "
                                      f"{r.get('median_ms', r.get('skipped'))} ms x{r.get('speedup_vs_one_gpu', 0):.2f}")
        return 0
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
