r"""Stepping: one step of every particle, and whole paths.

$\theta_i \leftarrow \Pi(\theta_i - \eta\,\nabla_i + \sqrt{2\beta_t\eta}\,\xi_i)$ (Euler–Maruyama), every torchsde method
and the kinetic splittings:

- [`brownian`][meanfield.stepping.brownian]: the Brownian increments, reproducible per replica;
- [`solvers`][meanfield.stepping.solvers]: Euler–Maruyama, torchsde's methods, BAOAB/OBABO/ABOBA (with their orders);
- [`simulate`][meanfield.stepping.simulate]: a path of a [`ParticleSystem`][meanfield.drift.systems.ParticleSystem] into a
  [`Trajectory`][meanfield.stepping.simulate.Trajectory];
- [`richardson`][meanfield.stepping.richardson]: Richardson extrapolation in the step;
- [`sharded`][meanfield.stepping.sharded]: the particles split over torch.distributed ranks;
- [`captured`][meanfield.stepping.captured]: blocks of steps compiled by ``torch.compile``.

Imports: the drift ([`meanfield.drift`][meanfield.drift]) and the base modules; the layers above (metrics, studies,
runs) may import from here.
"""
