"""A numpy double-loop oracle for pairwise interactions, shared by the potentials tests."""

from __future__ import annotations

import numpy as np
import torch


def loop_pairs(x, W, gradW, self_pair=True):
    """``1/M Σ_j W_b(x_i − x_j)`` and ``1/M Σ_j ∇W_b(x_i − x_j)`` by an explicit double loop (float64).

    ``x``: (B, M, d), a tensor or an array; ``W(b, z)`` and ``gradW(b, z)`` take the replica index and one
    difference vector ``z`` (numpy). Returns the energies (B, M) and the gradients (B, M, d)."""
    x = np.asarray(x.detach().double().numpy() if torch.is_tensor(x) else x, dtype=np.float64)
    B, M, d = x.shape
    energy, grad = np.zeros((B, M)), np.zeros((B, M, d))
    for b in range(B):
        for i in range(M):
            for j in range(M):
                if i == j and not self_pair:
                    continue
                z = x[b, i] - x[b, j]
                energy[b, i] += W(b, z) / M
                grad[b, i] += gradW(b, z) / M
    return energy, grad
