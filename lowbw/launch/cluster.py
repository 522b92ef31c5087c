"""Multi-node torchrun: one ``torchrun --nnodes N --node-rank R --rdzv-backend c10d`` per node, its place in
the job read from where it runs, then exec'd.

    python -m lowbw.launch.cluster [--nproc-per-node K] [--port P] -- -m lowbw.train.worker --config run.json --out DIR

Where a node learns its place (checked in this order):

1. SLURM, one task per node (``srun --ntasks-per-node 1 python -m lowbw.launch.cluster ...``): N = SLURM_NNODES,
   R = SLURM_NODEID, rendezvous host = the job's first node (``scontrol show hostnames``), id = SLURM_JOB_ID.
2. The testbed, one namespace per node (``python -m lowbw testbed -n N -- python -m lowbw.launch.cluster ...``):
   N = WORLD_SIZE, R = RANK, rendezvous at MASTER_ADDR:MASTER_PORT (namespace 0), and the node's own
   address is that of GLOO_SOCKET_IFNAME, its shaped link.

c10d rendezvous (:mod:`lowbw.launch.torchrun`): node 0 hosts the rendezvous TCP store, listening on the rendezvous
host's address only (``is_host`` is given, not guessed: inside a network namespace the hostname resolves to
no address of the node), every agent advertises ``--local-addr`` when known, and the workers make their own
store on node 0's address (``MASTER_ADDR``), so every byte of the rendezvous and of training crosses the
nodes' links and nothing listens on an address it was not given. The workers are lowbw's ``procs`` workers: rank 0
seals summary.json in the run directory, which all nodes share (a shared filesystem on a cluster).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class NodeSpec:
    """One node's place in a multi-node torchrun job."""

    nnodes: int
    node_rank: int
    rdzv_host: str
    rdzv_port: int
    run_id: str
    local_addr: str | None = None  # the address other nodes reach this one at; None: torchrun's (hostname)


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise ValueError(f"{key}={env[key]!r} is not an integer") from None


def _first_host(nodelist: str) -> str:
    """The first host of a SLURM node list (``node[01-04]`` -> ``node01``), via ``scontrol show hostnames``."""
    r = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=60)
    hosts = r.stdout.split()
    if r.returncode != 0 or not hosts:
        raise ValueError(f"SLURM_JOB_NODELIST={nodelist!r}: scontrol show hostnames gave no host "
                         f"({r.stderr.strip() or 'no output'})")
    return hosts[0]


def _iface_addr(ifname: str) -> str:
    """The IPv4 address of interface ``ifname`` (``ip -4 -o addr show dev IF``)."""
    r = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", ifname], capture_output=True, text=True, timeout=30)
    fields = r.stdout.split()
    if r.returncode != 0 or "inet" not in fields:
        raise ValueError(f"GLOO_SOCKET_IFNAME={ifname!r} has no IPv4 address ({r.stderr.strip() or 'none'})")
    return fields[fields.index("inet") + 1].split("/")[0]


def node_spec(env: Mapping[str, str], port: int | None = None) -> NodeSpec:
    """This node's :class:`NodeSpec` from the environment (SLURM first, then the testbed's); ``port``
    overrides the rendezvous port. Raises ValueError naming what is missing or malformed."""
    if "SLURM_NODEID" in env and "SLURM_NNODES" in env:
        if "SLURM_JOB_NODELIST" not in env:
            raise ValueError("SLURM_NODEID is set but SLURM_JOB_NODELIST is not (run inside an allocation)")
        spec = NodeSpec(_int(env, "SLURM_NNODES"), _int(env, "SLURM_NODEID"), _first_host(env["SLURM_JOB_NODELIST"]),
                        port or DEFAULT_PORT, env.get("SLURM_JOB_ID", "lowbw"))
    elif all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        local = _iface_addr(env["GLOO_SOCKET_IFNAME"]) if env.get("GLOO_SOCKET_IFNAME") else None
        spec = NodeSpec(_int(env, "WORLD_SIZE"), _int(env, "RANK"), env["MASTER_ADDR"],
                        port or (_int(env, "MASTER_PORT") if "MASTER_PORT" in env else DEFAULT_PORT),
                        env.get("LOWBW_TESTBED", "lowbw"), local)
    else:
        raise ValueError("no node environment: run one task per node under srun (SLURM_NODEID, SLURM_NNODES) "
                         "or inside `python -m lowbw testbed` (RANK, WORLD_SIZE, MASTER_ADDR)")
    if spec.nnodes < 1 or not 0 <= spec.node_rank < spec.nnodes:
        raise ValueError(f"node rank {spec.node_rank} is not in [0, {spec.nnodes})")
    if not 1 <= spec.rdzv_port <= 65535:
        raise ValueError(f"rendezvous port {spec.rdzv_port} is not in [1, 65535]")
    return spec


def torchrun_argv(spec: NodeSpec, command: Sequence[str], nproc_per_node: int = 1) -> list[str]:
    """``python -m lowbw.launch.torchrun --nnodes N --node-rank R --rdzv-backend c10d ... COMMAND`` for one node
    (torchrun, its stores listening on the given addresses only); ``command`` is ``[python] script.py args``
    or ``[python] -m module args``."""
    cmd = list(command)
    if cmd and os.path.basename(cmd[0]).startswith("python"):
        cmd = cmd[1:]
    if not cmd or (cmd[0] == "-m" and len(cmd) < 2):
        raise ValueError(f"no script or -m module to run after -- (got {shlex.join(command)!r})")
    if nproc_per_node < 1:
        raise ValueError(f"--nproc-per-node {nproc_per_node} is not >= 1")
    argv = [sys.executable, "-m", "lowbw.launch.torchrun", "--nnodes", str(spec.nnodes),
            "--node-rank", str(spec.node_rank), "--nproc-per-node", str(nproc_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{spec.rdzv_host}:{spec.rdzv_port}",
            "--rdzv-id", spec.run_id, "--rdzv-conf", f"is_host={int(spec.node_rank == 0)}", "--max-restarts", "0"]
    if spec.local_addr:
        argv += ["--local-addr", spec.local_addr]
    return argv + cmd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lowbw.launch.cluster", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nproc-per-node", type=int, default=1, help="workers on this node (e.g. its GPUs; default 1)")
    ap.add_argument("--port", type=int, default=None,
                    help=f"rendezvous port (default: MASTER_PORT in the testbed, else {DEFAULT_PORT})")
    ap.add_argument("--dry-run", action="store_true", help="print the torchrun command and exit")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- [python] script.py args | -m module args")
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    try:
        full = torchrun_argv(node_spec(os.environ, a.port), cmd, a.nproc_per_node)
    except ValueError as e:
        print(f"lowbw.launch.cluster: {e}", file=sys.stderr)
        return 2
    # one write(2): the nodes of a testbed share the terminal, and print()'s separate writes interleave
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1 if a.dry_run else 2, (shlex.join(full) + "\n").encode())
    if a.dry_run:
        return 0
    os.execv(full[0], full)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
