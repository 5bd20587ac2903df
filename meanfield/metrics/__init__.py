"""Measures of the particle law: Wasserstein distances, diversity, order parameters."""

from meanfield.metrics.diversity import (
    aligned_fraction,
    attention_similarity,
    collapse_rate,
    detrended_loss_variance,
    effective_rank,
    gradient_variance,
    mean_abs_loss_change,
    mean_off_diagonal,
    minibatch_gradients,
    output_covariance,
    pairwise_cosine,
    teacher_alignment,
)

__all__ = [
    "aligned_fraction",
    "attention_similarity",
    "collapse_rate",
    "detrended_loss_variance",
    "effective_rank",
    "gradient_variance",
    "mean_abs_loss_change",
    "mean_off_diagonal",
    "minibatch_gradients",
    "output_covariance",
    "pairwise_cosine",
    "teacher_alignment",
]
