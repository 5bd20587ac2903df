"""Tokens of real text through the trained particle-attention LMs: do they cluster, and does the particle count M matter?

    python experiments/token_dynamics/trained_lm.py [--preset full|smoke]   # writes results/trained_lm[_smoke]/
    python experiments/token_dynamics/trained_lm.py --redraw   # the figure alone, from results/trained_lm/summary.json

Every trained model of the attention experiment (``experiments/particle_attention/results/``: the 8-head MHA
baseline and particle attention with M = 8, 16 (h = 4 and 8) and 32 heads at β = 0, M = 8 at β = 1e-2, seeds
0–2; and the 4-layer nanoGPT MHA / M = 8 models) is rebuilt from its run folder's ``config.toml`` and last
checkpoint (the loader of ``experiments/particle_attention/analysis.py``) and fed the same fixed validation
blocks of tiny-shakespeare (the first ``blocks`` blocks of ``block`` characters of the ``valid`` split,
``meanfield.data.iter_blocks``). The tokens of one block are one cloud; every number is the mean over blocks.

The clustering of a cloud is measured on its *unit* tokens ``u_i = LN₀(x_i)/√d`` (layer norm without its gain:
centred over the features, unit length; what the next block's LN sees, before its gain):

- ``‖ū‖² = 1/n² Σ_ij ⟨u_i, u_j⟩`` (:func:`meanfield.nn.tokens.mean_inner_product`; 1 at a single cluster,
  ≈ 1/n for n independent uniform directions) and the mean pairwise cosine ``(n‖ū‖² − 1)/(n − 1)``;
- the number of clusters: connected components of ``|u_i − u_j| < r`` (:func:`meanfield.nn.tokens.count_clusters`,
  ``r = 0.5``, i.e. cosine > 0.875; at the embedding, pairs of *different* characters lie at distance ≳ 1 and
  repeats of one character mostly below 0.5: the distance quantiles are recorded, and the number of distinct
  characters per block is the reference count);
- the effective rank (Roy & Vetterli) of the Gram matrix ``U Uᵀ`` (radius-free; 1 at a single cluster).

Measured:

1. the residual stream: after the embedding and after every block (depth profile);
2. the attention-only flow of every trained layer: the token ODE ``ẋ = V_θ(x)`` of the frozen layer
   (:func:`meanfield.nn.tokens.attention_system`; the MHA baseline through its equal particle model,
   :func:`meanfield.nn.head_metrics.as_particle_model`: ``W_O^j = H·W_outᵀ[j]``), started from that layer's real inputs
   ``LN₁(x^ℓ)`` (:func:`meanfield.nn.transformer.attention_inputs`) and integrated by Euler with ``Δt = 1/16``
   (the network ``depth_flow`` with ``L = 16·T``) to T = 16. Two versions: in R^d (the ODE as it is; the token
   norms grow, recorded as ``norm_ratio``) and on the sphere (the LN idealisation: tokens held at the radius
   ``r`` of their inputs, i.e. unit tokens with ``β' = β·r²``, ``r² = `` the mean ``|LN₁(x)|²``). The trained
   network's own attention step is ``T = 1`` with one Euler step (``net_step``).
3. M: mean ± 95 % t-interval over the seeds (:func:`meanfield.studies.stats.t_interval`) and paired differences
   against M = 8 (:func:`meanfield.studies.stats.paired_difference`, paired by seed: same data, initialisation stream
   and batch order).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from meanfield import data as _data
from meanfield._io import json_clean, write_json_atomic, write_text_atomic
from meanfield.metrics.diversity import effective_rank
from meanfield.nn.head_metrics import as_particle_model
from meanfield.nn.tokens import SelfAttentionDynamics, attention_system, count_clusters, mean_inner_product
from meanfield.nn.transformer import attention_inputs
from meanfield.runs import find_runs, load_model
from meanfield.stepping.simulate import simulate
from meanfield.studies.plotting import figure, page_layout, save
from meanfield.studies.stats import paired_difference, t_interval

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNS = ROOT / "experiments" / "particle_attention" / "results"

# key: (label, sweep folder, sweep point, family); the run folder is the one of RUNS/folder whose config.toml
# has the point's values and the seed (find_run)
ARMS: dict[str, tuple[str, str, str, str]] = {
    "mha": ("MHA, 8 heads (h = 8)", "quick_mha", "model.attention=mha", "quick"),
    "m8": ("M = 8 (h = 8)", "quick_m8_beta", "optim.beta=0", "quick"),
    "m16_h4": ("M = 16, h = 4", "quick_m16", "model.n_heads=16,model.d_head=4,optim.beta=0", "quick"),
    "m16_h8": ("M = 16, h = 8", "quick_m16", "model.n_heads=16,model.d_head=8,optim.beta=0", "quick"),
    "m32": ("M = 32 (h = 2)", "quick_m32", "model.n_heads=32,optim.beta=0", "quick"),
    "m8_beta1e-2": ("M = 8, β = 1e-2", "quick_m8_beta", "optim.beta=0.01", "quick"),
    "nano_mha": ("nanoGPT MHA, 8 heads", "nanogpt_mha", "model.attention=mha", "nanogpt"),
    "nano_m8": ("nanoGPT M = 8", "nanogpt_m8", "optim.beta=0", "nanogpt"),
}
REFERENCE = {"quick": "m8", "nanogpt": "nano_m8"}  # paired differences against these

PRESETS = {
    "full": dict(
        arms=list(ARMS),
        seeds=[0, 1, 2],
        blocks=64,
        block=64,
        flow_blocks=32,
        steps_per_unit=16,
        T_max=16,
        table_times=[1, 4, 16],
        radius=0.5,
        euler_check=[("m8", 0), ("nano_m8", 0)],
    ),
    "smoke": dict(
        arms=["mha", "m8"],
        seeds=[0],
        blocks=8,
        block=64,
        flow_blocks=4,
        steps_per_unit=4,
        T_max=2,
        table_times=[1, 2],
        radius=0.5,
        euler_check=[("m8", 0)],
    ),
}


def load_run(run: Path):
    """``(model, info)``: the trained TransformerLM of a run folder (eval mode, float32, CPU) and its record."""
    trained = load_model(run)
    model, cfg, data = trained.model, trained.config, trained.data
    summary = json.loads((run / "summary.json").read_text())
    step = trained.step
    if data.dataset != "tiny_shakespeare":
        raise ValueError(f"{run}: trained on {data.dataset}, not tiny_shakespeare")
    info = dict(
        run=str(run.relative_to(ROOT)),
        checkpoint_step=step,
        steps=cfg.train.steps,
        status=summary.get("status"),
        val_loss=summary.get("final", {}).get("val_loss"),
        attention=cfg.model["attention"],
        n_heads=cfg.model["n_heads"],
        d_head=cfg.model.get("d_head"),
        d_model=cfg.model["d_model"],
        n_layers=cfg.model["n_layers"],
        beta=cfg.optim.get("beta"),
    )
    return model, info


def validation_blocks(n_blocks: int, block: int) -> torch.Tensor:
    """The first ``n_blocks`` non-overlapping blocks of ``block`` characters of tiny-shakespeare ``valid``."""
    held = _data.tiny_shakespeare(None).valid
    x, _ = next(iter(_data.iter_blocks(held, block, n_blocks)))  # (n_blocks, block)
    if x.shape != (n_blocks, block):
        raise ValueError(f"the validation split has fewer than {n_blocks} blocks of {block}")
    return x


# --- measures of a token cloud -------------------------------------------------------------------------------
def unit(x: torch.Tensor) -> torch.Tensor:
    """``LN₀(x)/√d``: centred over the features and of unit length, ``(B, n, d) -> (B, n, d)``."""
    x = x - x.mean(-1, keepdim=True)
    return x / x.norm(dim=-1, keepdim=True)


def cloud_stats(x: torch.Tensor, radius: float) -> dict[str, float]:
    """Clustering of each cloud ``x[b]`` (B clouds of n tokens), averaged over the clouds."""
    u = unit(x.double())  # (B, n, d)
    n = u.shape[1]
    mip = mean_inner_product(u)  # (B,)
    return dict(
        mip=float(mip.mean()),
        cos=float(((n * mip - 1) / (n - 1)).mean()),
        clusters=float(count_clusters(u, radius).double().mean()),
        erank=float(effective_rank(u @ u.mT).mean()),
        norm=float(x.double().norm(dim=-1).mean()),
    )


@torch.no_grad()
def residual_stream(model, idx: torch.Tensor, radius: float) -> list[dict[str, float]]:
    """``cloud_stats`` after the embedding and after each block: ``L + 1`` entries."""
    T = idx.shape[1]
    x = model.token_embedding(idx) + model.position_embedding(torch.arange(T))  # (B, T, d)
    out = [cloud_stats(x, radius)]
    for block in model.blocks:
        x = block(x)  # (B, T, d)
        out.append(cloud_stats(x, radius))
    return out


def sphere_system(system: SelfAttentionDynamics, x0: torch.Tensor) -> tuple[SelfAttentionDynamics, float]:
    """The flow of ``system`` with tokens held at radius ``r`` (``r² =`` mean ``|x0_i|²``), as unit tokens:
    ``x = r·u`` gives ``u̇ = P_u V(u)`` with ``β' = β·r²`` (the value map is linear, so the time is unchanged)."""
    r2 = float(x0.double().square().sum(-1).mean())
    return (
        SelfAttentionDynamics(
            system.query,
            system.key,
            system.value,
            system.output,
            inverse_temperature=system.inverse_temperature * r2,
            causal=system.causal,
            sphere=True,
        ),
        r2,
    )


def attention_flow(
    layer: torch.nn.Module, x0: torch.Tensor, *, T: float, dt: float, sphere: bool = False, every: int = 1
) -> torch.Tensor:
    """States ``(S, B, n, d)`` of the token ODE of a frozen particle layer from ``x0`` to time ``T`` (Euler ``dt``),
    kept every ``every`` steps (``S = T/(dt·every) + 1``, ``x0`` first). ``sphere``: the flow on the sphere of the
    inputs' radius (:func:`sphere_system`; the states are unit tokens)."""
    system = attention_system(layer)
    if sphere:
        system, _ = sphere_system(system, x0)
        x0 = x0 / x0.norm(dim=-1, keepdim=True)
    return simulate(system, x0, t1=T, dt=dt, save_every=every).states


@torch.no_grad()
def flows(model, idx: torch.Tensor, p: dict) -> dict[str, list]:
    """Per layer: the network's attention step and the attention-only flows (R^d and sphere) at T = 0 … T_max."""
    pm = as_particle_model(model)  # the MHA baseline as its equal particle model; particle models unchanged
    inputs = attention_inputs(pm, idx)
    dt, every = 1.0 / p["steps_per_unit"], p["steps_per_unit"]
    out: dict[str, list] = {"net_step": [], "rd": [], "sphere": [], "r2": []}
    for block, x0 in zip(pm.blocks, inputs):
        layer = block.attention
        out["net_step"].append(cloud_stats(x0 + block.dt * layer(x0), p["radius"]))
        rd = attention_flow(layer, x0, T=p["T_max"], dt=dt, every=every)  # (S, B, n, d)
        norm0 = x0.double().norm(dim=-1).mean()
        out["rd"].append(
            [
                dict(cloud_stats(s, p["radius"]), norm_ratio=float(s.double().norm(dim=-1).mean() / norm0))
                for s in rd
            ]
        )
        sp = attention_flow(layer, x0, T=p["T_max"], dt=dt, every=every, sphere=True)
        out["sphere"].append([cloud_stats(s, p["radius"]) for s in sp])
        out["r2"].append(float(x0.double().square().sum(-1).mean()))
    return out


@torch.no_grad()
def embedding_distances(model, idx: torch.Tensor) -> dict[str, list[float]]:
    """Quantiles (1, 10, 50, 90 %) of ``|u_i − u_j|`` at the embedding, for equal and for different characters."""
    T = idx.shape[1]
    u = unit((model.token_embedding(idx) + model.position_embedding(torch.arange(T))).double())
    D = torch.cdist(u, u)  # (B, T, T)
    same = (idx[:, :, None] == idx[:, None, :]) & ~torch.eye(T, dtype=torch.bool)
    q = torch.tensor([0.01, 0.1, 0.5, 0.9], dtype=torch.float64)
    return dict(
        same_char=D[same].quantile(q).tolist(),
        different_char=D[idx[:, :, None] != idx[:, None, :]].quantile(q).tolist(),
    )


@torch.no_grad()
def euler_check(model, idx: torch.Tensor, p: dict) -> dict:
    """‖ū‖² at T_max of the last layer's R^d and sphere flows with Δt = 1/16 against Δt = 1/32."""
    pm = as_particle_model(model)
    x0 = attention_inputs(pm, idx)[-1]
    layer = pm.blocks[-1].attention
    out = {}
    for k in (p["steps_per_unit"], 2 * p["steps_per_unit"]):
        for sphere in (False, True):
            s = attention_flow(layer, x0, T=p["T_max"], dt=1.0 / k, every=k * p["T_max"], sphere=sphere)[-1]
            out[f"{'sphere' if sphere else 'rd'}_dt=1/{k}"] = cloud_stats(s, p["radius"])["mip"]
    return out


# --- the study -------------------------------------------------------------------------------------------------
def measure(p: dict) -> tuple[dict, dict]:
    idx = validation_blocks(p["blocks"], p["block"])  # (blocks, block)
    idx_flow = idx[: p["flow_blocks"]]
    distinct = float(np.mean([len(set(row.tolist())) for row in idx]))
    per_run, runs = {}, {}
    for key in p["arms"]:
        label, folder, point, family = ARMS[key]
        per_run[key], runs[key] = {}, {}
        for seed in p["seeds"]:
            found = find_runs(
                RUNS / folder, {**dict(kv.split("=", 1) for kv in point.split(",")), "seed": seed}
            )
            if not found:
                raise FileNotFoundError(f"no run of {RUNS / folder} has {point} and seed {seed}")
            run = found[0]
            model, info = load_run(run)
            t0 = time.process_time()
            rec = dict(stream=residual_stream(model, idx, p["radius"]), **flows(model, idx_flow, p))
            rec["embedding_distances"] = embedding_distances(model, idx)
            if (key, seed) in [tuple(e) for e in p["euler_check"]]:
                rec["euler_check"] = euler_check(model, idx_flow, p)
            info["cpu_seconds"] = time.process_time() - t0
            per_run[key][seed], runs[key][seed] = rec, info
            print(
                f"{key} seed {seed}: stream ‖ū‖² {[round(s['mip'], 3) for s in rec['stream']]}, "
                f"flow R^d ‖ū‖²(T_max) {[round(f[-1]['mip'], 3) for f in rec['rd']]}, "
                f"sphere {[round(f[-1]['mip'], 3) for f in rec['sphere']]} ({info['cpu_seconds']:.0f} s)",
                flush=True,
            )
    return dict(per_run=per_run, distinct_chars=distinct), runs


def _interval(values) -> dict:
    values = [v for v in values if v is not None]
    iv = t_interval(values)
    return dict(mean=iv.mean, lo=iv.lo, hi=iv.hi, n=iv.n, values=list(values))


def _paired(a, b) -> dict:
    d = paired_difference(a, b)
    return dict(mean=d.mean, lo=d.lo, hi=d.hi, n=d.n, p_value=d.p_value)


def aggregate(p: dict, raw: dict, runs: dict) -> dict:
    """Seed means ± 95 % t-intervals of every measure, and paired differences against the family's M = 8."""
    per_run = raw["per_run"]
    times = list(range(p["T_max"] + 1))

    def seeds(key: str, get) -> list[float]:
        return [get(per_run[key][s]) for s in p["seeds"]]

    arms = {}
    for key in p["arms"]:
        rec0 = per_run[key][p["seeds"][0]]
        L = len(rec0["rd"])
        arm = dict(
            label=ARMS[key][0],
            family=ARMS[key][3],
            val_loss=_interval([runs[key][s]["val_loss"] for s in p["seeds"]]),
            stream={
                m: [_interval(seeds(key, lambda r, i=i, m=m: r["stream"][i][m])) for i in range(L + 1)]
                for m in ("mip", "cos", "clusters", "erank", "norm")
            },
            net_step={
                m: [_interval(seeds(key, lambda r, ell=ell, m=m: r["net_step"][ell][m])) for ell in range(L)]
                for m in ("mip", "clusters", "erank")
            },
        )
        for flow, metrics in (
            ("rd", ("mip", "clusters", "erank", "norm_ratio")),
            ("sphere", ("mip", "clusters", "erank")),
        ):
            arm[flow] = {
                m: [
                    [
                        _interval(seeds(key, lambda r, ell=ell, t=t, m=m, flow=flow: r[flow][ell][t][m]))
                        for t in times
                    ]
                    for ell in range(L)
                ]
                for m in metrics
            }
        arm["r2"] = [_interval(seeds(key, lambda r, ell=ell: r["r2"][ell])) for ell in range(L)]
        arms[key] = arm

    paired = {}
    for key in p["arms"]:
        ref = REFERENCE[ARMS[key][3]]
        if key == ref or ref not in p["arms"] or len(p["seeds"]) < 2:
            continue
        L = len(per_run[key][p["seeds"][0]]["rd"])

        def diff(get, key=key, ref=ref) -> dict:
            return _paired(seeds(key, get), seeds(ref, get))

        entry = dict(
            reference=ref,
            val_loss=_paired(
                [runs[key][s]["val_loss"] for s in p["seeds"]], [runs[ref][s]["val_loss"] for s in p["seeds"]]
            ),
            stream_mip_last=diff(lambda r: r["stream"][-1]["mip"]),
            stream_clusters_last=diff(lambda r: r["stream"][-1]["clusters"]),
            stream_erank_last=diff(lambda r: r["stream"][-1]["erank"]),
        )
        for t in p["table_times"]:
            for ell in range(L):
                entry[f"rd_mip_l{ell}_T{t}"] = diff(lambda r, ell=ell, t=t: r["rd"][ell][t]["mip"])
                entry[f"sphere_mip_l{ell}_T{t}"] = diff(lambda r, ell=ell, t=t: r["sphere"][ell][t]["mip"])
        paired[key] = entry
    return dict(arms=arms, paired=paired, times=times, distinct_chars=raw["distinct_chars"])


# --- tables, figure ----------------------------------------------------------------------------------------------
def _f(iv: dict, digits: int = 3) -> str:
    if iv["n"] < 2 or not math.isfinite(iv["hi"]):
        return f"{iv['mean']:.{digits}f}"
    return f"{iv['mean']:.{digits}f} ± {(iv['hi'] - iv['lo']) / 2:.{digits}f}"


def _d(d: dict, digits: int = 3) -> str:
    p = "—" if not math.isfinite(d["p_value"]) else f"{d['p_value']:.2g}"
    return f"{d['mean']:+.{digits}f} [{d['lo']:+.{digits}f}, {d['hi']:+.{digits}f}], p = {p}"


def tables(p: dict, agg: dict, cpu: float) -> str:
    arms, seeds = agg["arms"], p["seeds"]
    n = len(seeds)
    lines = [
        "<!-- generated by experiments/token_dynamics/trained_lm.py; do not edit -->",
        "",
        f"{p['blocks']} validation blocks of {p['block']} characters (tiny-shakespeare `valid`, the first blocks); "
        f"flows on the first {p['flow_blocks']}. Unit tokens u = LN₀(x)/√d. Mean ± 95 % t-interval over "
        f"{n} seeds ({', '.join(map(str, seeds))}). Clusters: components of |u_i − u_j| < {p['radius']}; "
        f"distinct characters per block (reference): {agg['distinct_chars']:.1f}; 1/n = {1 / p['block']:.4f} "
        "(‖ū‖² of n independent uniform directions).",
        "",
        "### Residual stream through depth",
        "",
        "| model | val loss | layer | ‖ū‖² | mean cosine | clusters | erank(UUᵀ) |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm in arms.values():
        for i in range(len(arm["stream"]["mip"])):
            s = arm["stream"]
            lines.append(
                f"| {arm['label'] if i == 0 else ''} | {_f(arm['val_loss']) if i == 0 else ''} | "
                f"{'embedding' if i == 0 else f'block {i}'} | {_f(s['mip'][i])} | {_f(s['cos'][i])} | "
                f"{_f(s['clusters'][i], 1)} | {_f(s['erank'][i], 1)} |"
            )
    for flow, title in (
        ("rd", "Attention-only flow of each trained layer, in R^d (the token ODE as it is)"),
        (
            "sphere",
            "Attention-only flow on the sphere (tokens held at their input radius: the LN idealisation)",
        ),
    ):
        Ts = p["table_times"]
        head = " | ".join(f"‖ū‖², T = {t}" for t in Ts)
        extra = f" | norm ratio, T = {Ts[-1]} |" if flow == "rd" else " |"
        lines += [
            "",
            f"### {title}",
            "",
            f"| model | layer | ‖ū‖², T = 0 | net step | {head} | clusters, T = 0 | clusters, T = {Ts[-1]} | "
            f"erank, T = {Ts[-1]}{extra}",
            "|---|---|---|---|" + "---|" * len(Ts) + "---|---|---|" + ("---|" if flow == "rd" else ""),
        ]
        for arm in arms.values():
            f = arm[flow]
            for ell in range(len(f["mip"])):
                cells = " | ".join(_f(f["mip"][ell][t]) for t in Ts)
                tail = f" {_f(f['norm_ratio'][ell][Ts[-1]], 2)} |" if flow == "rd" else ""
                lines.append(
                    f"| {arm['label'] if ell == 0 else ''} | {ell} | {_f(f['mip'][ell][0])} | "
                    f"{_f(arm['net_step']['mip'][ell]) if flow == 'rd' else '—'} | {cells} | "
                    f"{_f(f['clusters'][ell][0], 1)} | {_f(f['clusters'][ell][Ts[-1]], 1)} | "
                    f"{_f(f['erank'][ell][Ts[-1]], 1)} |{tail}"
                )
    if agg["paired"]:
        Tl = p["table_times"][-1]
        lines += [
            "",
            f"### Paired differences against M = 8 (same seed), mean [95 % t-interval], paired t-test (n = {n})",
            "",
            f"| model − M = 8 | val loss | stream ‖ū‖², last block | stream clusters, last block | "
            f"R^d flow ‖ū‖², T = {Tl} (per layer) | sphere flow ‖ū‖², T = {Tl} (per layer) |",
            "|---|---|---|---|---|---|",
        ]
        for key, e in agg["paired"].items():
            L = len(arms[key]["rd"]["mip"])
            rd = "<br>".join(f"ℓ{ell}: {_d(e[f'rd_mip_l{ell}_T{Tl}'])}" for ell in range(L))
            sp = "<br>".join(f"ℓ{ell}: {_d(e[f'sphere_mip_l{ell}_T{Tl}'])}" for ell in range(L))
            lines.append(
                f"| {arms[key]['label']} − {arms[e['reference']]['label']} | {_d(e['val_loss'])} | "
                f"{_d(e['stream_mip_last'])} | {_d(e['stream_clusters_last'], 1)} | {rd} | {sp} |"
            )
    lines += ["", f"CPU time: {cpu:.0f} s (one thread)."]
    return "\n".join(lines) + "\n"


def plot(p: dict, agg: dict, path: Path) -> None:
    """Three panels, two a row (the third centred, the legend beside it), at the page's width: 8.4 in, 11-pt text,
    readable at ≥ 9 pt on the docs page (``plotting.page_layout``)."""
    with page_layout():
        fig, axes = figure(3, width=4.2, height=3.4)
    colors = {k: f"C{i}" for i, k in enumerate(ARMS)}
    ax = axes[0]
    for key, arm in agg["arms"].items():
        s = arm["stream"]["mip"]
        depth = np.arange(len(s)) + 0.04 * (list(agg["arms"]).index(key) - len(agg["arms"]) / 2)  # offsets
        mean = np.array([iv["mean"] for iv in s])
        err = np.array([[iv["mean"] - iv["lo"] for iv in s], [iv["hi"] - iv["mean"] for iv in s]])
        ls = "--" if arm["family"] == "nanogpt" else "-"
        ax.errorbar(
            depth,
            mean,
            yerr=np.nan_to_num(err),
            fmt="o" + ls,
            ms=3,
            capsize=2,
            color=colors[key],
            label=arm["label"],
        )
    ax.set(
        xlabel="depth (0 = embedding, ℓ = after block ℓ)",
        ylabel="‖ū‖² of unit tokens",
        title="residual stream (± 95 % CI, 3 seeds)",
    )
    fig.legend(  # in the blank beside the lone third panel
        *ax.get_legend_handles_labels(),
        fontsize=9,
        loc="lower right",
        title="solid: 2 × 64\ndashed: nanoGPT 4 × 128",
        title_fontsize=9,
    )
    times = np.array(agg["times"])
    for ax, flow, title in (
        (axes[1], "rd", "attention-only flow in R^d"),
        (axes[2], "sphere", "the flow on the sphere"),
    ):
        for key, arm in agg["arms"].items():
            f = arm[flow]["mip"]
            ls = "--" if arm["family"] == "nanogpt" else "-"
            last = np.array([iv["mean"] for iv in f[-1]])
            first = np.array([iv["mean"] for iv in f[0]])
            ax.plot(times, last, ls, color=colors[key], label=f"{arm['label']} (last layer)")
            ax.plot(times, first, ls, color=colors[key], alpha=0.35, lw=1)
        ax.set(xlabel="time T (depth L = 16·T of one layer)", ylabel="‖ū‖²", title=title, ylim=(0, 1.02))
    axes[1].text(
        0.02, 0.97, "bold: last layer\nfaint: first layer", transform=axes[1].transAxes, fontsize=9, va="top"
    )
    save(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="full", choices=sorted(PRESETS))
    parser.add_argument("--out", default=None, help="results folder (default results/trained_lm[_smoke])")
    parser.add_argument(
        "--redraw",
        action="store_true",
        help="redraw the figure from the results folder's summary.json, run nothing",
    )
    parser.add_argument(
        "--figure", default=None, help="figure path (default docs/assets/token_dynamics_trained.png)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    p = PRESETS[args.preset]
    name = "trained_lm" + ("" if args.preset == "full" else "_" + args.preset)
    folder = Path(args.out) if args.out else HERE / "results" / name
    figure_path = (
        Path(args.figure) if args.figure else ROOT / "docs" / "assets" / "token_dynamics_trained.png"
    )
    if args.redraw:  # summary.json is the aggregate plot() reads, with the per-run checks beside it
        if not (folder / "summary.json").is_file():
            parser.error(f"--redraw: {folder / 'summary.json'} does not exist (run the preset first, or give --out)")
        plot(p, json.loads((folder / "summary.json").read_text()), figure_path)
        return
    folder.mkdir(parents=True, exist_ok=True)
    start = time.process_time()
    raw, runs = measure(p)
    agg = aggregate(p, raw, runs)
    cpu = time.process_time() - start
    config = dict(
        preset=args.preset,
        **p,
        data="tiny_shakespeare valid, iter_blocks(valid, block, blocks): the first blocks",
        unit_tokens="LN0(x)/sqrt(d): centred over features, unit length",
        runs=runs,
        torch=torch.__version__,
        threads=torch.get_num_threads(),
    )
    write_json_atomic(folder / "config.json", json_clean(config))
    checks = {  # the per-seed values of every measure are in agg (``values``); keep what is only per run
        key: {
            seed: {k: rec[k] for k in ("embedding_distances", "euler_check", "r2") if k in rec}
            for seed, rec in recs.items()
        }
        for key, recs in raw["per_run"].items()
    }
    write_json_atomic(folder / "summary.json", json_clean(dict(agg, per_run=checks, cpu_seconds=cpu)))
    text = tables(p, agg, cpu)
    write_text_atomic(folder / "tables.md", text)
    if args.preset == "full":
        plot(p, agg, figure_path)
    print(text)
    print(json.dumps(dict(cpu_seconds=round(cpu, 1))))


if __name__ == "__main__":
    main()
