r"""
# The free energy along a run

*Stub: the lead fills this example once `meanfield.metrics.entropy` and `system.free_energy` land.*

Mean-field Langevin dynamics is the Wasserstein gradient flow of the free energy
$\mathcal F(\rho) = \int V\,d\rho + \frac12 \iint W(x - y)\,d\rho(x)\,d\rho(y) + \beta \int \rho \log \rho$,
which decreases along the flow. The example will estimate $\mathcal F(\rho_M)$ along a run (the entropy from
the particles) and compare it with the closed form of the linear system.
"""

import meanfield as mf

print("meanfield", mf.__version__, "- the free-energy API is not in this version yet")
