"""meanfield.nn.free_energy: the free energy of a network's particle layers (loss + λ/2·E|θ|² − β·H per layer)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import meanfield as mf
from meanfield.metrics import gaussian_entropy_bias
from meanfield.nn import FeatureParticles, free_energy
from meanfield.optim.layers import param_groups_for
from meanfield.studies.stats import Z


def _layer(M: int = 400, seed: int = 0, **kw) -> FeatureParticles:
    return FeatureParticles(
        1, M, "identity", generator=torch.Generator().manual_seed(seed), dtype=torch.float64, **kw
    )


def test_gaussian_particles_have_the_closed_form_free_energy():
    # 200 layers of M = 400 particles θ_i = (a_i, w_i) ~ N(0, S) exactly. Each replica's Ĥ has the exact mean
    # H + b_M (b_M the Wishart bias, −0.0038 nats), so mean Ĥ is within Z·SE of it (SE 0.0035 measured: an entropy
    # error of 0.018 nats is detected); F = loss + λ/2·tr S − β(H + b_M) likewise (SE 0.0015: an F error of 0.0074).
    # Controls: H off by 0.025 nats, and 1.2β.
    S = torch.tensor([[1.0, 0.4], [0.4, 0.5]], dtype=torch.float64)
    beta, lam, loss, M, B = 0.3, 0.7, 1.25, 400, 200
    values, entropies = [], []
    for seed in range(B):
        f = _layer(M=M, seed=seed)
        theta = torch.randn(M, 2, generator=torch.Generator().manual_seed(100 + seed), dtype=torch.float64)
        theta = theta @ torch.linalg.cholesky(S).T  # (M, 2)
        with torch.no_grad():
            f.a.copy_(theta[:, 0]), f.w.copy_(theta[:, 1:])
        opt = mf.Langevin(param_groups_for(f), lr=0.01, beta=beta, weight_decay=lam, seed=seed)
        F = free_energy(f, loss, opt, entropy="gaussian")
        values.append(F.value)
        entropies.append(F.layers[0].entropy)
    values, entropies = torch.tensor(values), torch.tensor(entropies)
    bias = gaussian_entropy_bias(M, 2)  # E Ĥ − H
    H = 0.5 * (2 * math.log(2 * math.pi * math.e) + float(torch.logdet(S)))
    h_tolerance = Z * float(entropies.std()) / math.sqrt(B)
    assert abs(float(entropies.mean()) - (H + bias)) <= h_tolerance <= 0.02
    assert abs(float(entropies.mean()) - (H + bias + 0.025)) > h_tolerance
    exact = loss + 0.5 * lam * float(S.trace()) - beta * (H + bias)
    tol = Z * float(values.std()) / math.sqrt(B)
    assert abs(float(values.mean()) - exact) <= tol <= 0.008
    wrong = loss + 0.5 * lam * float(S.trace()) - 1.2 * beta * (H + bias)
    assert abs(float(values.mean()) - wrong) > tol


def test_the_optimizer_sets_beta_weight_decay_and_convention_per_layer():
    f = _layer()
    H = float(mf.metrics.entropy(f.particle_features(), method="gaussian").value)
    theta2 = float(f.particle_features().square().sum(1).mean())
    plain = free_energy(f, 2.0, 0.1, entropy="gaussian")
    assert plain.value == pytest.approx(2.0 - 0.1 * H, abs=1e-12) and plain.penalty == 0.0
    opt = mf.Langevin(param_groups_for(f), lr=0.01, beta=0.1, weight_decay=0.5, seed=0)
    F = free_energy(f, torch.tensor(2.0, requires_grad=True), opt, entropy="gaussian")
    assert F.value == pytest.approx(2.0 + 0.25 * theta2 - 0.1 * H, abs=1e-12)
    assert F.layers[0].beta == 0.1 and F.layers[0].D == 2 and F.layers[0].M == 400
    loss_convention = mf.Langevin(
        param_groups_for(f, temperature_convention="loss"), lr=0.01, beta=0.1, seed=0
    )
    assert free_energy(f, 2.0, loss_convention).layers[0].beta == pytest.approx(0.1 * 400)  # β_s·M
    quiet = mf.Langevin(param_groups_for(f, noise=False), lr=0.01, beta=0.1, seed=0)
    assert free_energy(f, 2.0, quiet).value == 2.0  # no noise: β = 0, no entropy term
    assert "\n" not in repr(F) and repr(F).startswith("NetworkFreeEnergy: F ")


def test_a_model_with_two_particle_layers_sums_their_terms():
    model = nn.Sequential(_layer(seed=1), _layer(seed=2))
    F = free_energy(model, 0.0, 0.2, entropy="gaussian")
    assert [t.name for t in F.layers] == ["0", "1"]
    assert F.value == pytest.approx(-0.2 * sum(t.entropy for t in F.layers), abs=1e-12)


@pytest.mark.parametrize(
    "model, beta, message",
    [
        (nn.Linear(2, 1), 0.1, "no particle layer"),
        (FeatureParticles(3, 10, "relu", sphere=True), 0.1, "sphere"),
        (_layer(), -1.0, "beta must be a finite number ≥ 0"),
        (_layer(), "hot", "beta must be a number ≥ 0 or the Langevin optimizer"),
        (_layer(), mf.Langevin([torch.nn.Parameter(torch.zeros(3))], lr=0.1, beta=0.1, seed=0), "does not hold"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(model, beta, message):
    with pytest.raises((TypeError, ValueError)) as info:
        free_energy(model, 1.0, beta)
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match="loss must be finite"):
        free_energy(_layer(), math.nan, 0.1)


def test_k_reaches_the_entropy_estimator():
    """``k`` is the k-NN estimator's neighbour order: F's entropy term is ``entropy(θ, method="knn", k=…)``'s of
    the layer's particle features, exactly, and k = 1 and k = 5 give different values (so a dropped or
    misnamed k shows)."""
    from meanfield.metrics.information import entropy

    layer = _layer(M=300, seed=3)
    theta = layer.particle_features().to(torch.float64)
    values = {}
    for k in (1, 5):
        F = free_energy(layer, 0.0, 1.0, entropy="knn", k=k)
        h = entropy(theta, method="knn", k=k)
        assert F.layers[0].entropy == pytest.approx(float(h.value), rel=1e-12)
        values[k] = F.layers[0].entropy
    assert abs(values[1] - values[5]) > 1e-3


def test_a_particle_layer_without_a_sphere_attribute_is_measured():
    """Particle layers other than FeatureParticles (the attention heads) have no ``sphere`` attribute: the check
    for particles on a sphere must not require one. Measured with the k-NN estimator (M = 6 heads of D = 32
    numbers: too few for the Gaussian one)."""
    from meanfield.nn.attention import CausalParticleAttention

    heads = CausalParticleAttention(4, 6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert not hasattr(heads, "sphere")
    F = free_energy(heads, 1.0, 0.1, entropy="knn", k=1)
    assert F.layers[0].M == 6 and math.isfinite(F.value)


def test_the_sphere_refusal_says_why():
    with pytest.raises(ValueError) as info:
        free_energy(FeatureParticles(3, 10, "relu", sphere=True), 1.0, 0.1)
    assert str(info.value) == (
        "layer 'model' keeps its particles on a sphere (sphere=True): they have no density on R^D, so their "
        "entropy (and F) is not defined there"
    )


def test_a_sharded_layer_is_refused_in_one_line():
    # a layer that holds rows 0–4 of 10 (meanfield.nn.sharded marks it so): its entropy would be that of half the
    # particles; control: the same layer unmarked is measured
    from meanfield.nn.sharded import ParticleShard

    f = _layer(M=5)
    assert free_energy(f, 1.0, 0.1, entropy="gaussian").layers[0].M == 5
    f.particle_shard = ParticleShard(0, 5, 10)
    with pytest.raises(ValueError, match=r"^layer 'model' holds only this process's rows of its particles .*one process first$"):
        free_energy(f, 1.0, 0.1)


@pytest.mark.parametrize("convention", ["mean_field", "loss"])
def test_a_group_without_the_mean_field_scaling_is_read_as_the_same_chain_with_it(convention):
    # Without the factor M the step is θ ← θ − lr'(∇L + λ'θ) + sqrt(2β'lr')ξ; at lr' = M·lr, λ' = λ/M, β' = β/M
    # (β_s unchanged under the "loss" convention, whose noise is s·β_s) it is, draw for draw, the step with the
    # factor at (lr, λ, β): one chain, one law exp(−M(L + λ/2·E|θ|²)/β), so one F. Checked on the chains
    # themselves (20 steps from one state and one noise seed, float64), then on F; control: the group's own
    # (β', λ') in F, which the code read before, is another number.
    M, lr, lam, beta = 50, 0.01, 0.7, 0.2
    x = torch.tensor([[1.0], [-1.0]], dtype=torch.float64)
    models, optimizers = [], []
    for scaled in (True, False):
        f = _layer(M=M, seed=3)
        sdg = beta if convention == "loss" or scaled else beta / M
        options = dict(mean_field_scaling=scaled, temperature_convention=convention)
        opt = mf.Langevin(param_groups_for(f, **options), lr=lr if scaled else M * lr,
                          beta=sdg, weight_decay=lam if scaled else lam / M, seed=11)  # fmt: skip
        for _ in range(20):
            loss = 0.5 * (f(x) - 2 * x[:, 0]).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        models.append(f)
        optimizers.append(opt)
    torch.testing.assert_close(models[1].particle_features(), models[0].particle_features(), rtol=1e-12, atol=1e-12)
    loss = float(0.5 * (models[0](x).detach() - 2 * x[:, 0]).square().mean())
    with_scaling, without = (free_energy(m, loss, o, entropy="gaussian") for m, o in zip(models, optimizers))
    assert without.layers[0].beta == pytest.approx(with_scaling.layers[0].beta, rel=1e-12)
    assert without.layers[0].weight_decay == pytest.approx(lam, rel=1e-12)
    assert without.value == pytest.approx(with_scaling.value, rel=1e-12)
    group_own = without.loss + without.penalty / M - optimizers[1].param_groups[0]["beta"] * without.layers[0].entropy
    assert abs(group_own - with_scaling.value) > 0.01
