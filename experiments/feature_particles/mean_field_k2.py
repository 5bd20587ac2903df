"""The mean-field law of the two-index teacher (k = 2, c = 1/√2, A = 4) against β for one d, into a JSON file.

    python experiments/feature_particles/mean_field_k2.py D OUT.json [N_THETA N_PHI N_U]

Solves the 2-D law of (w·w*_1, w·w*_2) of theory/feature_transition.py (:func:`curve_disc`) on the β grid of
the ``lambda_q`` sweep and a geometric grid from 1 to 1e-5 (minutes per d: the kernel matrix has ~7,000² entries;
one line per solve on stdout).
report.py reads ``results/mean_field_k2/d=D.json`` (the grid 3 3 12); a finer grid (e.g. 4 4 16) measures the
quadrature error (``results/mean_field_k2/refined/``).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from meanfield.studies.validation import load_check

ft = load_check(Path(__file__).resolve().parents[2] / "theory" / "feature_transition.py")
GRID = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)

if __name__ == "__main__":
    if len(sys.argv) not in (3, 6):
        sys.exit("usage: mean_field_k2.py D OUT.json [N_THETA N_PHI N_U] (the grid: all three numbers or none)")
    d, out = int(sys.argv[1]), Path(sys.argv[2])
    t0 = time.process_time()
    betas = np.unique(np.concatenate([np.geomspace(1.0, 1e-5, 31), GRID]))[::-1]
    nodes = [int(x) for x in sys.argv[3:]] or [3, 3, 12]  # nodes per panel (see Disc); 3×3: ~7,000 nodes
    grid = dict(zip(("n_theta", "n_phi", "n_u"), nodes, strict=True))

    def log(beta: float, residual: float) -> None:  # one line a solve: the cold end takes most of the time
        print(
            f"d = {d}, β = {beta:.4g}: residual {residual:.1e} ({time.process_time() - t0:.0f} CPU s)",
            flush=True,
        )

    cur = ft.curve_disc(d, betas, log=log, **grid)
    cur.update(d=d, k=2, cpu_s=time.process_time() - t0, grid=grid)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cur, indent=1))
