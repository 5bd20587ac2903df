r"""Tokens as particles: self-attention through depth as an interacting-particle system.

n tokens $x_i \in \mathbb{R}^d$ (or on the sphere $S^{d-1}$, the layer-norm idealisation) move by the attention of H
heads $\theta_m = (Q_m, K_m, V_m, O_m)$, averaged (Geshkovski, Letrouit, Polyanskiy & Rigollet 2023):

$$
\dot{x}_i = P_{x_i} 1/H \sum_m O_m \sum_j A^m_{ij} V_m x_j, \qquad A^m_{ij} = \exp(\beta\langle Q_m x_i, K_m x_j\rangle) / Z^m_i,
$$

with $Z^m_i = \sum_j \exp(\beta\langle Q_m x_i, K_m x_j\rangle)$ (normalised self-attention, "SA": the softmax) or $Z^m_i = n$
(unnormalised, "USA"), the sum over $j \le i$ under a causal mask, and $P_x = I - x x^\top$ on the sphere
($P_x = I$ in R^d). A residual stack $x^{\ell+1} = x^\ell + \Delta t \cdot 1/H \sum_m v_{\theta_m}(x^\ell)$ with shared weights is the
Euler scheme of this ODE with step $\Delta t$ ([`attention_system`][meanfield.nn.tokens.attention_system] and [`attention_layer`][meanfield.nn.tokens.attention_layer] convert between
a [`ParticleAttention`][meanfield.nn.attention.ParticleAttention] and the system). An optional noise $\sqrt{2\tau} dW$ makes it an SDE.

The state is ``(B, n, d)``: B independent replicas of n tokens (the particle axis holds the tokens).

*Names.* The formulas keep the literature's $\beta$ for the attention's **inverse** temperature (the sharpness of the
softmax), so that they read as in the papers; in code it is always ``inverse_temperature``, never ``beta``, which
everywhere else in meanfield is a temperature (the noise's $\sqrt{2\beta}$). The noise's temperature here is
$\tau$, ``temperature``.

The mean-field limit $\partial_t \mu + \nabla\cdot(\mu V[\mu]) = 0$ on the circle (``d = 2``, ``Q = K = V = I``, angle θ) linearised
around the uniform law grows the Fourier mode ``k`` of $\mu$ at the rate (derived in
``docs/theory/token_dynamics.md``)

$$
\lambda_k = k^2 I_k(\beta) / (\beta \cdot I_0(\beta)) \qquad (SA), \qquad \lambda_k = k^2 I_k(\beta) / \beta \qquad (\mathrm{USA}),
$$

($I_k$ the modified Bessel function), and the fastest-growing mode $k^* = \operatorname{argmax}_k k^2 I_k(\beta)$ (≈ sqrt(2β) for
large β) is the number of metastable clusters that appears from a near-uniform cloud ([`growth_rate`][meanfield.nn.tokens.growth_rate],
[`fastest_mode`][meanfield.nn.tokens.fastest_mode]).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy import special
from scipy.sparse.csgraph import connected_components

from .._checks import check_finite, check_int, check_nonnegative
from ..drift.projections import Sphere
from ..drift.systems import ParticleSystem

__all__ = [
    "SelfAttentionDynamics",
    "attention_system",
    "attention_layer",
    "depth_flow",
    "growth_rate",
    "fastest_mode",
    "fourier_modes",
    "mean_inner_product",
    "count_clusters",
]

_CHUNK_ELEMENTS = 2**22  # B·H·c·n logits per chunk of c query rows (32 MiB in float64)


def _as_heads(name: str, w: torch.Tensor, d: int | None, axes: str) -> torch.Tensor:
    """``w`` as ``(H, *axes)`` (a 2-D ``w`` is one head), finite, acting on R^d (last axis ``d``) when given."""
    if not torch.is_tensor(w):
        raise TypeError(
            f"{name} must be a torch.Tensor of shape (H, {axes}) or ({axes}), got {type(w).__name__}"
        )
    if w.dim() == 2:
        w = w[None]
    if w.dim() != 3:
        raise ValueError(f"{name} must have shape (H, {axes}) or ({axes}), got {tuple(w.shape)}")
    if d is not None and w.shape[-1] != d:
        raise ValueError(f"{name} must act on R^{d} (last axis {d}), got shape {tuple(w.shape)}")
    if not torch.isfinite(w).all():
        raise ValueError(f"{name} has NaN or Inf entries")
    return w


class SelfAttentionDynamics(ParticleSystem):
    r"""Self-attention dynamics of n tokens: $dx_i = P_{x_i} V(x)_i dt + \sqrt{2\tau} dW_i$ (module docstring).

    $V(x)_i = 1/H \sum_m O_m \sum_j A^m_{ij} V_m x_j$, $A^m_{ij} = \exp(\beta\langle Q_m x_i, K_m x_j\rangle)/Z^m_i$. The pairwise sum runs
    in chunks of query rows ($B\cdot H\cdot c\cdot n$ logits at a time, never an $n \times n \times d$ tensor). On the circle with
    identity weights ([`identity`][meanfield.nn.tokens.SelfAttentionDynamics.identity] with ``d = 2``, ``sphere=True``) the kernel has the Fourier series
    $\exp(\beta \cos \varphi) = I_0(\beta) + 2 \sum_k I_k(\beta) \cos k\varphi$, and ``method="fourier"`` evaluates the velocity in
    $O(n\cdot K)$ with ``K`` modes, truncated where $K\cdot I_K(\beta)/I_0(\beta) < 1e-15$ (exact to float64 rounding).

    Args:
        query: ``Q``, ``(H, h, d)`` or ``(h, d)`` (one head): $q_i = Q x_i$.
        key: ``K``, the same shape as ``query``.
        value: ``V``, $(H, h_v, d)$ or $(h_v, d)$.
        output: ``O``, $(H, d, h_v)$ or $(d, h_v)$; default the identity (then $h_v = d$).
        inverse_temperature: the attention's inverse temperature β ≥ 0 (a network's $1/\sqrt{h}$).
        normalized: ``True`` for SA (softmax), ``False`` for USA (``Z = n``).
        causal: token i attends to tokens $j \le i$ only.
        sphere: tokens on $S^{d-1}$: the velocity is projected on the tangent space and every step ends
            with [`Sphere`][meanfield.drift.projections.Sphere] (the initial tokens must be unit vectors).
        temperature: τ ≥ 0 of the noise $\sqrt{2\tau} dW$ (0: the deterministic flow of a network).
        method: ``"pairwise"`` (any weights), ``"fourier"`` (circle with identity weights) or ``"auto"``
            (Fourier where it applies and $n \ge 256$).

    Example:
        >>> system = SelfAttentionDynamics.identity(3, inverse_temperature=1.0, sphere=True)
        >>> x0 = torch.nn.functional.normalize(torch.randn(4, 32, 3, dtype=torch.float64), dim=-1)
        >>> x = simulate(system, x0, t1=20.0, dt=0.05).final  # (4, 32, 3): one cluster per replica
    """

    noise = "additive"

    def __init__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        output: torch.Tensor | None = None,
        *,
        inverse_temperature: float = 1.0,
        normalized: bool = True,
        causal: bool = False,
        sphere: bool = False,
        temperature: float = 0.0,
        method: str = "auto",
    ) -> None:
        Q = _as_heads("query", query, None, "h, d")
        d = Q.shape[-1]
        K = _as_heads("key", key, d, "h, d")
        V = _as_heads("value", value, d, "h_v, d")
        if K.shape != Q.shape:
            raise ValueError(f"key must have the shape of query {tuple(Q.shape)}, got {tuple(K.shape)}")
        if V.shape[0] != Q.shape[0]:
            raise ValueError(f"value must have H = {Q.shape[0]} heads like query, got shape {tuple(V.shape)}")
        if output is None:
            if V.shape[1] != d:
                raise ValueError(
                    f"value maps R^{d} to R^{V.shape[1]}: pass output (H, {d}, {V.shape[1]}) back to R^{d}"
                )
            O = None
        else:
            O = _as_heads("output", output, None, "d, h_v")  # (H, d, h_v)
            if O.shape != (V.shape[0], d, V.shape[1]):
                raise ValueError(
                    f"output must have shape (H, d, h_v) = {(V.shape[0], d, V.shape[1])}, got {tuple(O.shape)}"
                )
        if method not in ("auto", "pairwise", "fourier"):
            raise ValueError(f"method must be 'auto', 'pairwise' or 'fourier', got {method!r}")
        self.query, self.key = Q, K  # (H, h, d) each
        self.value, self.output = V, O  # (H, h_v, d), (H, d, h_v) or None
        self.inverse_temperature = check_nonnegative("inverse_temperature", inverse_temperature)
        self.temperature = check_nonnegative("temperature", temperature)
        self.normalized, self.causal, self.sphere = bool(normalized), bool(causal), bool(sphere)
        self.projection = Sphere() if sphere else None
        self._sigma = math.sqrt(2.0 * self.temperature)
        self._identity = False
        self.method = method
        self._modes: np.ndarray | None = None
        self._modes_at: float | None = None  # the β the table was computed at

    @classmethod
    def identity(
        cls, d: int, *, inverse_temperature: float = 1.0, dtype: torch.dtype = torch.float64, **kwargs: Any
    ) -> SelfAttentionDynamics:
        r"""$Q = K = V = I_d$, one head: the model of Geshkovski et al. ($\dot{x}_i = P_{x_i} \sum_j A_{ij} x_j$).

        Args:
            d: the token dimension.
            inverse_temperature: the attention's inverse temperature.
            dtype: of the weights.
            **kwargs: the other options of [`SelfAttentionDynamics`][meanfield.nn.tokens.SelfAttentionDynamics] (``sphere``, ``normalized``, …).
        """
        eye = torch.eye(check_int("d", d), dtype=dtype)  # (d, d)
        system = cls(eye, eye, eye, inverse_temperature=inverse_temperature, **kwargs)
        system._identity = True
        if system.method == "fourier":
            system.resolved_method(0)  # refuses a Fourier path off the circle now, not at the first step
        return system

    @property
    def d(self) -> int:
        return self.query.shape[-1]

    @property
    def n_heads(self) -> int:
        return self.query.shape[0]

    @property
    def _fourier_applies(self) -> bool:
        return self._identity and self.d == 2 and self.sphere

    def resolved_method(self, n: int) -> str:
        """The method used for ``n`` tokens: ``"fourier"`` or ``"pairwise"``."""
        if self.method == "fourier":
            if not self._fourier_applies:
                raise ValueError(
                    "method='fourier' needs identity weights on the circle (SelfAttentionDynamics.identity(2, sphere=True))"
                )
            return "fourier"
        return "fourier" if self.method == "auto" and self._fourier_applies and n >= 256 else "pairwise"

    # --- the velocity -------------------------------------------------------------------------------------------
    def velocity(self, x: torch.Tensor) -> torch.Tensor:
        r"""$V(x)_i = 1/H \sum_m O_m \sum_j A^m_{ij} V_m x_j$ before the tangent projection: ``(B, n, d) -> (B, n, d)``."""
        if self.resolved_method(x.shape[1]) == "fourier":
            return self._velocity_fourier(x)
        return self._velocity_pairwise(x)

    def _weights_like(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ws = [self.query, self.key, self.value] + ([self.output] if self.output is not None else [])
        return tuple(w.to(dtype=x.dtype, device=x.device) for w in ws)

    def _velocity_pairwise(self, x: torch.Tensor) -> torch.Tensor:
        B, n, d = x.shape
        weights = self._weights_like(x)
        Q, K, V = weights[:3]
        H = Q.shape[0]
        q = torch.einsum("bnd,hkd->bhnk", x, Q)  # (B, H, n, h)
        k = torch.einsum("bnd,hkd->bhnk", x, K)  # (B, H, n, h)
        v = torch.einsum("bnd,hkd->bhnk", x, V)  # (B, H, n, h_v)
        out = torch.empty(B, H, n, v.shape[-1], dtype=x.dtype, device=x.device)  # (B, H, n, h_v)
        c = max(1, _CHUNK_ELEMENTS // max(1, B * H * n))
        cols = torch.arange(n, device=x.device)  # (n,)
        for s in range(0, n, c):
            e = min(n, s + c)
            logits = self.inverse_temperature * (q[:, :, s:e] @ k.mT)  # (B, H, c, n)
            if self.causal:
                future = cols[None, :] > torch.arange(s, e, device=x.device)[:, None]  # (c, n)
                logits = logits.masked_fill(future, -math.inf)
            top = logits.amax(-1, keepdim=True)  # (B, H, c, 1)
            w = (logits - top).exp_()  # (B, H, c, n)
            mixed = w @ v  # (B, H, c, h_v)
            if self.normalized:
                mixed /= w.sum(-1, keepdim=True)
            else:
                mixed *= top.exp() / n
            out[:, :, s:e] = mixed
        if self.output is not None:
            out = out @ weights[3].mT[None]  # (B, H, n, d)
        return out.mean(1)  # (B, n, d)

    def _fourier_weights(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        r"""$I_k(\beta)/I_0(\beta)$ for ``k = 0 … K`` (exponentially scaled Bessel functions: no overflow), computed
        once per β (a β changed after a step gets its own table)."""
        if self._modes is None or self._modes_at != self.inverse_temperature:
            b = self._modes_at = self.inverse_temperature  # β
            K = 1
            while K < 10_000 and (
                K * special.ive(K, b) / special.ive(0, b) > 1e-15 if b > 0 else K < 1
            ):
                K += 1
            self._modes = special.ive(np.arange(K + 1), b) / special.ive(0, b)  # (K+1,)
        return torch.as_tensor(self._modes, dtype=dtype, device=device)

    def _velocity_fourier(self, x: torch.Tensor) -> torch.Tensor:
        r"""Circle, identity weights, from the Fourier sums $S_k = \sum_j e^{ik\theta_j}$ (prefix sums if causal):

        $$
        \begin{aligned}
        \sum_j e^{\beta \cos(\theta_i-\theta_j)} e^{i\theta_j} = \sum_{k\in Z} I_{|k|}(\beta) e^{ik\theta_i} S_{1-k}, \\
        Z_i = \sum_j e^{\beta \cos(\theta_i-\theta_j)} = I_0(\beta) S_0 + 2 \sum_{k\ge 1} I_k(\beta) \operatorname{Re}(e^{ik\theta_i} \operatorname{conj}(S_k)),
        \end{aligned}
        $$

        with $S_{-k} = \operatorname{conj}(S_k)$; in units of $I_0(\beta)$, modes in blocks ($B\cdot n\cdot 8$ complex numbers at a time).
        """
        B, n, _ = x.shape
        r = self._fourier_weights(x.dtype, x.device)  # (K+1,) I_k/I_0
        K = r.shape[0] - 1
        z = torch.complex(x[..., 0], x[..., 1])  # (B, n) e^{iθ}
        z = z / z.abs()
        block = 8
        powers = torch.cat(
            (torch.ones_like(z)[..., None], z[..., None].expand(B, n, block + 1)), -1
        )  # (B, n, b+2)
        ladder = powers.cumprod(-1)  # (B, n, b+2) z^0 … z^{b+1}
        z_block = ladder[..., block]  # z^b: from one block to the next
        start = z.conj()  # z^{k0−1}
        num = torch.zeros(
            B, n, dtype=torch.complex128 if x.dtype == torch.float64 else torch.complex64, device=x.device
        )
        zsum = torch.zeros(B, n, dtype=x.dtype, device=x.device)  # (B, n)

        for k0 in range(0, K + 1, block):
            k1 = min(K, k0 + block - 1)
            e = (start[..., None] * ladder)[..., : k1 - k0 + 3]  # (B, n, b+2) e^{ikθ_j}, k = k0−1 … k1+1
            start = start * z_block
            S = e.cumsum(1) if self.causal else e.sum(1, keepdim=True)  # (B, n | 1, b+2) S_k
            e_k, S_lo, S_k, S_hi = e[..., 1:-1], S[..., :-2], S[..., 1:-1], S[..., 2:]  # modes k, k−1, k, k+1
            rk = r[k0 : k1 + 1]  # (b,)
            if k0 == 0:  # k = 0: I_0·S_1 once; the k ≥ 1 terms below count k and −k
                num += rk[0] * S_hi[..., 0].expand(B, n)
                zsum += rk[0] * S_k[..., 0].real.expand(B, n)
                e_k, S_k, S_lo, S_hi, rk = e_k[..., 1:], S_k[..., 1:], S_lo[..., 1:], S_hi[..., 1:], rk[1:]
            num += (rk * (e_k * S_lo.conj() + e_k.conj() * S_hi)).sum(-1)  # (B, n)
            zsum += 2 * (rk * (e_k * S_k.conj()).real).sum(-1)  # (B, n)
        if self.normalized:
            num = num / zsum
        else:
            num = num * (float(special.i0(self.inverse_temperature)) / n)
        return torch.stack((num.real, num.imag), -1)  # (B, n, 2)

    # --- ParticleSystem -----------------------------------------------------------------------------------------
    def drift(self, t: float, x: torch.Tensor) -> torch.Tensor:
        """$P_{x_i} V(x)_i$: ``(B, n, d) -> (B, n, d)``."""
        v = self.velocity(x)  # (B, n, d)
        if self.sphere:
            v = v - (v * x).sum(-1, keepdim=True) * x  # (B, n, d) tangent part
        return v

    def diffusion(self, t: float, x: torch.Tensor) -> float:
        return self._sigma

    def __repr__(self) -> str:
        kind = "SA" if self.normalized else "USA"
        return (
            f"SelfAttentionDynamics({kind}, H={self.n_heads}, d={self.d}, "
            f"inverse_temperature={self.inverse_temperature:g}, causal={self.causal}, "
            f"sphere={self.sphere}, temperature={self.temperature:g})"
        )


# --- the network's depth view ---------------------------------------------------------------------------------------
def attention_system(layer: torch.nn.Module, **kwargs: Any) -> SelfAttentionDynamics:
    r"""The ODE whose Euler step of size Δt is the residual block $x + \Delta t\cdot\mathrm{layer}(x)$ of a frozen attention layer.

    For [`ParticleAttention`][meanfield.nn.attention.ParticleAttention] (M heads of width h, $Y = 1/M \sum_m \operatorname{softmax}(q k^\top/\sqrt{h}) v W_O^m$):
    $Q_m = W_Q^{m\top}$, $K_m = W_K^{m\top}$, $V_m = W_V^{m\top}$, $O_m = W_O^{m\top}$, $\beta = 1/\sqrt{h}$, SA, causal iff the layer
    is [`CausalParticleAttention`][meanfield.nn.attention.CausalParticleAttention], tokens in R^d. The weights are copied (detached).

    Args:
        layer: a ``ParticleAttention`` (or ``CausalParticleAttention``).
        **kwargs: passed to [`SelfAttentionDynamics`][meanfield.nn.tokens.SelfAttentionDynamics] (e.g. ``temperature``, ``sphere``); ``inverse_temperature`` and
            ``causal`` override the layer's (e.g. ``inverse_temperature`` $= r^2/\sqrt{h}$ for tokens held at radius r on the sphere).
    """
    from .attention import ParticleAttention

    if not isinstance(layer, ParticleAttention):
        raise TypeError(f"layer must be a meanfield.nn.ParticleAttention, got {type(layer).__name__}")
    W = layer.W_QKV.detach().clone()  # (M, 3, h, d)
    O = layer.W_O.detach().clone().mT  # (M, d, h)
    kwargs = {"inverse_temperature": 1.0 / math.sqrt(layer.d_head), "causal": layer.is_causal, **kwargs}
    return SelfAttentionDynamics(W[:, 0], W[:, 1], W[:, 2], O, **kwargs)


def attention_layer(system: SelfAttentionDynamics) -> torch.nn.Module:
    r"""The frozen [`ParticleAttention`][meanfield.nn.attention.ParticleAttention] whose output is ``system``'s velocity (the inverse of
    [`attention_system`][meanfield.nn.tokens.attention_system]): ``layer(x) == system.velocity(x)`` for tokens in R^d.

    β is folded into the queries ($W_Q = \beta\cdot\sqrt{h}\cdot Q$); query/key and value widths are padded with zero rows to one
    head width $h = \max(h_{qk}, h_v)$ (zero rows change no dot product and no output). USA and sphere systems
    have no layer: a layer is softmax attention in R^d.
    """
    from .attention import CausalParticleAttention, ParticleAttention

    if not isinstance(system, SelfAttentionDynamics):
        raise TypeError(f"system must be a SelfAttentionDynamics, got {type(system).__name__}")
    if not system.normalized or system.sphere:
        raise ValueError(
            "only normalised (softmax) attention in R^d is a ParticleAttention layer: normalized=True, sphere=False"
        )
    Q, K, V = system.query, system.key, system.value  # (H, h, d), (H, h, d), (H, h_v, d)
    H, h_qk, d = Q.shape
    eye = torch.eye(d, dtype=V.dtype).expand(H, d, d)  # (H, d, d)
    O = system.output if system.output is not None else eye  # (H, d, h_v)
    h = max(h_qk, V.shape[1])
    cls = CausalParticleAttention if system.causal else ParticleAttention
    layer = cls(d, H, h, dtype=Q.dtype)

    def pad(w: torch.Tensor) -> torch.Tensor:  # (H, r, d) -> (H, h, d)
        return torch.nn.functional.pad(w, (0, 0, 0, h - w.shape[1]))

    with torch.no_grad():
        layer.W_QKV.copy_(
            torch.stack([pad(Q * (system.inverse_temperature * math.sqrt(h))), pad(K), pad(V)], 1)
        )  # (H, 3, h, d)
        layer.W_O.copy_(pad(O.mT.contiguous()))  # (H, h, d)
    return layer.requires_grad_(False)


def depth_flow(layer: torch.nn.Module, x: torch.Tensor, *, depth: int, T: float = 1.0) -> torch.Tensor:
    r"""Tokens through ``depth`` residual copies of one attention layer, $x \leftarrow x + (T/L)\cdot\mathrm{layer}(x)$: the network
    whose $L \to \infty$ limit is the token ODE up to time ``T`` (Euler with $\Delta t = T/L$). ``(B, n, d) -> (B, n, d)``."""
    L = check_int("depth", depth)
    dt = check_finite("T", T) / L
    with torch.no_grad():
        for _ in range(L):
            x = x + dt * layer(x)  # (B, n, d)
    return x


# --- the mean-field linearisation on the circle ---------------------------------------------------------------------
def growth_rate(
    k: int | np.ndarray, inverse_temperature: float, *, normalized: bool = True
) -> np.float64 | np.ndarray:
    r"""λ_k: the growth rate of Fourier mode k of the token law on the circle near the uniform law (identity weights).

    $\lambda_k = k^2 I_k(\beta)/\beta$ (USA) and $\lambda_k/I_0(\beta)$ (SA); at β = 0, $\lambda_1 = 1/2$ (SA and USA), $\lambda_k = 0$ for k ≥ 2.
    A scalar ``k`` gives a NumPy scalar (at every β), an array of modes an array of the same shape.
    """
    k = np.asarray(k, dtype=float)
    b = check_nonnegative("inverse_temperature", inverse_temperature)  # β
    if b == 0:
        rate = np.where(k == 1, 0.5, 0.0)
    else:
        ratio = special.ive(k, b) / special.ive(0, b)  # I_k/I_0
        rate = k**2 * ratio / b
        rate = rate if normalized else rate * special.i0(b)
    return np.asarray(rate, dtype=float)[()]  # 0-d → np.float64 at β = 0 too


def fastest_mode(inverse_temperature: float) -> int:
    r"""$k^* = \operatorname{argmax}_k k^2 I_k(\beta)$: the fastest-growing mode (the same for SA and USA); ≈ sqrt(2β) for large β."""
    ks = np.arange(1, int(4 * math.sqrt(max(inverse_temperature, 1.0))) + 8)
    return int(ks[np.argmax(growth_rate(ks, inverse_temperature))])


# --- measures of a token cloud ----------------------------------------------------------------------------------------
def fourier_modes(x: torch.Tensor, ks: int | list[int] | torch.Tensor) -> torch.Tensor:
    r"""Empirical Fourier modes $\hat{c}_k = 1/n \sum_j e^{ik\theta_j}$ of tokens on the circle: ``(B, n, 2) -> (B, K)`` complex."""
    if x.shape[-1] != 2:
        raise ValueError(f"fourier_modes needs tokens on the circle (d = 2), got shape {tuple(x.shape)}")
    ks = torch.as_tensor([ks] if isinstance(ks, int) else ks, dtype=x.dtype, device=x.device)  # (K,)
    theta = torch.atan2(x[..., 1], x[..., 0])  # (B, n)
    angles = theta[..., None] * ks  # (B, n, K)
    return torch.polar(torch.ones_like(angles), angles).mean(1)  # (B, K)


def mean_inner_product(x: torch.Tensor) -> torch.Tensor:
    r"""$1/n^2 \sum_{ij} \langle x_i, x_j\rangle = |\bar{x}|^2$ of unit tokens (1 at a single cluster): ``(B, n, d) -> (B,)``.

    For unit tokens $1 - |\bar{x}|^2 = 1/(2n^2) \sum_{ij} |x_i - x_j|^2$: half the mean squared pairwise distance.
    """
    return x.mean(1).square().sum(-1)  # (B,)


def count_clusters(x: torch.Tensor, radius: float = 0.1) -> torch.Tensor:
    r"""Number of clusters per replica: connected components of the graph $|x_i - x_j| < \text{ radius }$: ``(B, n, d) -> (B,)``.

    Single linkage through an $n \times n$ distance matrix per replica (meant for the n ≤ a few thousand tokens of
    a figure or a check; subsample a larger cloud).
    """
    check_finite("radius", radius)
    counts = []
    for cloud in x:
        adjacent = (torch.cdist(cloud, cloud) < radius).cpu().numpy()  # (n, n)
        counts.append(connected_components(adjacent, directed=False)[0])
    return torch.tensor(counts)
