"""A small launcher: run fn(rank, world, *args) on `world` local processes joined by a process group.

    results = spawn(worker, 4, seed, backend="gloo", timeout_s=60)    # [worker(0, 4, seed), ..., worker(3, 4, seed)]

For the CPU tests and demos of ring attention (the GPU runs use torchrun: bench/ring_speed.py). What it adds to
torch.multiprocessing.spawn is that a failure ends the job with a clear error, never a hang:
  - the process group has a timeout (init_process_group(timeout=pg_timeout_s)), so a rank waiting on a peer that
    died or hangs gets an error instead of waiting for ever (ring/comm.py turns it into a RingError);
  - the job has a deadline (timeout_s) after which every rank still running is killed;
  - after the first rank fails, the others have `grace_s` to fail on their own (their errors then say what they were
    waiting for), and are then killed;
  - the error (RingJobError) names every rank that failed, the first failure first, with its exception's last line;
    the full tracebacks are in `.errors`.
Processes start from a fork server that has imported torch once (start_method="forkserver"), so a job costs
milliseconds of start-up rather than one torch import per rank; the rendezvous is a file (init_method="file://..."),
so no port is needed. Results travel back through torch.save files.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import time
import traceback
from datetime import timedelta

PRELOAD = ["torch", "torch.distributed", "ring.attention"]


class RingJobError(RuntimeError):
    """A rank of a spawn() job failed, or the job ran past its deadline."""

    def __init__(self, message: str, errors: list[dict], timed_out: bool):
        super().__init__(message)
        self.errors, self.timed_out = errors, timed_out


def _entry(rank, world, fn, args, backend, pg_timeout_s, tmp):
    import torch
    import torch.distributed as dist

    try:
        torch.set_num_threads(1)  # P ranks on a few cores: one thread each
        dist.init_process_group(backend, init_method=f"file://{tmp}/rendezvous", rank=rank, world_size=world,
                                timeout=timedelta(seconds=pg_timeout_s))
        result = fn(rank, world, *args)
        torch.save(result, os.path.join(tmp, f"rank{rank}.pt"))
    except BaseException as e:  # noqa: BLE001 - every failure is reported, then the process ends at once
        with open(os.path.join(tmp, f"rank{rank}.err"), "w") as f:
            json.dump({"rank": rank, "time": time.time(), "type": type(e).__name__,
                       "message": (str(e).strip().splitlines() or [""])[0], "traceback": traceback.format_exc()}, f)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # no destroy_process_group: it could wait on a peer that is gone
    dist.destroy_process_group()


def spawn(fn, world: int, *args, backend: str = "gloo", timeout_s: float = 60.0, pg_timeout_s: float = 20.0,
          grace_s: float = 5.0, start_method: str = "forkserver") -> list:
    """fn(rank, world, *args) on `world` processes; their return values, in rank order, or a RingJobError."""
    if not isinstance(world, int) or world < 1:
        raise ValueError(f"world must be a positive integer, got {world!r}")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    tmp = tempfile.mkdtemp(prefix="ring-job-")
    try:
        procs = [ctx.Process(target=_entry, args=(r, world, fn, args, backend, pg_timeout_s, tmp), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        killed, timed_out = _join(procs, time.monotonic() + timeout_s, grace_s)
        errors = []
        for r, p in enumerate(procs):
            path = os.path.join(tmp, f"rank{r}.err")
            if os.path.exists(path):
                with open(path) as f:
                    errors.append(json.load(f))
            elif r in killed:
                errors.append({"rank": r, "time": time.time(), "type": "killed",
                               "message": "still running when the job ended", "traceback": ""})
            elif p.exitcode != 0:
                errors.append({"rank": r, "time": time.time(), "type": "exit",
                               "message": f"exited with code {p.exitcode} and no Python error", "traceback": ""})
        if errors or timed_out:
            raise RingJobError(_message(world, errors, timed_out, timeout_s), errors, timed_out)
        import torch

        return [torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False) for r in range(world)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _join(procs, deadline: float, grace_s: float) -> tuple[set, bool]:
    """Wait until every process ended, or the deadline, or grace_s after the first failure; kill what is left.
    Returns (the ranks killed, whether the deadline passed with ranks running and no failure to blame)."""
    failed_at = None
    while True:
        alive = [p for p in procs if p.exitcode is None]
        now = time.monotonic()
        if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
            failed_at = now
        if not alive or now > deadline or (failed_at is not None and now > failed_at + grace_s):
            break
        multiprocessing.connection.wait([p.sentinel for p in alive], timeout=0.2)
    killed = {r for r, p in enumerate(procs) if p in alive}
    for p in alive:
        p.kill()
    for p in procs:
        p.join(5)
    return killed, bool(alive) and failed_at is None


def _message(world, errors, timed_out, timeout_s) -> str:
    if timed_out and all(e["type"] == "killed" for e in errors):
        running = ", ".join(str(e["rank"]) for e in errors)
        return (f"ring job of {world} ranks timed out after {timeout_s:g} s: rank(s) {running} still running were "
                "killed (raise the timeout, or lower the process group's so a stuck wait fails first)")
    errors.sort(key=lambda e: (e["type"] == "killed", e["time"]))
    first, rest = errors[0], errors[1:]
    text = f"ring job of {world} ranks failed: rank {first['rank']}: {first['type']}: {first['message']}"
    if rest:
        text += "; then " + "; ".join(f"rank {e['rank']}: {e['type']}: {e['message']}" for e in rest)
    return text
