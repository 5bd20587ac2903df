"""One particle system over 1 and 2 gloo processes: strong and weak scaling, the collectives' share of a step.

Each process runs one thread. Cases: a quadratic interaction (the centre of mass: one all-reduce of B·d numbers
per step) and a Gaussian pair potential (the ring: world − 1 hops of B·m·d numbers per step, O(m·M) pair work
per rank). Strong scaling: the same M on 1 and 2 ranks; weak: the same M/world per rank. Timed as the median
over rounds of ``--steps`` Euler–Maruyama steps (``simulate`` through ``ShardedSystem`` with ``BlockNoise``);
"comm" is the wall time inside the all-reduce or the ring's send/recv (it includes waiting for the slower rank).

Usage:
    python benchmarks/distributed.py                  # writes benchmarks/results/<machine>/distributed.md
    python benchmarks/distributed.py --steps 5 --rounds 1 --out /tmp/distributed.md   # smoke
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from _common import Provenance, result_path, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from meanfield import MeanFieldLangevin, simulate  # noqa: E402
from meanfield.drift.potentials import GaussianInteraction, Quadratic, QuadraticInteraction  # noqa: E402
from meanfield.stepping.sharded import BlockNoise, ShardedSystem, shard_range  # noqa: E402

CASES = {  # name: (system, d, M for strong scaling, M per rank for weak scaling)
    "quadratic (all-reduce)": (lambda: MeanFieldLangevin(Quadratic(1.0), QuadraticInteraction(1.0)), 10, 1 << 18, 1 << 17),
    "Gaussian pair (ring)": (lambda: MeanFieldLangevin(Quadratic(1.0), GaussianInteraction(1.0, 1.0)), 2, 8192, 4096),
}  # fmt: skip
BLOCK = 4096


def _worker(rank: int, world: int, port: int, steps: int, rounds: int, out: str) -> None:
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    rows = []
    for name, (make, d, m_strong, m_weak) in CASES.items():
        for scaling, M in (("strong", m_strong), ("weak", m_weak * world)):
            start, stop = shard_range(M, world, rank, BLOCK)
            x0 = torch.randn(1, stop - start, d, dtype=torch.float64)
            times, comm = [], []
            for _ in range(rounds + 1):  # the first round warms up
                system = ShardedSystem(make(), M)
                noise = BlockNoise(tuple(x0.shape), 0.01, 0, start=start, block=BLOCK)
                if world > 1:
                    dist.barrier()
                t = time.perf_counter()
                simulate(system, x0, t1=steps * 0.01, dt=0.01, brownian=noise)
                times.append((time.perf_counter() - t) / steps)
                comm.append(system.comm_seconds / steps)
            plain = []  # the same system in one process with simulate's own noise, for the cost of sharding
            if world == 1:
                for _ in range(rounds + 1):
                    t = time.perf_counter()
                    simulate(make(), x0, t1=steps * 0.01, dt=0.01, generator=0)
                    plain.append((time.perf_counter() - t) / steps)
            rows.append(dict(case=name, scaling=scaling, M=M, world=world, step=statistics.median(times[1:]),
                             comm=statistics.median(comm[1:]), sent=system.exchanged / steps,
                             plain=statistics.median(plain[1:]) if plain else None))  # fmt: skip
    if rank == 0:
        Path(out, f"world{world}.json").write_text(json.dumps(rows))
    if world > 1:
        dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="results file (default results/<machine>/distributed.md)")
    args = parser.parse_args(argv)
    provenance = Provenance.start(__file__, argv)
    with tempfile.TemporaryDirectory() as tmp:
        _worker(0, 1, 0, args.steps, args.rounds, tmp)
        mp.spawn(_worker, args=(2, _port(), args.steps, args.rounds, tmp), nprocs=2, join=True)
        one = json.loads(Path(tmp, "world1.json").read_text())
        two = json.loads(Path(tmp, "world2.json").read_text())
    lines = [
        "# Sharded particle systems: 1 → 2 gloo processes",
        "",
        f"One thread per process; float64, B = 1; {args.steps} Euler–Maruyama steps, "
        f"median of {args.rounds} rounds.",
        "",
        "| case | scaling | M | simulate (ms) | sharded, 1 rank (ms) | sharded, 2 ranks (ms) | speed-up | "
        "comm share (2 ranks) | sent per step per rank |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for a, b in zip(one, two):
        M_text = f"{a['M']:,}" if a["M"] == b["M"] else f"{a['M']:,} → {b['M']:,}"
        speed = a["step"] / b["step"]
        label = "speed-up" if a["scaling"] == "strong" else "efficiency"
        lines.append(
            f"| {a['case']} | {a['scaling']} | {M_text} | {1e3 * a['plain']:.2f} | {1e3 * a['step']:.2f} | "
            f"{1e3 * b['step']:.2f} | "
            f"{speed:.2f} ({label}) | {b['comm'] / b['step']:.0%} | {8 * b['sent'] / 1024:.1f} KiB |"
        )
    lines += [
        "",
        "`simulate` is the unsharded system with its own Gaussian noise (one generator); the sharded columns",
        f"draw the noise per block of {BLOCK} particles (`BlockNoise`, so that a particle's noise does not",
        "depend on the number of ranks). Strong scaling: the same M on both; the ideal speed-up is 2. Weak scaling: M/world fixed per rank; the",
        "ideal efficiency (time on 1 rank / time on 2) is 1 for the all-reduce, and 1/2 for the pair potential",
        "(each rank's pair work is m·M, which doubles with M). The comm share includes waiting for the slower",
        "rank: on a shared 2-core machine the two ranks also compete with everything else running.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    print(f"written: {write_result(args.out or result_path('distributed'), text, provenance)}")


if __name__ == "__main__":
    main()
