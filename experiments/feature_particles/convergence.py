"""Convergence in M of trained feature-particle networks (issue 13): the loss excess and the particle law.

Theory (Mei, Montanari & Nguyen 2018; Rotskoff & Vanden-Eijnden 2018): at a fixed training time T the test
loss of an M-particle mean-field network exceeds its M → ∞ limit by O(1/M), and the empirical law of the
particles ``ν_M = 1/M Σ δ_{(a_i, w_i)}`` approaches the limit law.

Set-up (one core, minutes): the teacher–student task of ``teacher_student.toml`` (two-index ReLU teacher,
d = 16, 4,096 training samples, w_i on the sphere, |a_i| ≤ 4), Langevin SGD ×M at lr = 0.5 for T = 1000
steps of batch 256 (t = 500 in mean-field time) at β = 0 and at a constant β > 0, the same batch order for
every M. *Coupled initialisations*: replicate r draws one i.i.d. sequence of M_max particles, and the
M-particle network starts from its first M (so every smaller network's particles are a subset of the larger
one's). The reference is one network of M_ref = 16·M_max particles from an independent draw.

Measured through :func:`meanfield.studies.convergence_in_m` (least-squares slope of log mean on log M,
bootstrap percentile CI over the replicates):

- the **loss excess** ``E L_M(T) − L_ref(T)`` (a custom metric of the trained cloud);
- ``E W2²(ν_M(T), ν_ref(T))`` on the particles ``(a_i, w_i) ∈ R^{17}``, as the sliced W2² (256 directions):
  the exact W2² between an empirical law in R^17 and its limit decays only like M^{-2/17} (the curse of
  dimension of empirical measures), which would hide any other rate, while the sliced W2² of M i.i.d. points
  decays like M^{-1} (one-dimensional projections);
- the same W2² **at initialisation** ``E W2²(ν_M(0), ν_ref(0))``: the i.i.d. sampling baseline that the
  trained law cannot beat.

Writes ``OUT/result.json`` (every replicate's numbers, the slopes and CIs) and ``OUT/environment.json``.

    python experiments/feature_particles/convergence.py --out experiments/feature_particles/results/convergence
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from meanfield import data as _data
from meanfield.metrics.wasserstein import w2_squared
from meanfield.nn import FeatureParticles
from meanfield.optim import Langevin
from meanfield.studies import convergence_in_m

D, K, N_TRAIN, N_TEST, BATCH, LR, A = 16, 2, 4096, 2048, 256, 0.5, 4.0
PRESETS = {
    "smoke": dict(Ms=(8, 16, 32), reps=3, ref_factor=4, steps=20, betas=(0.0, 1e-3)),
    "quick": dict(Ms=(16, 64, 256, 1024), reps=5, ref_factor=16, steps=1000, betas=(0.0, 1e-3)),
    "wide": dict(Ms=(16, 64, 256, 1024, 4096), reps=5, ref_factor=16, steps=1000, betas=(1e-3,)),
    "full": dict(Ms=(16, 64, 256, 1024, 4096), reps=10, ref_factor=16, steps=4000, betas=(0.0, 1e-3)),
}


def init_particles(M: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """An i.i.d. sequence of M particles: ``a_i ~ N(0, 1)`` clipped to [−A, A], ``w_i`` uniform on S^{d−1}.

    Drawn particle by particle from one generator (rows of one ``(M, d + 1)`` normal draw), so the first m
    particles of ``init_particles(M, s)`` are ``init_particles(m, s)`` for every m ≤ M (the coupling).
    """
    g = torch.Generator().manual_seed(seed)
    z = torch.empty(M, D + 1, dtype=torch.float64)
    for i in range(0, M, 1024):  # fixed chunks: the stream does not depend on M
        n = min(1024, M - i)
        z[i : i + n] = torch.randn(1024, D + 1, generator=g, dtype=torch.float64)[:n]
    a = z[:, 0].clamp(-A, A)  # (M,)
    w = z[:, 1:] / z[:, 1:].norm(dim=1, keepdim=True)  # (M, d)
    return a.float(), w.float()


def cloud(layer: FeatureParticles) -> torch.Tensor:
    """The particles ``(a_i, w_i)`` as a cloud ``(M, d + 1)``."""
    return torch.cat([layer.a.detach()[:, None], layer.w.detach()], 1)


def train(a0: torch.Tensor, w0: torch.Tensor, beta: float, steps: int, noise_seed: int, task) -> torch.Tensor:
    """Train the network started at ``(a0, w0)``; return its final cloud ``(M, d + 1)``."""
    M = a0.shape[0]
    layer = FeatureParticles(D, M, "relu", A=A, sphere=True)
    with torch.no_grad():
        layer.a.copy_(a0)
        layer.w.copy_(w0)
    opt = Langevin(Langevin.param_groups_for(layer), lr=LR, beta=beta, seed=noise_seed)
    batches = _data.Batches(N_TRAIN, BATCH, seed=12345)  # the same batch order for every M and replicate
    for _ in range(steps):
        idx = batches.next_indices()
        opt.zero_grad()
        (0.5 * F.mse_loss(layer(task.x_train[idx]), task.y_train[idx])).backward()
        opt.step()
    return cloud(layer)


def test_mse(clouds: torch.Tensor, task) -> torch.Tensor:
    """Test MSE of the networks whose particles are ``clouds (B, M, d + 1)``: ``(B,)``."""
    a, w = clouds[..., 0], clouds[..., 1:]  # (B, M), (B, M, d)
    f = torch.relu(task.x_test @ w.transpose(1, 2)) @ a.unsqueeze(-1) / a.shape[1]  # (B, N, 1)
    return (f[..., 0] - task.y_test).square().mean(1)  # (B,)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--preset", default="quick", choices=sorted(PRESETS))
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("THREADS", "1")))
    p = PRESETS[args.preset]
    Ms, reps, steps = list(p["Ms"]), p["reps"], p["steps"]
    M_ref = p["ref_factor"] * Ms[-1]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = _data.teacher_student(D, N_TRAIN, N_TEST, k=K, activation="relu", seed=2026)
    start = time.time()
    result: dict = {
        "preset": args.preset,
        "Ms": Ms,
        "reps": reps,
        "M_ref": M_ref,
        "steps": steps,
        "lr": LR,
        "batch_size": BATCH,
        "task": task.description,
        "betas": {},
    }
    inits = [init_particles(Ms[-1], seed) for seed in range(reps)]  # replicate r: one i.i.d. sequence
    a_ref0, w_ref0 = init_particles(M_ref, 10_000)
    ref0 = torch.cat([a_ref0[:, None], w_ref0], 1)  # (M_ref, d + 1)
    for beta in p["betas"]:
        t0 = time.time()
        ref = train(a_ref0, w_ref0, beta, steps, noise_seed=10_000, task=task)  # (M_ref, d + 1)
        L_ref = float(test_mse(ref[None], task)[0])
        trained = {
            M: torch.stack(
                [train(a[:M], w[:M], beta, steps, noise_seed=r, task=task) for r, (a, w) in enumerate(inits)]
            )
            for M in Ms
        }  # M -> (reps, M, d + 1)
        init = {M: torch.stack([torch.cat([a[:M, None], w[:M]], 1) for a, w in inits]) for M in Ms}

        def excess(x: torch.Tensor, y: torch.Tensor, L_ref: float = L_ref) -> torch.Tensor:
            return test_mse(x, task) - L_ref  # (B,)

        excess.__name__ = "loss_excess"

        def sliced(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return w2_squared(x, y, method="sliced", n_projections=256, seed=0)

        sliced.__name__ = "sliced_w2_squared"
        g = torch.Generator().manual_seed(0)
        studies = {
            "loss_excess": convergence_in_m(
                lambda M, n, trained=trained: trained[M],
                Ms,
                reps=reps,
                reference=ref,
                generator=g,
                metric=excess,
                progress=False,
            ),
            "w2_trained": convergence_in_m(
                lambda M, n, trained=trained: trained[M],
                Ms,
                reps=reps,
                reference=ref,
                generator=g,
                metric=sliced,
                progress=False,
            ),
            "w2_init": convergence_in_m(
                lambda M, n, init=init: init[M],
                Ms,
                reps=reps,
                reference=ref0,
                generator=g,
                metric=sliced,
                progress=False,
            ),
        }
        result["betas"][str(beta)] = {
            "L_ref": L_ref,
            "wall_time_s": time.time() - t0,
            **{
                name: {
                    "values": s.values.tolist(),
                    "mean": s.mean.tolist(),
                    "se": s.se.tolist(),
                    "floor": s.floor.tolist(),
                    "slope": s.slope,
                    "slope_ci": list(s.slope_ci),
                    "method": s.method,
                }
                for name, s in studies.items()
            },
        }
        print(
            f"beta={beta}: L_ref={L_ref:.4g}, "
            + ", ".join(
                f"{n} slope {s.slope:.3f} [{s.slope_ci[0]:.3f}, {s.slope_ci[1]:.3f}]"
                for n, s in studies.items()
            ),
            flush=True,
        )
    result["wall_time_s"] = time.time() - start
    (out / "result.json").write_text(json.dumps(result, indent=1))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "git_commit": commit,
        "platform": platform.platform(),
        "command": f"convergence.py --preset {args.preset}",
    }
    (out / "environment.json").write_text(json.dumps(env, indent=1))


if __name__ == "__main__":
    main()
