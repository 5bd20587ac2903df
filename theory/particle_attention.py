"""Check 9 — M averaged attention heads of width d/M are multi-head attention with the output scaled by 1/M.

Formula: for tokens X ∈ R^{T×d} and heads θ_i = (W_Q^i, W_K^i, W_V^i, W_O^i) with W^i ∈ R^{d×d/M},
``1/M Σ_i softmax(X W_Q^i (X W_K^i)ᵀ/sqrt(d/M)) X W_V^i W_O^i`` equals ``nn.MultiheadAttention(d, M, bias=False)``
whose output projection is ``W_O/M`` with ``W_O = [W_O^1; …; W_O^M]`` and whose in-projection stacks the
heads' ``W_Q, W_K, W_V`` (Vaswani et al. 2017, eq. for MultiHead: Concat(head_i) W^O = Σ_i head_i W_O^i).

The comparison is deterministic: float64, tolerance 1e-12 on the largest absolute difference (round-off
of a few hundred flops of O(1) numbers is ~1e-15), so the false-failure rate is 0 and any error above
1e-12 is detected. Negative control: the unscaled ``nn.MultiheadAttention``
(output projection not divided by M) must differ, by a factor M − 1 of the output.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from meanfield.nn import CausalParticleAttention, ParticleAttention
from meanfield.studies.plotting import figure
from meanfield.studies.validation import CheckResult

CLAIM = "M particle heads of width d/M averaged = nn.MultiheadAttention with W_O/M (float64, 1e-12)"
BROKEN = dict(scale_output=1.0)  # an output projection not divided by M
PRESETS = {
    "fast": dict(cases=((16, 4), (32, 8), (24, 3))),
    "full": dict(cases=((16, 4), (32, 8), (24, 3), (64, 16), (96, 32))),
}
TOL = 1e-12


def _mha_like(layer: ParticleAttention, causal: bool, scale_output: float | None) -> nn.MultiheadAttention:
    """``nn.MultiheadAttention`` with the layer's heads: in-projection stacked, out-projection ``W_O/M``."""
    M, d, h = layer.W_Q.shape
    mha = nn.MultiheadAttention(d, M, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        stack = [w.permute(0, 2, 1).reshape(M * h, d) for w in (layer.W_Q, layer.W_K, layer.W_V)]  # (M·h, d)
        mha.in_proj_weight.copy_(torch.cat(stack))  # (3·M·h, d)
        scale = 1.0 / M if scale_output is None else scale_output
        mha.out_proj.weight.copy_(layer.W_O.reshape(M * h, d).T * scale)  # (d, M·h)
    return mha


def run(preset: str = "fast", *, scale_output: float | None = None) -> CheckResult:
    """Run the check; ``scale_output`` overrides the 1/M scaling of the baseline (a broken input)."""
    result = CheckResult("particle_attention", CLAIM, preset=preset)
    gen = torch.Generator().manual_seed(0)
    errors = []
    for d, M in PRESETS[preset]["cases"]:
        for causal in (False, True):
            cls = CausalParticleAttention if causal else ParticleAttention
            layer = cls(d, M, generator=gen, dtype=torch.float64)
            X = torch.randn(3, 11, d, generator=gen, dtype=torch.float64)  # (B, T, d)
            mask = nn.Transformer.generate_square_subsequent_mask(11, dtype=torch.float64) if causal else None
            with torch.no_grad():
                ours = layer(X)  # (B, T, d)
                ref, _ = _mha_like(layer, causal, scale_output)(X, X, X, attn_mask=mask, need_weights=False)
            err = float((ours - ref).abs().max())
            errors.append(dict(d=d, M=M, causal=causal, error=err, scale=float(ours.abs().max())))
            result.add(
                f"max |Y − MHA(W_O/M)|, d={d}, M={M}{', causal' if causal else ''}",
                err,
                0.0,
                TOL,
                detectable=TOL,
                note="float64 round-off bound",
            )
    d, M = PRESETS[preset]["cases"][0]
    layer = ParticleAttention(d, M, generator=gen, dtype=torch.float64)
    X = torch.randn(3, 11, d, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        unscaled, _ = _mha_like(layer, False, 1.0)(X, X, X, need_weights=False)
        err = float((layer(X) - unscaled).abs().max())
    result.add(f"negative control: MHA without 1/M, d={d}, M={M}", err, 0.0, TOL, expect="differ")
    result.data = dict(errors=errors, tol=TOL)
    return result


def plot(result: CheckResult):
    fig, ax = figure(width=5.0)
    rows = result.data["errors"]
    labels = [f"d={r['d']}\nM={r['M']}{' c' if r['causal'] else ''}" for r in rows]
    ax.bar(np.arange(len(rows)), [max(r["error"], 1e-18) for r in rows], color="tab:blue")
    ax.axhline(result.data["tol"], color="k", ls="--", label="tolerance 1e-12")
    ax.set_xticks(np.arange(len(rows)), labels, fontsize=7)
    ax.set(
        yscale="log",
        ylabel="max |difference| (0 drawn at 1e-18)",
        title="particle attention vs MHA with W_O/M (c: causal)",
    )
    ax.legend()
    return fig


if __name__ == "__main__":
    from meanfield.studies.validation import run_as_script

    run_as_script(__file__)
