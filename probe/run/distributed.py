"""Many processes: the same command under `torchrun` shards the batches over ranks and merges
the reducers with `torch.distributed` collectives, so the numbers equal a single-process run.

    torchrun --nproc-per-node 4 -m probe analyze CHECKPOINT --data corpus.txt --device cuda

- Every rank reads the whole dataset and makes the same batches a single process would make;
  rank r runs batches r, r + world, r + 2 world, ... (`Dataset.batches(rank=, world=)`), so
  every row is computed exactly as it would be in one process.
- After the pass, `merge_reducers` all-reduces each reducer's state: SUM for `summed`, MIN for
  `minimum`, MAX for `maximum` (tensors of one kind are concatenated: six collectives in all),
  and gathers the python top-k lists (`gathered`) with `all_gather_object`. Counts, maxima and
  histograms are then exactly those of one process; float64 sums differ only in the order of
  addition.
- `--interventions` passes are shared out the same way: every rank runs its batches under each
  intervention, and the per-pass loss sums, token counts and zeroed counts are merged with the
  same `merge_reducers` (two SUM collectives for all the passes together). The settings they
  use (mean gates, massive-activation thresholds) come from the merged main pass.
- Every rank returns the merged `Analysis`; only rank 0 writes the run directory and prints.

The backend is NCCL for CUDA devices (each rank takes cuda:LOCAL_RANK) and gloo on the CPU.
"""
from __future__ import annotations

import os

import torch

from ..core.errors import ProbeError

_initialized_here = False


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() else None


def world() -> tuple[int, int]:
    """(rank, world size): from the process group if one is up, else from torchrun's environment."""
    dist = _dist()
    if dist is not None and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    return world()[0] == 0


def group() -> tuple[int, int]:
    """(rank, world size) of the process group that is up, else (0, 1).

    Work may only be shared out over a group that is up: without one, `merge_reducers` is a
    no-op and each process would keep only its own share (torchrun's environment alone is not
    enough, unlike for `world`, which only decides who writes)."""
    dist = _dist()
    if dist is not None and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def setup(device: str | None = None) -> tuple[int, int, str]:
    """Join the process group that torchrun describes (once). Returns (rank, world, device):
    under several processes a bare "cuda" becomes this rank's GPU, cuda:LOCAL_RANK. device None:
    the options' default (probe/core/options.py DEVICE)."""
    from ..core.options import DEVICE

    device = device or DEVICE
    global _initialized_here
    dist = _dist()
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if dist is None or (size <= 1 and not dist.is_initialized()):
        return 0, 1, device
    if not dist.is_initialized():
        cuda = str(device).startswith("cuda")
        if cuda and str(device) == "cuda":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            if local >= torch.cuda.device_count():
                raise ProbeError(f"rank with LOCAL_RANK {local} has no GPU (this machine has "
                                 f"{torch.cuda.device_count()}); start at most that many processes per node")
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
        _initialized_here = True
    rank, size = dist.get_rank(), dist.get_world_size()
    if str(device) == "cuda" and size > 1:
        device = f"cuda:{torch.cuda.current_device()}"
    return rank, size, device


def barrier() -> None:
    """Wait for every process (a no-op in one process)."""
    dist = _dist()
    if dist is not None and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def finish() -> None:
    """Leave the process group if `setup` joined it."""
    global _initialized_here
    dist = _dist()
    if _initialized_here and dist is not None and dist.is_initialized():
        dist.destroy_process_group()
    _initialized_here = False


def merge_reducers(reducers) -> None:
    """All-reduce the state of `reducers` (the same list, in the same order, on every rank)."""
    dist = _dist()
    if dist is None or not dist.is_initialized() or dist.get_world_size() == 1:
        return
    from ..metrics.reducers import flatten

    everything = flatten(reducers)
    comm = torch.device("cpu") if dist.get_backend() == "gloo" else \
        torch.device("cuda", torch.cuda.current_device())
    for op, kind in ((dist.ReduceOp.SUM, "summed"), (dist.ReduceOp.MIN, "minimum"),
                     (dist.ReduceOp.MAX, "maximum")):
        by_dtype: dict[torch.dtype, list] = {}
        for r in everything:
            for name in getattr(r, kind):
                t = getattr(r, name)
                by_dtype.setdefault(t.dtype, []).append((r, name, t))
        for dtype in sorted(by_dtype, key=str):
            items = by_dtype[dtype]
            flat = torch.cat([t.reshape(-1).to(comm) for _, _, t in items])
            dist.all_reduce(flat, op=op)
            offset = 0
            for r, name, t in items:
                n = t.numel()
                setattr(r, name, flat[offset:offset + n].reshape(t.shape).to(t.device).clone())
                offset += n
    holders = [(r, name) for r in everything for name in r.gathered]
    if holders:
        mine = [getattr(r, name) for r, name in holders]
        gathered: list = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        for i, (r, name) in enumerate(holders):
            r.merge_gathered(name, [g[i] for g in gathered])
