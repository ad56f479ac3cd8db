"""The ring's traffic: every exchange sends to the next rank and receives from the previous one.

Each exchange is one `torch.distributed.batch_isend_irecv` of its sends and receives, posted before the step's local
attention so that the two overlap, and waited for after it. One batch, not separate isend/irecv calls: with NCCL two
ranks that send to each other (P = 2) must see each send and its matching receive in one group, or each rank's send
waits for a receive queued behind it. Every rank posts its exchanges in the same order, which is how the sends find
their receives (NCCL ignores tags; gloo matches in order per peer too).

A rank that failed or hangs leaves its neighbours waiting: their wait ends at the process group's timeout
(init_process_group(timeout=...)) or when the dead rank's connection closes, and `Pending.wait` turns either into a
RingError naming the step, the pass, the peer and what was awaited. `log`, when given, is a list that receives one
record per tensor sent ({"pass", "step", "what", "bytes"}): the tests hold it equal to counting/ring.py.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


class RingError(RuntimeError):
    """A ring exchange or the shape check before it failed: a peer raised, hung past the timeout, or disagrees."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class RingComm:
    """The ring over a process group: rank, world size, the global ranks of the next and previous members."""

    def __init__(self, group=None, log: list | None = None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("ring_attention needs torch.distributed initialised: call "
                               "torch.distributed.init_process_group(...) first (ring.launch.spawn does it for tests)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("ring_attention: this process is not a member of the group it was given")
        self.next = self._global((self.rank + 1) % self.world)
        self.prev = self._global((self.rank - 1) % self.world)
        self.log = log

    def _global(self, group_rank: int) -> int:
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    def exchange(self, sends: list[torch.Tensor], recv_shapes: list[tuple], *, what: str, step: int,
                 pass_name: str, tag: int = 0) -> "Pending":
        """Post: each of `sends` to the next rank, one receive per shape from the previous rank (same dtypes and
        device as the sends, in order). Tensor i of the exchange of `step` travels with tag 4·step + tag + i, so
        gloo cannot match a K/V send with a dK/dV receive of the same size (NCCL ignores tags)."""
        sends = [t.contiguous() for t in sends]
        recvs = [torch.empty(shape, dtype=t.dtype, device=t.device) for shape, t in zip(recv_shapes, sends)]
        ops = [dist.P2POp(dist.isend, t, self.next, self.group, 4 * step + tag + i) for i, t in enumerate(sends)]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group, 4 * step + tag + i) for i, t in enumerate(recvs)]
        where = f"{pass_name} step {step + 1} of {self.world}"
        try:
            works = dist.batch_isend_irecv(ops)
        except Exception as e:
            raise RingError(f"ring_attention {where}: rank {self.rank} could not post its exchange with ranks "
                            f"{self.next} and {self.prev} ({_first_line(e)})") from e
        if self.log is not None:
            names = what.split("/")
            for name, t in zip(names, sends):
                self.log.append({"pass": pass_name, "step": step, "what": name,
                                 "bytes": t.numel() * t.element_size()})
        return Pending(works, recvs, sends, f"ring_attention {where}: rank {self.rank} got no {what} from rank "
                                            f"{self.prev}")


class Pending:
    """The receives of one exchange; wait() returns them once they (and the sends) completed."""

    def __init__(self, works, recvs, sends, where: str):
        self.works, self.recvs, self._sends, self.where = works, recvs, sends, where

    def wait(self) -> list[torch.Tensor]:
        try:
            for w in self.works:
                w.wait()
        except Exception as e:
            raise RingError(f"{self.where} ({_first_line(e)}): that rank failed, or did not answer within the "
                            "process group's timeout") from e
        self._sends = None  # the send buffers may be reused once sent
        return self.recvs


def all_shapes(row: list[float], *, device, group, rank: int) -> list[list[float]]:
    """Every rank's descriptor (one small all_gather), so every rank can check every other and all raise the same
    error rather than some waiting on a peer that refused its input."""
    mine = torch.tensor(row, dtype=torch.float64, device=device)
    out = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    try:
        dist.all_gather(out, mine, group=group)
    except Exception as e:
        raise RingError(f"ring_attention: rank {rank} could not gather the other ranks' shapes ({_first_line(e)}): "
                        "a rank failed, did not call ring_attention, or did not answer within the process group's "
                        "timeout") from e
    return [t.tolist() for t in out]
