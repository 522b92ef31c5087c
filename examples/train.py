"""A training script for torchrun, in the testbed with ``--launcher torchrun``:

    sudo python -m lowbw testbed --workers 2 --rate 10mbit --launcher torchrun --worker-dir 'w{rank}' -- \
        examples/train.py

Each worker runs ``torchrun --nnodes 2 --node-rank R --nproc-per-node 1 examples/train.py`` in its namespace.
Like many torchrun scripts it writes a checkpoint named after its LOCAL_RANK (``ckpt-0.pt``), which is 0 on
every one-process node: ``--worker-dir 'w{rank}'`` gives each worker its own directory, so they do not collide.
"""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parent))
import my_data  # noqa: E402  (beside this script)
import my_model  # noqa: E402


def main(steps: int = 30, batch: int = 32) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(my_model.build())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = my_data.build()
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        idx = torch.randint(0, len(data.y_train), (batch,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    ckpt = Path(f"ckpt-{os.environ['LOCAL_RANK']}.pt")
    torch.save(model.module.state_dict(), ckpt)
    print(f"rank {rank}: loss {loss.item():.3f}, checkpoint {ckpt.resolve()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
