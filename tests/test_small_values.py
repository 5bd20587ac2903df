"""Values the rest of the suite left unchecked (found by mutation testing, docs/testing.md), module by module.

Each test asserts a value against a hand computation or a second code path: the mean-field task's initial
law, dtype and exact variance; the chain's stability bound; projections' descriptions and type checks; the
shipped configurations' listing; the noise sources' draws against torch's own generator calls; error messages
word for word.
"""

from __future__ import annotations

import math

import pytest
import torch

from meanfield.drift.potentials import DoubleWell, Quadratic
from meanfield.drift.projections import Projection, Sphere, projection_from_dict
from meanfield.nn.cloud import ParticleCloud
from meanfield.seeds import derive_seed
from meanfield.stepping.brownian import BrownianIncrements, GaussianNoise, RademacherNoise
from meanfield.tasks.mean_field import MEAN_FIELD, MeanFieldData, MeanFieldModel, stationary_variance

# -- the mean_field task ------------------------------------------------------------------------------------


def _build(model: MeanFieldModel, *, seed: int = 5, dtype=torch.float64):
    return MEAN_FIELD.build(
        MeanFieldData(), model, batch_size=1, seed=seed, device=torch.device("cpu"), dtype=dtype
    )


def test_the_task_starts_from_the_cloud_its_seed_names_in_the_dtype_asked():
    model = MeanFieldModel(n_particles=16, d=3, a=1.5, k=0.5, init_scale=2.0)
    experiment = _build(model, seed=5)
    expected = ParticleCloud(
        16, 3, Quadratic(1.5), 0.5, init_scale=2.0,
        generator=torch.Generator().manual_seed(derive_seed(5, "init")), dtype=torch.float64,
    )  # fmt: skip
    assert experiment.model.x.dtype == torch.float64
    assert torch.equal(experiment.model.x, expected.x)
    other = _build(model, seed=6)  # negative control: another seed, another cloud
    assert not torch.equal(other.model.x, expected.x)
    assert _build(model, dtype=torch.float32).model.x.dtype == torch.float32
    assert experiment.description == "ParticleCloud(M=16, d=3, V=Quadratic(a=1.5), W = k/2|z|², k=0.5)"


def test_the_exact_variance_is_reported_for_the_quadratic_chain_only():
    quadratic = _build(MeanFieldModel(n_particles=8, d=2, a=1.0, k=1.0, beta=0.5, eta=0.1)).evaluate()
    assert quadratic["variance_exact"] == pytest.approx(0.5 / (2.0 * (1 - 0.1 * 2.0 / 2)), rel=1e-15)
    assert quadratic["variance_ratio"] == pytest.approx(quadratic["variance"] / quadratic["variance_exact"])
    well = _build(MeanFieldModel(n_particles=8, d=2, confinement="double_well", beta=0.5, eta=0.1)).evaluate()
    assert "variance_exact" not in well and "variance_ratio" not in well  # no closed form for the double well
    cold = _build(MeanFieldModel(n_particles=8, d=2, beta=0.0, eta=0.1)).evaluate()
    assert "variance_exact" not in cold
    assert repr(DoubleWell()) in _build(MeanFieldModel(confinement="double_well")).description


@pytest.mark.parametrize("eta", [2.0, 2.5, 0.0, -0.1])
def test_the_chain_is_stationary_only_for_a_step_inside_its_stability_bound(eta):
    """η(a + k) must lie in (0, 2): at 2 the chain oscillates for ever, above it diverges."""
    with pytest.raises(ValueError, match=rf"0 < η\(a \+ k\) < 2, got 1.0 and {eta * 1.0}$"):
        stationary_variance(0.5, 0.5, 1.0, eta)
    assert stationary_variance(0.5, 0.5, 1.0, 1.99) == pytest.approx(1.0 / (1.0 * (1 - 1.99 / 2)))


# -- projections ----------------------------------------------------------------------------------------------


class _Halve(Projection):
    def project_(self, x):
        return x.mul_(0.5)

    def __repr__(self):
        return "Halve()"


def test_a_custom_projection_is_described_by_its_class_and_repr():
    assert _Halve().to_dict() == {"kind": "custom", "class": f"{__name__}._Halve", "repr": "Halve()"}
    with pytest.raises(
        ValueError, match=r"owner rebuilds it \(e\.g\. Langevin\.param_groups_for\(model\)\)$"
    ):
        projection_from_dict(_Halve().to_dict())


@pytest.mark.parametrize("dim", [(1, "a"), (0, True), (), "x", 1.5])
def test_sphere_axes_must_be_ints(dim):
    with pytest.raises(TypeError, match="Sphere dim must be an int or a non-empty tuple of ints, got"):
        Sphere(dim=dim)
    assert Sphere(dim=(1, 2)).dim == (1, 2)  # negative control


# -- shipped configurations ------------------------------------------------------------------------------------


def test_describe_reads_description_and_preset_names(tmp_path):
    from meanfield.shipped import describe

    path = tmp_path / "c.toml"
    path.write_text('description = "a test"\n[presets.smoke]\n[presets.full]\n')
    assert describe(path) == ("a test", ["smoke", "full"])
    path.write_text('presets = "not a table"\n')
    assert describe(path) == ("", [])


def test_an_unknown_shipped_name_lists_what_there_is():
    from meanfield.shipped import UnknownConfig, config_path, configs

    with pytest.raises(UnknownConfig) as caught:
        config_path("no-such-config")
    listed = ", ".join(configs()) or "none"
    assert str(caught.value) == (
        f"no configuration file or shipped configuration named 'no-such-config'; shipped: {listed} "
        "(meanfield run --list), or pass the path of a TOML file"
    )


# -- layers' messages -----------------------------------------------------------------------------------------


def test_importance_pruning_names_what_it_needs():
    from meanfield.nn import FeatureParticles

    layer = FeatureParticles(3, 4, "tanh")
    with pytest.raises(
        ValueError,
        match=r"^strategy 'importance' needs X \(layer inputs\) and loss \(a callable: layer output -> scalar\)$",
    ):
        layer.select(2, "importance")


def test_particle_attention_names_its_input_x_in_a_dtype_error():
    from meanfield.nn import ParticleAttention

    layer = ParticleAttention(8, 2)
    with pytest.raises(TypeError, match=r"^X must have the layer's dtype .*convert it with X\.to\(\.\.\.\)"):
        layer(torch.randn(1, 3, 8, dtype=torch.float64))


# -- noise sources ------------------------------------------------------------------------------------------------


def test_sampled_increments_and_areas_are_torchs_draws_in_order_and_dtype():
    dt, shape = 0.25, (2, 3)
    inc = BrownianIncrements.sample(4, shape, dt, generator=torch.Generator().manual_seed(9), levy_area=True)
    g = torch.Generator().manual_seed(9)
    dW = torch.empty(4, *shape, dtype=torch.float64).normal_(0.0, math.sqrt(dt), generator=g)
    H = torch.empty(4, *shape, dtype=torch.float64).normal_(0.0, math.sqrt(dt / 12), generator=g)
    assert inc.H.dtype == torch.float64
    assert torch.equal(inc.increments, dW) and torch.equal(inc.H, H)
    assert not torch.equal(inc.H, dW * math.sqrt(1 / 12))  # negative control: the areas are a second draw


def test_gaussian_noise_draws_the_increment_then_the_area_even_when_the_area_is_asked_first():
    dt = 0.04
    noise = GaussianNoise((3, 2), dt, torch.Generator().manual_seed(2), torch.float64, "cpu")
    H0 = noise.space_time_area(0).clone()
    xi0 = noise.increment(0, math.sqrt(dt)).clone()
    g = torch.Generator().manual_seed(2)
    assert torch.equal(xi0, torch.empty(3, 2, dtype=torch.float64).normal_(0.0, math.sqrt(dt), generator=g))
    assert torch.equal(
        H0, torch.empty(3, 2, dtype=torch.float64).normal_(0.0, math.sqrt(dt / 12), generator=g)
    )


def test_rademacher_draw_into_a_strided_output_equals_the_contiguous_draw():
    def noise():
        return RademacherNoise((4, 5), 0.1, torch.Generator().manual_seed(3), torch.float64, "cpu")

    contiguous = torch.empty(4, 5, dtype=torch.float64)
    noise()._draw(contiguous, 2.0)
    strided = torch.zeros(5, 4, dtype=torch.float64).t()  # (4, 5), not contiguous
    noise()._draw(strided, 2.0)
    assert torch.equal(strided, contiguous)
    assert set(contiguous.unique().tolist()) == {-2.0, 2.0}
    g = torch.Generator().manual_seed(3)  # entry k is bit k mod 8 of byte k // 8
    byte = torch.empty(3, dtype=torch.uint8).random_(0, 256, generator=g)
    bits = [(int(byte[k // 8]) >> (k % 8)) & 1 for k in range(20)]
    assert contiguous.flatten().tolist() == [2.0 * (2 * b - 1) for b in bits]


def test_increments_of_the_wrong_kind_are_named_by_their_type():
    with pytest.raises(ValueError, match=r"shape \(N, \*noise_shape\), got list$"):
        BrownianIncrements([[0.0, 1.0]], 0.1)
    with pytest.raises(ValueError, match=r"got torch.Size\(\[3\]\)$"):
        BrownianIncrements(torch.zeros(3), 0.1)


# -- the background thread ----------------------------------------------------------------------------------------


def test_a_background_task_returns_its_value_or_reraises_its_error_in_a_named_daemon_thread():
    import threading

    from meanfield import _background

    assert _background.submit(lambda a, b: a + b, 2, 3).result() == 5

    def fails():
        raise KeyError("inside the draw")

    pending = _background.submit(fails)
    with pytest.raises(KeyError, match="inside the draw"):
        pending.result()
    with pytest.raises(KeyError):  # asked again: the same outcome
        pending.result()
    workers = [t for t in threading.enumerate() if t.name == "meanfield-draw"]
    assert len(workers) == 1 and workers[0].daemon  # a daemon: it never keeps the interpreter alive


# -- the optimizer's messages ---------------------------------------------------------------------------------------


def test_a_nan_after_an_overflowing_finite_gradient_is_still_found():
    """The norm of a huge finite gradient overflows float32 and is recomputed in float64; the check must go on
    to the next parameter, whose NaN it names."""
    from meanfield.optim import Langevin

    a, b = torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(3))
    opt = Langevin([a, b], lr=1e-3, beta=0.0)
    a.grad = torch.full((4,), 3e38)  # finite; ‖a.grad‖ overflows in float32
    b.grad = torch.tensor([0.0, float("nan"), 0.0])
    with pytest.raises(ValueError) as caught:
        opt.step()
    assert str(caught.value) == (
        "the gradient of parameter 1 (shape (3,)) of param group 0 has 1 non-finite entries (NaN or Inf); "
        "Langevin needs finite gradients (check the loss, lower lr, or clip the gradients). No parameter was "
        "changed."
    )
    assert torch.equal(a.detach(), torch.zeros(4)) and torch.equal(b.detach(), torch.zeros(3))


def test_an_overflowing_step_says_what_to_do():
    from meanfield.optim import Langevin

    p = torch.nn.Parameter(torch.zeros(2))
    opt = Langevin([p], lr=1e30, beta=0.0)
    p.grad = torch.full((2,), 1e20)
    with pytest.raises(ValueError, match=r"lower lr \(the parameters have diverged, or lr is far too large\)\. "
                       r"No parameter was changed\.$"):  # fmt: skip
        opt.step()


def test_the_momentum_warning_says_why_and_what_to_do():
    from meanfield.optim import Langevin

    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.warns(UserWarning, match=r"^Langevin: a group with noise has an Adam drift with momentum β1 > 0: "
                      r"the chain's stationary law is biased .* for the Gibbs law\.$"):  # fmt: skip
        Langevin([p], lr=1e-2, beta=0.1, drift="adam", betas=(0.9, 0.999))


# -- configuration type names -------------------------------------------------------------------------------------


def test_configuration_type_names_are_plain_words():
    import typing

    from meanfield.config import _type_name

    assert _type_name(typing.Literal["sgd", "adam"]) == "one of 'sgd', 'adam'"
    assert _type_name(dict) == "a table" and _type_name(dict[str, int]) == "a table"
    assert _type_name(int | None) == "an integer or nothing (omit the key)"
    assert _type_name(list[float]) == "a list of a number"


# -- feature particles ------------------------------------------------------------------------------------------------


def test_vector_feature_particles_of_one_input_keep_the_particle_axis_first():
    from meanfield.nn import FeatureParticles

    layer = FeatureParticles(3, 4, "tanh", out_features=2)
    x = torch.randn(3)
    out = layer.particle_outputs(x)  # (M, k) for a single input (d_in,)
    assert out.shape == (4, 2)
    expected = torch.tanh(layer.w @ x + (layer.b if layer.b is not None else 0))[:, None] * layer.a  # (M, k)
    assert torch.allclose(out, expected, atol=1e-6)
