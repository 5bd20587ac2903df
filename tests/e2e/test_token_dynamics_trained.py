"""experiments/token_dynamics/trained_lm.py: the attention-only flow of a Transformer's layer is the layer's ODE."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from meanfield.nn.head_metrics import as_particle_model
from meanfield.nn.transformer import TransformerLM, attention_inputs

SCRIPT = Path(__file__).parents[2] / "experiments" / "token_dynamics" / "trained_lm.py"


@pytest.fixture(scope="module")
def trained_lm():
    spec = importlib.util.spec_from_file_location("token_dynamics_trained_lm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("attention", ["mha", "particle"])
def test_one_euler_step_of_the_flow_is_the_network_attention_step(trained_lm, attention):
    """Δt = T = 1: the flow's one Euler step is ``x + Attn(x)`` of the *original* layer (for MHA through its equal
    particle model, W_O^j = H·W_outᵀ[j]); and a flow to T = 0.5 in 4 steps is 4 residual steps of size 1/8."""
    g = torch.Generator().manual_seed(0)
    model = TransformerLM(11, 8, 16, 2, 4, attention, generator=g, dtype=torch.float64).eval()
    idx = torch.randint(0, 11, (3, 8), generator=g)  # (3, 8)
    pm = as_particle_model(model)
    for ell, x0 in enumerate(attention_inputs(model, idx)):
        original = model.blocks[ell].attention
        layer = pm.blocks[ell].attention
        with torch.no_grad():
            step = x0 + original(x0)  # (3, 8, 16)
        states = trained_lm.attention_flow(layer, x0, T=1.0, dt=1.0)  # (2, 3, 8, 16)
        torch.testing.assert_close(states[0], x0)
        torch.testing.assert_close(states[-1], step)
        assert (step - x0).abs().max() > 1e-4  # the layer moves the tokens (else the check is empty)
        x = x0
        with torch.no_grad():
            for _ in range(4):
                x = x + original(x) / 8
        torch.testing.assert_close(trained_lm.attention_flow(layer, x0, T=0.5, dt=0.125)[-1], x)


def test_sphere_system_is_the_flow_at_fixed_radius(trained_lm):
    """For tokens of norm r, the sphere system's drift at u = x/r is ``P_u V(x)/r`` (β' = β r²): the rescaling is
    right (a wrong power of r changes the attention pattern and fails)."""
    from meanfield.nn import CausalParticleAttention
    from meanfield.nn.tokens import attention_system

    g = torch.Generator().manual_seed(1)
    layer = CausalParticleAttention(6, 3, 4, generator=g, dtype=torch.float64)
    x = torch.randn(2, 5, 6, generator=g, dtype=torch.float64)
    r = 3.0
    x = r * x / x.norm(dim=-1, keepdim=True)  # (2, 5, 6) on the sphere of radius r
    system = attention_system(layer)
    sphere, r2 = trained_lm.sphere_system(system, x)
    assert r2 == pytest.approx(r * r)
    u = x / r
    v = system.velocity(x)  # (2, 5, 6)
    expected = (v - (v * u).sum(-1, keepdim=True) * u) / r
    torch.testing.assert_close(sphere.drift(0.0, u), expected)
