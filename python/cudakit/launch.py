"""Starts the local ranks of a job the way torchrun does::

    python -m cudakit.launch --nproc-per-node 2 train.py --epochs 3
    python -m cudakit.launch --nproc-per-node 4 -m mypkg.train
    python -m cudakit.launch --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 \\
        --nproc-per-node 8 train.py

Each rank gets torchrun's environment: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and OMP_NUM_THREADS=1
unless set), so ``cudakit.nccl.Communicator.from_env()`` — or torch.distributed's env:// —
works unchanged. The master port is left free for rank 0 (cudakit's rendezvous listens on it;
torchrun's agent would hold it for its own store).

If a rank fails, the others are stopped (SIGTERM, then SIGKILL after --stop-timeout seconds)
and the launcher exits with that rank's exit code after printing which rank failed; SIGINT and
SIGTERM sent to the launcher are passed on to every rank.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cudakit.launch",
        description="Start the local ranks of a (possibly multi-node) job with torchrun's environment.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1,
                   help="ranks to start on this node (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="nodes in the job (default 1)")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0, help="this node's index (default 0)")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1",
                   help="address of the node running rank 0 (default 127.0.0.1)")
    p.add_argument("--master-port", "--master_port", type=int, default=None,
                   help="TCP port rank 0 listens on (default: a free port; required with --nnodes > 1)")
    p.add_argument("--standalone", action="store_true", help="single-node job (accepted for torchrun compatibility)")
    p.add_argument("--stop-timeout", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL when stopping ranks (default 10)")
    p.add_argument("-m", "--module", action="store_true", help="run the script argument as a Python module")
    p.add_argument("--no-python", "--no_python", action="store_true",
                   help="run the script argument as an executable, not through Python")
    p.add_argument("script", help="the program (or module with -m) every rank runs")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    return p


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _command(args) -> list[str]:
    if args.no_python:
        if args.module:
            raise SystemExit("cudakit.launch: --no-python and -m cannot be combined")
        return [args.script, *args.script_args]
    if args.module:
        return [sys.executable, "-u", "-m", args.script, *args.script_args]
    return [sys.executable, "-u", args.script, *args.script_args]


def _environments(args, port: int) -> list[dict[str, str]]:
    world = args.nnodes * args.nproc_per_node
    envs = []
    for local in range(args.nproc_per_node):
        rank = args.node_rank * args.nproc_per_node + local
        env = dict(os.environ)
        env.update({
            "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(args.nproc_per_node), "GROUP_RANK": str(args.node_rank),
            "GROUP_WORLD_SIZE": str(args.nnodes), "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(world),
            "ROLE_NAME": "default", "MASTER_ADDR": args.master_addr, "MASTER_PORT": str(port),
        })
        if args.nproc_per_node > 1:
            env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: ranks must not oversubscribe cores
        envs.append(env)
    return envs


def _stop(procs, timeout: float) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is None:
            p.kill()
            p.wait()


def _describe(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with code {status}"


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.nproc_per_node < 1:
        raise SystemExit(f"cudakit.launch: --nproc-per-node must be at least 1, got {args.nproc_per_node}")
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        raise SystemExit(f"cudakit.launch: --node-rank must be in [0, {args.nnodes}), got {args.node_rank}")
    if args.nnodes > 1 and args.master_port is None:
        raise SystemExit("cudakit.launch: --master-port is required with --nnodes > 1 (every node must use the same)")
    port = args.master_port if args.master_port is not None else _free_port()
    if not 0 < port < 65536:
        raise SystemExit(f"cudakit.launch: --master-port must be a TCP port (1..65535), got {port}")
    cmd = _command(args)
    envs = _environments(args, port)

    procs: list[subprocess.Popen] = []
    received: list[int] = []

    def forward(signum, _frame):
        received.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for env in envs:
            procs.append(subprocess.Popen(cmd, env=env))
        failed = None
        while True:
            running = False
            for local, p in enumerate(procs):
                status = p.poll()
                if status is None:
                    running = True
                elif status != 0 and failed is None:
                    failed = (local, p, status)
            if failed is not None or not running or received:
                break
            time.sleep(0.05)
        if failed is not None or received:
            _stop(procs, args.stop_timeout)
        for p in procs:
            p.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if failed is not None:
        local, p, status = failed
        rank = args.node_rank * args.nproc_per_node + local
        print(f"cudakit.launch: rank {rank} (local rank {local}, pid {p.pid}) {_describe(status)}; "
              f"the other ranks were stopped", file=sys.stderr)
        return status if status > 0 else 128 - status
    if received:
        return 128 + received[0]
    return 0


if __name__ == "__main__":
    sys.exit(main())
