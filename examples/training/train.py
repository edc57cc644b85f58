"""Reference training job: PyTorch DistributedDataParallel started by torchrun.

What a job should do to survive a node repair (docs/workloads.md):

* deterministic: the seed fixes the initial weights, and each step's batch is a function of
  (seed, step, rank) only, so a run interrupted and resumed from a checkpoint ends with the
  same parameters as one that never stopped (same world size);
* a checkpoint with ``torch.distributed.checkpoint`` every ``--checkpoint-every`` steps and
  when asked to stop: SIGTERM (or SIGUSR1) only sets a flag; at the next step every rank
  all-reduces the flag (MAX), so all ranks agree on the same step, save together, and exit
  with code 143 ("stopped after saving; requeue me"), never 0, so Slurm and Kubernetes do
  not take the job for finished;
* on start, resume from the newest complete checkpoint (one whose ``.metadata`` exists:
  DCP writes it last), including the optimizer's momentum.

The backend is gloo on CPUs and NCCL when CUDA is there; nothing else changes.
Rank 0 appends one JSON line per event (start, checkpoint, signal, stop, done) to
``--events`` so a scenario can print the timeline, and writes the final parameters'
SHA-256 to ``--result``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

EXIT_STOPPED = 143  # 128 + SIGTERM: stopped on request after a checkpoint


class Stop:
    """Set from a signal handler; read at the next step boundary."""

    def __init__(self) -> None:
        self.signum = 0
        self.at = 0.0

    def __call__(self, signum: int, _frame: Any) -> None:
        if not self.signum:
            self.signum, self.at = signum, time.time()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--checkpoint-every", type=int, default=20)
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (stands in for real work)")
    p.add_argument("--events", type=Path, default=None, help="rank 0 appends JSON lines here")
    p.add_argument("--result", type=Path, default=None, help="rank 0 writes the final parameters' SHA-256 here")
    return p.parse_args(argv)


def model_for(args: argparse.Namespace) -> nn.Module:
    torch.manual_seed(args.seed)
    return nn.Sequential(nn.Linear(16, args.width), nn.Tanh(), nn.Linear(args.width, 1))


def batch_for(args: argparse.Namespace, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(args.batch, 16, generator=g)
    y = torch.sin(x.sum(dim=1, keepdim=True))
    return x, y


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    done = [(int(p.name.split("-")[1]), p) for p in root.glob("step-*") if (p / ".metadata").exists()]
    return max(done) if done else None


def params_sha256(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop = Stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGUSR1, stop)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    torch.use_deterministic_algorithms(True)
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)

    def event(kind: str, **data: Any) -> None:
        if rank == 0 and args.events:
            with args.events.open("a") as f:
                f.write(json.dumps({"t": time.time(), "event": kind, "restart": restart, **data}) + "\n")
        if rank == 0:
            print(f"[train] {kind} {data}", flush=True)

    model = model_for(args).to(device)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    start = 0
    found = latest_checkpoint(args.checkpoint_dir)
    if found:
        step, path = found
        msd, osd = get_state_dict(ddp, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(ddp, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = step
    event("start", step=start, world=world, resumed=bool(found))

    def save(step: int, why: str) -> None:
        msd, osd = get_state_dict(ddp, opt)
        path = args.checkpoint_dir / f"step-{step:08d}"
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(path))
        dist.barrier()
        event("checkpoint", step=step, why=why)

    loss_fn = nn.MSELoss()
    step = start
    while step < args.steps:
        flag = torch.tensor([stop.signum], dtype=torch.int32, device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank stops at the same step
        if int(flag.item()):
            event("signal", step=step, signal=int(flag.item()), received=stop.at or None)
            save(step, "signal")
            event("stop", step=step)
            dist.destroy_process_group()
            return EXIT_STOPPED
        x, y = batch_for(args, step, rank)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x.to(device)), y.to(device))
        loss.backward()
        opt.step()
        step += 1
        if args.step_seconds:
            time.sleep(args.step_seconds)
        if step % args.checkpoint_every == 0 and step < args.steps:
            save(step, "periodic")
    digest = params_sha256(model)
    if rank == 0 and args.result:
        args.result.write_text(json.dumps({"sha256": digest, "steps": step, "world": world}) + "\n")
    event("done", step=step, sha256=digest, loss=float(loss.item()) if args.steps > start else None)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
