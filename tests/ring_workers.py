"""What each rank runs in tests/test_ring.py (ring.launch.spawn imports this module in every rank's process).

Every rank builds the same whole q, k, v, dO from a seed (`inputs`), takes its piece (ring.layout.shard), runs
ring_attention forward and backward, and returns its rows and gradients with the ring's log; the test puts the
pieces back together and compares them with the float64 oracle.
"""
from __future__ import annotations

import time

import torch

from ring import ring_attention, shard

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def inputs(case: dict):
    """The whole problem of a case: q (1, H, N, d), k and v (1, H_kv, N, d), dO like q."""
    g = torch.Generator().manual_seed(case.get("seed", 0))
    dt = DTYPES[case.get("dtype", "float32")]
    h, h_kv, n, d = case.get("heads", 2), case.get("kv_heads", 2), case["n"], case.get("d", 16)
    q = torch.randn(1, h, n, d, generator=g).to(dt)
    k, v = (torch.randn(1, h_kv, n, d, generator=g).to(dt) for _ in range(2))
    return q, k, v, torch.randn(1, h, n, d, generator=g).to(dt)


def run_cases(rank: int, world: int, cases: list[dict]) -> list[dict]:
    out = []
    for case in cases:
        q, k, v, do = inputs(case)
        layout = case["layout"]
        qs, ks, vs = (shard(x, rank, world, layout).clone().requires_grad_() for x in (q, k, v))
        log = []
        o, lse = ring_attention(qs, ks, vs, causal=case["causal"], layout=layout, return_lse=True, log=log)
        o.backward(shard(do, rank, world, layout))
        out.append({"o": o.detach(), "lse": lse, "dq": qs.grad, "dk": ks.grad, "dv": vs.grad, "log": log})
    return out


def bad_inputs(rank: int, world: int) -> list[str]:
    """Inputs the ranks must refuse, every rank with an error (returned as text), none waiting for ever."""
    x = torch.randn(1, 2, 8, 4)
    lengths = {0: 5, 1: 8}  # N = 13 contiguous over 2 gives 6 and 7
    cases = [
        lambda: ring_attention(x[:, :, :lengths[rank]], x[:, :, :lengths[rank]], x[:, :, :lengths[rank]]),
        lambda: ring_attention(x, x, x, causal=rank == 0),
        lambda: ring_attention(x if rank == 0 else x.long(), x, x),
        lambda: ring_attention(x[:, :, :1 + rank], x[:, :, :1 + rank], x[:, :, :1 + rank], layout="zigzag"),
    ]
    errors = []
    for case in cases:
        try:
            case()
            errors.append("no error")
        except (TypeError, ValueError, RuntimeError) as e:
            errors.append(f"{type(e).__name__}: {e}")
    return errors


def fails_at_start(rank: int, world: int) -> None:
    """Rank 1 raises before the ring; the others are already waiting for it."""
    if rank == 1:
        time.sleep(0.5)
        raise RuntimeError("rank 1 fails on purpose")
    q = torch.randn(1, 2, 8, 4)
    ring_attention(q, q, q)


def hangs_mid_ring(rank: int, world: int) -> None:
    """Rank 1 stops answering inside its first local attention (a throwaway reference that sleeps); rank 0 gets
    through its forward (its one exchange was posted before rank 1 slept) and then waits in the backward for K/V that
    never come, until the process group's timeout ends its wait."""
    from variants import VARIANTS, Variant, register

    fa2 = VARIANTS["fa2"]

    def sleepy(q, k, v, **kw):
        if rank == 1:
            time.sleep(60)
        return fa2.forward(q, k, v, **kw)

    register(Variant("sleepy", "fa2 that sleeps on rank 1", "tests/ring_workers.py", sleepy, fa2.sram_bytes,
                     backward=fa2.backward))
    qs = shard(torch.randn(1, 2, 8 * world, 4), rank, world).requires_grad_()
    ring_attention(qs, qs, qs, local="sleepy").sum().backward()  # rank 0's backward waits for rank 1's K/V


def sleeps(rank: int, world: int, seconds: float) -> None:
    time.sleep(seconds)


def ring_speed_on_cpu(rank: int, world: int, out: str):
    """bench/ring_speed.py's checks and cells on gloo and CPU tensors: the references stand in for the kernels (fa2),
    a fake clock for CUDA events. Without torch's context parallelism (--cp none): on a CPU mesh its SDPA takes a
    minute and then lacks the CPU backward's sharding rules, which says nothing about the GPU run."""
    import torch.distributed as dist

    from bench import harness
    from bench import ring_speed as rs
    from variants import VARIANTS, attention

    args = rs.parse(["--seqs", "64", "--d", "64", "--check-seq", "48", "--check-small", "40", "--reps", "2",
                     "--out", out, "--cp", "none"])
    args.local, args.dtype = "fa2", "float32"
    harness.time_events = lambda fn, sets, warmup=1, reps=1: (fn(), dict(median_ms=1.0 + rank, min_ms=1.0,
                                                                         max_ms=2.0, reps=reps))[1]
    harness.environment = harness.run_info
    torch.cuda.synchronize = lambda *a: None

    def one_gpu(self, q, k, v, causal, do=None):
        if do is None:
            return VARIANTS["fa2"].forward(q, k, v, causal=causal)
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        o = attention(qg, kg, vg, causal=causal)
        return (o, *torch.autograd.grad(o, (qg, kg, vg), do))

    rs.Run.one_gpu = one_gpu
    run = rs.Run(args, dist, torch.device("cpu"))
    ok = run.check()
    for causal in (False, True):
        run.rows += run.cell(64, 64, causal)
    run.save()
    return ok, run.rows
