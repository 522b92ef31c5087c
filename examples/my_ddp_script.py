"""A plain PyTorch DDP script, as a user would write it, for the testbed:

    sudo python -m lowbw testbed --workers 4 --rate 100mbit -- python examples/my_ddp_script.py

The testbed gives each worker torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
GLOO_SOCKET_IFNAME), so ``init_process_group("gloo")`` just works; every gradient all-reduce crosses the
worker's shaped link. It trains the MLP of ``my_model.py`` on ``my_data.py``'s data for ``--steps`` steps and
rank 0 prints the loss, the validation accuracy and the seconds per step.
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
import my_data  # noqa: E402  (beside this script)
import my_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=32, help="samples per worker and step")
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(my_model.build())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = my_data.build()
    g = torch.Generator().manual_seed(rank)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        idx = torch.randint(0, len(data.y_train), (a.batch,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here, over the shaped link
        opt.step()
    dt = (time.perf_counter() - t0) / a.steps
    with torch.no_grad():
        acc = (model(data.x_val).argmax(1) == data.y_val).float().mean().item()
    if rank == 0:
        print(f"{world} workers, {a.steps} steps: loss {loss.item():.3f}, val_acc {acc:.3f}, {dt * 1e3:.1f} ms/step")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
