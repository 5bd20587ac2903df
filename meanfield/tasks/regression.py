"""The ``teacher_student`` task: regression of a single- or multi-index teacher by feature particles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from meanfield import data as _data
from meanfield.nn import FeatureParticles
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment

__all__ = ["TEACHER_STUDENT", "TeacherStudentData", "FeatureModel"]


# ----------------------------------------------------------------------------------------------------------
# teacher–student regression with feature particles
# ----------------------------------------------------------------------------------------------------------


@dataclass
class TeacherStudentData:
    """``[data]`` of ``teacher_student`` (see :func:`meanfield.data.teacher_student`)."""

    d: int = 16
    k: int = 1
    activation: str = "relu"
    directions: Literal["orthonormal", "random"] = "orthonormal"
    n_train: int = 4096
    n_test: int = 2048
    label_noise: float = 0.0
    seed: int | None = None  # None: derived from the run's seed (paired runs share data and initialisation)


@dataclass
class FeatureModel:
    """``[model]`` of ``teacher_student``: ``f(x) = 1/M Σ a_i σ(w_i·x)`` (:class:`FeatureParticles`)."""

    n_particles: int = 256
    activation: str = "relu"
    A: float | None = None
    sphere: bool = False


class _TeacherStudent:
    Data = TeacherStudentData
    Model = FeatureModel

    def build(
        self,
        data: TeacherStudentData,
        model: FeatureModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        ts = _data.teacher_student(
            data.d,
            data.n_train,
            data.n_test,
            k=data.k,
            activation=data.activation,
            directions=data.directions,
            label_noise=data.label_noise,
            seed=derive_seed(seed, "data") if data.seed is None else data.seed,
            dtype=dtype,
        )
        x_train, y_train = ts.x_train.to(device), ts.y_train.to(device)  # (n, d), (n,)
        x_test, y_test = ts.x_test.to(device), ts.y_test.to(device)
        directions = ts.directions.to(device)  # (k, d)
        g = torch.Generator().manual_seed(derive_seed(seed, "init"))
        net = FeatureParticles(
            data.d,
            model.n_particles,
            model.activation,
            A=model.A,
            sphere=model.sphere,
            generator=g,
            dtype=dtype,
        ).to(device)
        batches = _data.Batches(data.n_train, batch_size, seed=derive_seed(seed, "batches"))

        def loss(index: torch.Tensor) -> torch.Tensor:
            index = index.to(device)
            return 0.5 * F.mse_loss(net(x_train[index]), y_train[index])  # ½ E (f − y)²

        def evaluate() -> dict[str, float]:
            test_mse = float(F.mse_loss(net(x_test), y_test))
            w = net.w / net.w.norm(dim=1, keepdim=True).clamp_min(1e-12)  # (M, d)
            cos = (w @ directions.T).abs()  # (M, k)
            return {
                "test_mse": test_mse,
                "test_mse_relative": test_mse / float(y_test.var()),
                "alignment_max": float(cos.max(0).values.mean()),  # mean over teachers of the best |cos|
            }

        return Experiment(
            model=net,
            batches=batches,
            next_batch=batches.next_indices,
            loss=loss,
            evaluate=evaluate,
            unit="samples",
            units_per_step=batch_size,
            description=f"{ts.description}; FeatureParticles(M={model.n_particles}, σ={model.activation})",
        )


TEACHER_STUDENT = _TeacherStudent()
"""The ``teacher_student`` task."""
