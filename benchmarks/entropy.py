"""meanfield.metrics.entropy: bias against M and d, standard-error calibration, and time.

Four tables, float64 throughout:

- **Bias**: a Gaussian target N(0, Σ) with a full, non-diagonal Σ (eigenvalues geometric on [0.25, 4], a fixed
  rotation), exact entropy ½ log det(2πe Σ); d = 1, 2, 5, 10 and M = 1e2, 1e3, 1e4, ``R`` independent replicas
  per cell (``REPLICAS``); methods ``knn`` (k = 3), ``weighted`` (its default k) and ``gaussian``. Each cell:
  the mean error (estimate − exact) ± its standard error over the replicas, the replica-to-replica sd of the
  estimate, the mean reported se, and their ratio sd/se (1 = calibrated; > 1: the se is too small).
- **Calibration**: sd/se over 400 replicas of M = 1000 for laws where the k-NN noise matters most (uniform,
  and the KL of a Gaussian to its own density, where Var log f cancels).
- **KL** against the closed form for two 2-D Gaussians near each other (KL 0.17) and far apart (axes turned 90°: KL 7.4),
  both forms, one draw of M = N = 1e4.
- **Time** of ``entropy(x)`` (``method="auto"``, and ``knn`` at d = 10) at M = 1e4, 1e5 in d = 2, 10: wall time
  and CPU time of the process (one run each; scipy's ``cKDTree`` query runs on one thread), with the load.

The figure (the bias table's mean error against M, one panel per d) goes to ``docs/assets/entropy_bias.png``.
Run: ``python benchmarks/entropy.py`` (``--smoke``: tiny sizes, seconds; ``--skip-time``: the bias and
calibration tables only; ``--redraw benchmarks/results/<machine>/entropy.md``: the figure alone, from that file's
bias table); results: ``benchmarks/results/<machine>/entropy.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting threads ruin shared CPUs

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _common import ROOT, Provenance, result_path, write_result  # noqa: E402

from meanfield.metrics import entropy, kl  # noqa: E402

DIMENSIONS = (1, 2, 5, 10)
SIZES = (100, 1_000, 10_000)
REPLICAS = {100: 200, 1_000: 60, 10_000: 12}
METHODS = ("knn", "weighted", "gaussian")
FIGURE = ROOT / "docs" / "assets" / "entropy_bias.png"


def covariance(d: int) -> np.ndarray:
    """A full covariance, eigenvalues geometric on [0.25, 4], rotated by a fixed random orthogonal matrix."""
    q, _ = np.linalg.qr(np.random.default_rng(1000 + d).standard_normal((d, d)))
    return q @ np.diag(np.geomspace(0.25, 4.0, d)) @ q.T


def gaussian_cloud(R: int, M: int, cov: np.ndarray, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    chol = torch.as_tensor(np.linalg.cholesky(cov))
    return torch.randn(R, M, cov.shape[0], generator=g, dtype=torch.float64) @ chol.T  # (R, M, d)


def summary(result, exact: float) -> dict[str, float]:
    values = result.value.numpy()
    sd = values.std(ddof=1)
    se, jackknife = result.se.numpy().mean(), result.se_jackknife.numpy().mean()
    return {
        "bias": values.mean() - exact,
        "bias_se": sd / math.sqrt(len(values)),
        "sd": sd,
        "se": se,
        "ratio": sd / se,
        "jackknife": jackknife,
        "ratio_jackknife": sd / jackknife,
    }


def cells(s: dict[str, float]) -> str:
    return (
        f"{s['bias']:+.4f} ± {s['bias_se']:.4f} | {s['sd']:.4f} | {s['se']:.4f} | {s['ratio']:.2f} | "
        f"{s['jackknife']:.4f} | {s['ratio_jackknife']:.2f} |"
    )


def bias_table(dimensions, sizes, replicas) -> tuple[list[str], dict]:
    header = "| d | M | R | method | k | mean error ± se | sd | mean se | sd/se | mean se_jackknife | sd/se_jackknife |"
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|"]
    print(header, flush=True)
    data = {}
    for d in dimensions:
        cov = covariance(d)
        exact = 0.5 * math.log(np.linalg.det(2 * math.pi * math.e * cov))
        for M in sizes:
            R = replicas[M]
            x = gaussian_cloud(R, M, cov, seed=7 * d + M)
            for method in METHODS:
                if method == "gaussian" and M <= d:
                    continue
                h = entropy(x, method=method)
                s = summary(h, exact)
                data[(d, M, method)] = s
                line = f"| {d} | {M:.0e} | {R} | {method} | {h.k if h.k is not None else '—'} | {cells(s)}"
                lines.append(line)
                print(line, flush=True)
    return lines, data


def calibration_table(M: int, R: int) -> list[str]:
    header = (
        "| law | d | M | R | estimator | k | mean error ± se | sd | mean se | sd/se | mean se_jackknife "
        "| sd/se_jackknife |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print(header, flush=True)
    g = torch.Generator().manual_seed(11)
    gauss2 = torch.randn(R, M, 2, generator=g, dtype=torch.float64)
    uniform2 = torch.rand(R, M, 2, generator=g, dtype=torch.float64)
    gauss5 = torch.randn(R, M, 5, generator=g, dtype=torch.float64)

    def log_normal(z):  # log N(0, I) at z (..., d) -> (...)
        return -0.5 * (z**2).sum(-1) - 0.5 * z.shape[-1] * math.log(2 * math.pi)

    cases = [
        ("N(0, I)", gauss2, "entropy knn", lambda x: entropy(x, method="knn"), math.log(2 * math.pi * math.e)),
        ("U[0,1]²", uniform2, "entropy knn", lambda x: entropy(x, method="knn"), 0.0),
        ("N(0, I)", gauss5, "entropy weighted", lambda x: entropy(x, method="weighted"), 2.5 * math.log(2 * math.pi * math.e)),
        ("N(0, I)", gauss2, "KL to its density", lambda x: kl(x, log_normal), 0.0),
        ("N(0, I)", gauss2, "KL two samples (N = M)", lambda x: kl(x, torch.randn(x.shape, generator=g, dtype=torch.float64)), 0.0),
    ]  # fmt: skip
    for law, x, name, estimate, exact in cases:
        r = estimate(x)
        s = summary(r, exact)
        line = f"| {law} | {x.shape[-1]} | {M:.0e} | {R} | {name} | {r.k} | {cells(s)}"
        lines.append(line)
        print(line, flush=True)
    return lines


def kl_table(M: int) -> list[str]:
    """Both forms of ``kl`` against the closed form, for two 2-D Gaussians near each other and far apart."""
    header = "| case | exact KL | form | estimate | se | se_jackknife | error / se_jackknife |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    print(header, flush=True)
    c0 = covariance(2)
    rotated = (
        np.array([[0.0, -1.0], [1.0, 0.0]]) @ c0 @ np.array([[0.0, 1.0], [-1.0, 0.0]])
    )  # axes turned 90°
    cases = [
        ("near: Σ1 = 1.3 Σ0 + 0.2 I, m1 = (0.4, −0.2)", 1.3 * c0 + 0.2 * np.eye(2)),
        ("far: Σ1 = Σ0 turned 90°, m1 = (0.4, −0.2)", rotated),
    ]
    m1 = np.array([0.4, -0.2])
    x = gaussian_cloud(1, M, c0, seed=31)[0]  # (M, 2)
    for name, c1 in cases:
        inv = np.linalg.inv(c1)
        exact = 0.5 * (
            np.trace(inv @ c0) + m1 @ inv @ m1 - 2 + math.log(np.linalg.det(c1) / np.linalg.det(c0))
        )
        y = gaussian_cloud(1, M, c1, seed=32)[0] + torch.as_tensor(m1)  # (M, 2)
        inv_t, logdet = torch.as_tensor(inv), math.log(np.linalg.det(2 * math.pi * c1))

        def log_pi(z, inv_t=inv_t, logdet=logdet):  # log N(m1, Σ1) at z (..., 2) -> (...)
            r = z - torch.as_tensor(m1)
            return -0.5 * ((r @ inv_t) * r).sum(-1) - 0.5 * logdet

        for form, r in (("two samples, N = M", kl(x, y)), ("density", kl(x, log_pi))):
            err = (float(r.value) - exact) / float(r.se_jackknife)
            line = (
                f"| {name} | {exact:.4f} | {form} | {float(r.value):.4f} | {float(r.se):.4f} | "
                f"{float(r.se_jackknife):.4f} | {err:+.1f} |"
            )
            lines.append(line)
            print(line, flush=True)
    return lines


def time_table(sizes, dimensions) -> list[str]:
    header = "| d | M | method | k | wall | CPU | load (1 min) before |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    print(header, flush=True)
    for d in dimensions:
        for M in sizes:
            x = torch.randn(M, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
            for method in ("auto", "knn") if d > 3 else ("auto",):
                load = os.getloadavg()[0]
                wall, cpu = time.perf_counter(), time.process_time()
                h = entropy(x, method=method)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                line = f"| {d} | {M:.0e} | {h.method} | {h.k} | {wall:.3g} s | {cpu:.3g} s | {load:.1f} |"
                lines.append(line)
                print(line, flush=True)
    return lines


def figure(data: dict, dimensions, sizes, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from meanfield.studies.plotting import figure as page_figure
    from meanfield.studies.plotting import page_layout

    with page_layout():  # two panels a row at the page's width, 11-pt text (docs: readable at ≥ 9 pt)
        fig, axes = page_figure(ncols=len(dimensions), width=4.2, height=3.0)
    for ax, d in zip(np.atleast_1d(axes), dimensions):
        for method, marker in zip(METHODS, "osd"):
            rows = [(M, data[(d, M, method)]) for M in sizes if (d, M, method) in data]
            if rows:
                ax.errorbar(
                    [M for M, _ in rows], [s["bias"] for _, s in rows], yerr=[2 * s["bias_se"] for _, s in rows],
                    marker=marker, capsize=3, label=method,
                )  # fmt: skip
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(f"d = {d}")
        ax.set_xlabel("M")
    np.atleast_1d(axes)[0].set_ylabel("mean error (nats), ± 2 se")
    np.atleast_1d(axes)[0].legend(fontsize=9)
    fig.suptitle("Entropy estimators on N(0, Σ), full Σ: bias against M", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bias_from_results(path: Path) -> tuple[dict, tuple[int, ...], tuple[int, ...]]:
    """The bias table of a results file read back: ``(data, dimensions, sizes)`` as ``bias_table`` and
    ``figure`` use them (``bias`` and ``bias_se`` per cell), to redraw the figure without rerunning."""
    data = {}
    for line in path.read_text().splitlines():
        cell = [c.strip() for c in line.strip("|").split("|")]
        if len(cell) == 11 and cell[0].isdigit() and cell[3] in METHODS:
            bias, bias_se = (float(v) for v in cell[5].split("±"))
            data[(int(cell[0]), int(float(cell[1])), cell[3])] = {"bias": bias, "bias_se": bias_se}
    if not data:
        raise SystemExit(f"{path}: no bias table (rows '| d | M | R | method | k | mean error ± se | ...')")
    return data, tuple(sorted({d for d, _, _ in data})), tuple(sorted({M for _, M, _ in data}))


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that it runs (seconds)")
    parser.add_argument("--skip-time", action="store_true", help="the bias and calibration tables only")
    parser.add_argument("--out", default=None, help="results file (default results/<machine>/entropy.md)")
    parser.add_argument("--figure", default=None, help=f"figure path (default {FIGURE.relative_to(ROOT)})")
    parser.add_argument(
        "--redraw",
        default=None,
        metavar="RESULTS",
        help="redraw the figure from a results file's bias table, run nothing",
    )
    args = parser.parse_args(argv)
    if args.redraw:
        if not Path(args.redraw).is_file():
            parser.error(f"--redraw {args.redraw}: no such results file (a benchmarks/results/<machine>/entropy.md)")
        figure(*bias_from_results(Path(args.redraw)), Path(args.figure) if args.figure else FIGURE)
        return ""
    provenance = Provenance.start(__file__, argv)
    if args.smoke:
        dims, sizes, replicas, cal, times = (1, 5), (100, 300), {100: 5, 300: 3}, (200, 20), ((1_000,), (2,))
    else:
        dims, sizes, replicas, cal, times = (
            DIMENSIONS,
            SIZES,
            REPLICAS,
            (1_000, 400),
            ((10_000, 100_000), (2, 10)),
        )
    out = Path(args.out) if args.out else result_path("entropy")
    fig_path = Path(args.figure) if args.figure else (out.with_suffix(".png") if args.smoke else FIGURE)

    bias_lines, data = bias_table(dims, sizes, replicas)
    figure(data, dims, sizes, fig_path)
    cal_lines = calibration_table(*cal)
    kl_lines = kl_table(500 if args.smoke else 10_000)
    time_lines = [] if args.skip_time else time_table(*times)
    text = "\n".join(
        [
            "# Entropy estimators: bias against M and d, standard-error calibration, KL, time",
            "",
            "## Bias against M and d (Gaussian target, full covariance)",
            "",
            *bias_lines,
            "",
            "## Standard-error calibration (sd over replicas / mean reported se)",
            "",
            *cal_lines,
            "",
            "## KL against the Gaussian closed form (M = N, one draw)",
            "",
            *kl_lines,
            "",
            *(["## Time of `entropy(x)` (one call each)", "", *time_lines, ""] if time_lines else []),
        ]
    )
    write_result(out, text, provenance)
    print(f"wrote {out} and {fig_path}")
    return text


if __name__ == "__main__":
    main()
