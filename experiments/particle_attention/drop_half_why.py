r"""Why the drop-half gap moves with β (exploratory, issue 47): the spread of the particles' outputs.

    python experiments/particle_attention/drop_half_why.py --sweeps /work/runs/experiments/particle_attention/results/scale/{p6,secondary}
    python experiments/particle_attention/drop_half_why.py --table      # the table again from the committed records

A particle layer's output is the mean of its M particles' outputs, $Y = \frac1M\sum_i v_i$. Keeping a random
half $S$ ($k = M/2$, without replacement) replaces it by $Y_S = \frac1k\sum_{i\in S} v_i$, whose error is that of
a sample mean from a finite population:

$$\mathbb{E}_S\,\lVert Y_S - Y\rVert^2 = \frac{\sigma^2}{k}\,\frac{M-k}{M-1} = \frac{\sigma^2}{M-1},\qquad
\sigma^2 = \frac1M\sum_i \lVert v_i - Y\rVert^2 .$$

So the damage of dropping half is set by the particles' spread about their mean: the more the particles differ
(the "diversity" of claims a and d), the larger the error of any half, and a law of particles cannot be both
diverse and droppable at a fixed M. This script measures, on every final checkpoint it finds (checkpoints are
not committed: the runs that finished on this machine), per layer and averaged over the six layers, on the
run's probe blocks (its ``drop_half_draws.py`` blocks):

- ``spread``: $\sigma^2/(M-1)$, the expected squared error of $Y$ per token (the formula; checked against 32
  random halves of the first layer, ``check``: their mean over the formula, 1 up to the draws' sampling error);
- ``relative``: $\sigma^2/((M-1)\lVert Y\rVert^2)$, the same relative to the layer's output: about 1 when the
  particles' outputs share no common part (independent, mean zero: $\lVert Y\rVert^2 \approx \sigma^2/(M-1)$), 0
  when they agree; a half is as good as the whole only when it is small;
- beside them the run's 32-draw drop-half gap (``results/scale/drop_half/``) and final validation loss, and
  the RMS of the attention weights ``W_QKV`` and ``W_O`` (over the layers) against that of the noise alone, a
  random walk of ``T`` steps of $\sqrt{2\beta\,\mathrm{lr}}\,\xi$: $\sqrt{2\beta\,\mathrm{lr}\,T}$ (as
  ``analysis.py`` measures it at 2 × 64), and the RMS the weights would have if they were the learned ones
  plus that walk, independent of them: $\sqrt{\mathrm{RMS}_0^2 + 2\beta\,\mathrm{lr}\,T}$ with
  $\mathrm{RMS}_0$ the β = 0 runs' (nothing in the loss confines the walk: the runs have no weight decay).

The output is one JSON a run in ``results/scale/drop_half_why/`` and ``results/scale/drop_half_why.md`` (per β:
the means over the measured runs; Spearman's ρ of the gap with each measure over all runs). Exploratory: no
test is registered, and the runs measured are those whose checkpoints exist (β = 0 and 1e-3: seeds 0–1; 3e-3:
0–7; 1e-2 and 3e-2: 3–7), so the arms are compared as means over different seeds.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import drop_half_draws as _draws  # noqa: E402
import scale_report as _report  # noqa: E402

from meanfield._io import write_json_atomic  # noqa: E402
from meanfield.nn import head_metrics as _lm  # noqa: E402
from meanfield.nn.transformer import attention_inputs  # noqa: E402
from meanfield.runs import load_model  # noqa: E402

HERE = Path(__file__).resolve().parent
SCALE = HERE / "results" / "scale"
OUT = SCALE / "drop_half_why"
CHECK_DRAWS = 32


def half_error(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""$\mathbb{E}_S\lVert Y_S - Y\rVert^2 = \sigma^2/(M-1)$ per token for a random half of the particles'
    outputs ``v`` ``(B, M, T, d)``, and the same over $\lVert Y\rVert^2$: two ``(B, T)`` tensors."""
    M = v.shape[1]
    Y = v.mean(1)  # (B, T, d)
    sigma2 = (v - Y.unsqueeze(1)).pow(2).sum(-1).mean(1)  # (B, T): (1/M) Σ_i ‖v_i − Y‖²
    return sigma2 / (M - 1), sigma2 / ((M - 1) * Y.pow(2).sum(-1))


@torch.no_grad()
def spread(run: Path) -> dict:
    """The particles' output spread of one run's final model (see the module's docstring)."""
    trained = load_model(run)
    model, cfg, data = _lm.as_particle_model(trained.model), trained.config, trained.data
    blocks = _draws.probe_blocks(data, cfg.train.batch_size)
    per_layer: list[list[tuple[float, float]]] = [[] for _ in model.blocks]  # per layer: (spread, relative) a batch
    check = math.nan
    g = torch.Generator().manual_seed(0)
    for b, (x, _) in enumerate(blocks):
        for ell, (block, X) in enumerate(zip(model.blocks, attention_inputs(model, x), strict=True)):
            layer = block.attention
            v = layer.particle_outputs(X)  # (B, M, T, d)
            M = v.shape[1]
            Y = v.mean(1)  # (B, T, d)
            torch.testing.assert_close(Y, layer(X), rtol=1e-4, atol=1e-5)  # the layer is the particles' mean
            absolute, relative = half_error(v)  # (B, T) each
            if b == 0 and ell == 0:  # the formula against random halves
                errs = []
                for _ in range(CHECK_DRAWS):
                    keep = torch.randperm(M, generator=g)[: M // 2]
                    errs.append(float((v[:, keep].mean(1) - Y).pow(2).sum(-1).mean()))
                check = statistics.fmean(errs) / float(absolute.mean())
            per_layer[ell].append((float(absolute.mean()), float(relative.mean())))
    layers = [
        {"spread": statistics.fmean(s for s, _ in rows), "relative": statistics.fmean(r for _, r in rows)}
        for rows in per_layer
    ]
    summary = json.loads((run / "summary.json").read_text())
    attention = [block.attention for block in model.blocks]
    beta = cfg.optim.get("beta", 0.0)
    beta = float(beta) if isinstance(beta, (int, float)) else math.nan  # a schedule has no one walk
    return {
        "run": run.name,
        "seed": cfg.seed,
        "rms_qkv": statistics.fmean(float(a.W_QKV.square().mean().sqrt()) for a in attention),
        "rms_o": statistics.fmean(float(a.W_O.square().mean().sqrt()) for a in attention),
        "noise_walk_rms": math.sqrt(2 * beta * cfg.optim["lr"] * cfg.train.steps),
        "layers": layers,
        "spread": statistics.fmean(layer["spread"] for layer in layers),
        "relative": statistics.fmean(layer["relative"] for layer in layers),
        "check": check,
        "val_loss": summary["final"]["val_loss"],
    }


def beta_of(arm: str) -> float:
    """β of an M = 8 curve arm's name (``p8`` 0, ``p8-b3e-3`` 0.003; any other arm nan: not on the curve)."""
    if arm == "p8":
        return 0.0
    return float(arm.removeprefix("p8-b")) if arm.startswith("p8-b") else math.nan


def measure(sweeps: list[Path], out: Path = OUT) -> list[str]:
    """Measure every run of ``sweeps`` whose final checkpoint is here and that has no record yet."""
    done = []
    for sweep in sweeps:
        runs = [r for r in _draws.run_folders(sweep) if _draws.is_final(r) and not (out / f"{r.name}.json").is_file()]
        for run in tqdm(runs, desc=sweep.name, disable=None):
            record = spread(run)
            record["arm"] = _report.arm_of(json.loads((run / "point.json").read_text()))
            write_json_atomic(out / f"{run.name}.json", record)
            done.append(run.name)
    return done


def table(out: Path = OUT, scale: Path = SCALE) -> str:
    """Per β, the means over the measured runs; Spearman's ρ of the 32-draw gap with each measure."""
    from scipy import stats

    records = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    gaps: dict[tuple[str, int], float] = {}
    for stage in ("primary", "secondary", "p6"):
        for arm, by_seed in _report.load_draws(scale / "drop_half" / stage, scale / stage).items():
            for seed, record in by_seed.items():
                gaps[(arm, seed)] = record["mean"]
    rows = [  # the M = 8 curve's runs with a 32-draw record
        r | {"gap": gaps[(r["arm"], r["seed"])]}
        for r in records
        if (r["arm"], r["seed"]) in gaps and not math.isnan(beta_of(r["arm"]))
    ]
    lines = [
        "Drop-half gap and the particles' output spread (exploratory; one row per β, means over the runs measured;"
        " `drop_half_why.py`)",
        "",
        "| β | runs (seeds) | val loss | drop-half gap, 32 draws (nats) | spread σ²/(M−1) | relative σ²/((M−1)‖Y‖²) |"
        " formula check | RMS W_QKV | RMS W_O | noise-only walk RMS | learned ⊕ walk: W_QKV, W_O |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_beta: dict[float, list[dict]] = {}
    for r in rows:
        by_beta.setdefault(beta_of(r["arm"]), []).append(r)
    cold = by_beta.get(0.0, [])  # the learned weights' RMS, RMS₀: the β = 0 runs'
    learned = {k: statistics.fmean(r[k] for r in cold) if cold else math.nan for k in ("rms_qkv", "rms_o")}
    for beta, rs in sorted(by_beta.items()):
        seeds = ", ".join(str(r["seed"]) for r in sorted(rs, key=lambda r: r["seed"]))
        keys = ("val_loss", "gap", "spread", "relative", "check", "rms_qkv", "rms_o", "noise_walk_rms")
        mean = {k: statistics.fmean(r[k] for r in rs) for k in keys}
        lines.append(
            f"| {beta:g} | {len(rs)} ({seeds}) | {mean['val_loss']:.3f} | {mean['gap']:.3f} | {mean['spread']:.4f} |"
            f" {mean['relative']:.3f} | {mean['check']:.3f} | {mean['rms_qkv']:.4f} | {mean['rms_o']:.4f} |"
            f" {mean['noise_walk_rms']:.4f} | {math.hypot(learned['rms_qkv'], mean['noise_walk_rms']):.4f},"
            f" {math.hypot(learned['rms_o'], mean['noise_walk_rms']):.4f} |"
        )
    lines += [
        "",
        "*learned ⊕ walk*: the RMS the weights would have if each were its β = 0 value plus the noise's own"
        " walk, independent of it: √(RMS₀² + 2β·lr·T), RMS₀ the β = 0 runs' mean.",
        "",
    ]
    for key, what in (("spread", "the spread σ²/(M−1)"), ("relative", "the relative spread"),
                      ("val_loss", "the validation loss")):  # fmt: skip
        rho = stats.spearmanr([r["gap"] for r in rows], [r[key] for r in rows])
        within = [
            f"β = {beta:g}: {stats.spearmanr([r['gap'] for r in rs], [r[key] for r in rs]).statistic:+.2f} ({len(rs)})"
            for beta, rs in sorted(by_beta.items()) if len(rs) >= 5
        ]  # fmt: skip
        lines.append(f"- Spearman's ρ of the gap with {what} over the {len(rows)} runs: {rho.statistic:+.2f} "
                     f"(p = {rho.pvalue:.2g}); within one β (runs): {'; '.join(within)}.")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=Path, nargs="*", default=[], help="sweep folders with final checkpoints")
    parser.add_argument("--table", action="store_true", help="only the table, from the committed records")
    args = parser.parse_args(argv)
    if not args.table:
        measured = measure(args.sweeps)
        print(f"measured {len(measured)} runs")
    text = table()
    (SCALE / "drop_half_why.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
