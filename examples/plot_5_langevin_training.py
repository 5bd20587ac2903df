r"""
# Langevin training of a small network

A two-layer mean-field network $f(x) = \frac1M \sum_i a_i\,\sigma(w_i \cdot x)$ is a cloud of $M$ particles
$\theta_i = (a_i, w_i)$ (`meanfield.nn.FeatureParticles`). `meanfield.optim.Langevin` steps them by
$$\theta_i \leftarrow \theta_i - \eta\, M\, \partial L/\partial\theta_i + \sqrt{2\beta\eta}\,\xi_i,$$
the Euler–Maruyama step of mean-field Langevin dynamics driven by the loss' gradients ($M\,\partial
L/\partial\theta_i$ is the Wasserstein gradient). With $\beta = 0$ it is gradient descent. Here: a single-index
teacher $y = \mathrm{relu}(w^* \cdot x)$ in $d = 10$, 512 training points, full-batch steps.
"""

import torch

from meanfield.nn import FeatureParticles
from meanfield.optim import Langevin
from meanfield.studies.plotting import figure

torch.manual_seed(0)
d, n = 10, 512
w_star = torch.nn.functional.normalize(torch.randn(d), dim=0)
x_train, x_test = torch.randn(n, d), torch.randn(2048, d)
y_train, y_test = torch.relu(x_train @ w_star), torch.relu(x_test @ w_star)


def train(beta, steps=300, lr=0.05, M=64):
    model = FeatureParticles(d, M, "relu", A=4.0, generator=torch.Generator().manual_seed(1))
    opt = Langevin(Langevin.param_groups_for(model), lr=lr, beta=beta, seed=2)
    train_loss, test_loss = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = 0.5 * (model(x_train) - y_train).pow(2).mean()
        loss.backward()
        opt.step()
        train_loss.append(loss.item())
        with torch.no_grad():
            test_loss.append(0.5 * (model(x_test) - y_test).pow(2).mean().item())
    alignment = (
        torch.nn.functional.normalize(model.w.detach(), dim=1) @ w_star
    ).abs()  # (M,): |cos(w_i, w*)|
    return train_loss, test_loss, alignment


runs = {beta: train(beta) for beta in (0.0, 1e-3, 1e-2)}
for beta, (tr, te, al) in runs.items():
    print(f"β = {beta:g}: train {tr[-1]:.4f}, test {te[-1]:.4f}, median |cos(w_i, w*)| {al.median():.3f}")

# %%
fig, (left, right) = figure(ncols=2, width=3.75, height=3.0)
for beta, (tr, te, al) in runs.items():
    (line,) = left.plot(te, label=f"β = {beta:g}")
    left.plot(tr, "--", color=line.get_color(), lw=0.8)
    right.hist(al.numpy(), bins=20, range=(0, 1), histtype="step", label=f"β = {beta:g}")
left.set_yscale("log")
left.set_xlabel("step")
left.set_ylabel("loss (test solid, train dashed)")
left.legend()
right.set_xlabel(r"$|\cos(w_i, w^*)|$")
right.set_ylabel("particles")
fig.tight_layout()
