r"""The drift: what moves the particles.

A particle system is a drift and a diffusion, $d\theta = -\nabla(\delta L/\delta\rho)(\theta)\,dt + \sqrt{2\beta_t}\,dW$:

- [`potentials`][meanfield.drift.potentials]: confinements $V$ and interactions $W$ (energies and forces);
- [`pairwise`][meanfield.drift.pairwise]: the $O(M^2)$ pair sums, chunked;
- [`projections`][meanfield.drift.projections]: $\Pi$ after a step (a box, the sphere);
- [`schedules`][meanfield.drift.schedules]: $\beta_t$ and step sizes over time;
- [`systems`][meanfield.drift.systems]: [`MeanFieldLangevin`][meanfield.drift.systems.MeanFieldLangevin], [`SDE`][meanfield.drift.systems.SDE] and the
  [`ParticleSystem`][meanfield.drift.systems.ParticleSystem] interface every solver steps;
- [`phase_space`][meanfield.drift.phase_space]: the kinetic (underdamped) system in $(x, v)$;
- [`resolution`][meanfield.drift.resolution]: when a step resolves the drift (stability bounds, collapse of attractive
  singular kernels).

Imports: only the package's base modules (``meanfield._checks``, ``meanfield._replicas``); everything above
(stepping, metrics, studies, layers, runs) may import from here.
"""
