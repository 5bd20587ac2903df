r"""Studies: experiments on the law, their statistics and their figures.

- [`in_memory`][meanfield.studies.in_memory]: [`sweep`][meanfield.studies.in_memory.sweep] and
  [`convergence_in_m`][meanfield.studies.in_memory.convergence_in_m], paired seeds in one process;
- [`grid`][meanfield.studies.grid]: the core of both sweeps (this one's and [`meanfield.runs.sweeps`][meanfield.runs.sweeps]'s): the
  grid's points, the seeds, the pairing of a point with its baseline;
- [`summary`][meanfield.studies.summary]: their one table, [`SummaryTable`][meanfield.studies.summary.SummaryTable] (means, paired
  differences, Holm, detectable differences, cost);
- [`stats`][meanfield.studies.stats]: means with confidence intervals, paired tests, Holm, power ($\delta_{80}$), and the
  cells of every table of comparisons;
- [`validation`][meanfield.studies.validation]: the theory checks of ``meanfield validate``;
- [`plotting`][meanfield.studies.plotting] and [`figures`][meanfield.studies.figures]: the figures' layout and the docs' figures.

Imports: stepping, drift, metrics and the base modules; the run machinery ([`meanfield.runs`][meanfield.runs]) and the
command line sit above.
"""

from .in_memory import (
    ESTIMATORS,
    METRICS,
    RateEstimate,
    StudyResult,
    SweepResult,
    Table,
    batch_seed,
    convergence_in_m,
    sweep,
)

__all__ = [
    "ESTIMATORS",
    "METRICS",
    "RateEstimate",
    "StudyResult",
    "SweepResult",
    "Table",
    "batch_seed",
    "convergence_in_m",
    "sweep",
]
