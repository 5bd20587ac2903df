"""The length of what a notebook shows for each result object (issue 52): ``python tools/repr_lengths.py [-v]``.

Builds one of each (a 2000-particle double well saved 21 times, a 4-size convergence study with an observable,
a 3 × 4 sweep with a series, a sweep folder's table, a batched Wasserstein distance) and prints the characters
and lines of ``repr`` and of ``_repr_html_`` (``-`` where there is none); ``-v`` also prints the reprs.
"""

import random
import sys
from pathlib import Path

import torch

import meanfield as mf
from meanfield.metrics.wasserstein import Normal, wasserstein
from meanfield.runs.sweeps import SweepTable, summarize


def objects() -> dict[str, object]:
    system = mf.MeanFieldLangevin(mf.potentials.DoubleWell(), beta=0.25)
    traj = mf.simulate(system, torch.zeros(1, 2000, 1), t1=20.0, dt=0.01, save_every=100, generator=0)

    def sample(M: int, reps: int):
        x0 = torch.randn(reps, M, 1, generator=torch.Generator().manual_seed(M))  # (reps, M, 1)
        return mf.simulate(system, x0, t1=2.0, dt=0.05, generator=M, save_every=10)

    study = mf.convergence_in_m(
        sample, [8, 16, 32, 64], reps=8, reference=Normal(0.0, 1.0), generator=0, progress=False,
        observables={"m2": lambda x: (x**2).mean((1, 2))}, n_boot=200,
    )  # fmt: skip

    def run(beta: float, seed: int) -> dict:
        s = mf.MeanFieldLangevin(mf.potentials.DoubleWell(), beta=beta)
        x0 = torch.randn(1, 64, 1, generator=torch.Generator().manual_seed(seed))  # (1, 64, 1)
        tr = mf.simulate(s, x0, t1=1.0, dt=0.05, generator=seed, save_every=5)
        return {"m2": (tr.final**2).mean(), "var": (tr.states**2).mean((1, 2, 3))}

    sweep = mf.sweep(run, {"beta": [0.1, 0.2, 0.5]}, seeds=[0, 1, 2, 3], progress=False)
    rng = random.Random(0)
    rows = [
        {"lr": lr, "seed": s, "folder": f"lr={lr}-seed={s}", "status": "finished", "val_loss": rng.random()}
        for lr in (0.1, 0.2, 0.3)
        for s in range(4)
    ]
    table = SweepTable(
        Path("runs/x"), {"lr": [0.1, 0.2, 0.3]}, rows, summarize(rows, ["lr"], ["val_loss"]), ["val_loss"]
    )
    g = torch.Generator().manual_seed(0)
    w = wasserstein(torch.randn(4, 100, 2, generator=g), torch.randn(4, 100, 2, generator=g))
    return {
        "Trajectory": traj, "StudyResult": study, "RateEstimate": study.estimates[study.estimator],
        "SweepResult": sweep, "Table (sweep)": sweep.table, "Table (curves)": sweep.curves,
        "Table (study)": study.table, "WassersteinResult": w, "SweepTable": table,
    }  # fmt: skip


if __name__ == "__main__":
    found = objects()
    for name, o in found.items():
        text = repr(o)
        html = o._repr_html_() if hasattr(o, "_repr_html_") else None
        shown = "-" if html is None else len(html)
        print(f"{name:<18} repr {len(text):>6} chars {text.count(chr(10)) + 1:>4} lines   html {shown}")
    if "-v" in sys.argv:
        for name, o in found.items():
            print(f"--- {name}\n{o!r}")
