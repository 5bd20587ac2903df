"""Measures of the particle law: Wasserstein distances, diversity, order parameters.

``meanfield.metrics.wasserstein`` is the module; its ``wasserstein(x, y, ...)`` (the result object with the
method used) is not re-exported here, so that the name keeps meaning the module.
"""

from meanfield.metrics.diversity import (
    aligned_fraction,
    attention_similarity,
    collapse_rate,
    detrended_loss_variance,
    distinct_modes,
    effective_rank,
    gradient_variance,
    live_particles,
    mean_abs_loss_change,
    mean_off_diagonal,
    minibatch_gradients,
    mode_labels,
    output_covariance,
    pairwise_cosine,
    teacher_alignment,
    teacher_coverage,
)
from meanfield.metrics.wasserstein import (
    EXACT_MAX_POINTS,
    METHODS,
    Law1d,
    Normal,
    Uniform,
    WassersteinResult,
    resolve_method,
    w1,
    w2,
    w2_gaussian,
    w2_squared,
    wasserstein_to_law,
)

__all__ = [
    "EXACT_MAX_POINTS",
    "METHODS",
    "Law1d",
    "Normal",
    "Uniform",
    "WassersteinResult",
    "aligned_fraction",
    "attention_similarity",
    "collapse_rate",
    "detrended_loss_variance",
    "distinct_modes",
    "effective_rank",
    "gradient_variance",
    "live_particles",
    "mean_abs_loss_change",
    "mean_off_diagonal",
    "minibatch_gradients",
    "mode_labels",
    "output_covariance",
    "pairwise_cosine",
    "resolve_method",
    "teacher_alignment",
    "teacher_coverage",
    "w1",
    "w2",
    "w2_gaussian",
    "w2_squared",
    "wasserstein_to_law",
]
