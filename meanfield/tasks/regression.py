r"""Regression and classification by feature particles: the ``teacher_student`` and ``image_classification`` tasks.

``teacher_student``: a single- or multi-index teacher $y = \sum_k c_k g(w^*_k\cdot x)$ on Gaussian inputs, learned by
the mean-field network $f(x) = 1/M \sum_i a_i \sigma(w_i\cdot x)$ (``[model] kind = "particles"``, the particle group of
the Langevin optimizer) or by an ordinary network of the same width $f(x) = \sum_i a_i \sigma(w_i\cdot x + b_i) + c$ with
torch's default initialisation (``kind = "mlp"``: no particle layer, all its parameters in ``[optim.others]``,
the deterministic baseline trained by plain Adam or SGD).

``image_classification``: Fashion-MNIST or CIFAR-10 (the lossy JPEG copy when that is what the data folder
holds: the loader says so in the description), flattened and standardised per channel, classified by an MLP
whose hidden layer is [`FeatureParticles`][meanfield.nn.features.FeatureParticles] with vector outputs $a_i \in \mathbb{R}^{10}$
($f(x) = 1/M \sum_i a_i \sigma(w_i\cdot x + b_i)$, the logits) or by the same-width ``nn.Linear → σ → nn.Linear`` MLP.

Both count the same multiply–adds per sample for both model kinds ($2\cdot M\cdot(d + k)$ forward), so equal steps
at equal batch size are equal samples *and* equal FLOPs, up to the optimizer's noise draw (one normal number
per particle parameter per step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from meanfield import data as _data
from meanfield.config import ConfigError
from meanfield.metrics.diversity import (
    aligned_fraction,
    collapse_rate,
    distinct_modes,
    live_particles,
    teacher_alignment,
    teacher_coverage,
    teacher_overlap,
)
from meanfield.nn import FeatureParticles
from meanfield.nn.features import ACTIVATIONS
from meanfield.nn.sharded import particle_parameter
from meanfield.seeds import derive_seed
from meanfield.tasks import Experiment

__all__ = [
    "TEACHER_STUDENT",
    "IMAGE_CLASSIFICATION",
    "TeacherStudentData",
    "FeatureModel",
    "ImageData",
    "ImageModel",
    "WideMLP",
    "particle_metrics",
    "validation_split",
    "VAL_SPLIT_SEED",
]

ODD_ACTIVATIONS = ("tanh", "erf", "identity")
r"""Activations with $\sigma(-z) = -\sigma(z)$: ``(a, w)`` and $(-a, -w)$ are the same neuron (sign-symmetric metrics)."""


class WideMLP(nn.Module):
    """The ordinary (standard-parametrisation) network of width M: ``nn.Linear(d, M) → σ → nn.Linear(M, k)``.

        f(x) = Σ_i a_i σ(w_i·x + b_i) + c,   (torch's default initialisation of ``nn.Linear``)

    It has no ``n_particles`` attribute, so [`Langevin.param_groups_for`][meanfield.optim.langevin.Langevin.param_groups_for] puts all its parameters in the
    group without noise (``[optim.others]``). ``w`` and ``a`` expose the weights in the layout of
    [`FeatureParticles`][meanfield.nn.features.FeatureParticles] (``(M, d)`` and ``(M,)`` or ``(M, k)``) for the diversity metrics.

    Args:
        d_in: input width ``d``.
        width: hidden width ``M``.
        activation: a name in `meanfield.nn.features.ACTIVATIONS`.
        out_features: ``k`` (``None``: scalar output, shape ``(N,)``).
        bias: biases in both layers.
        generator: random generator of the initialisation.
        dtype: parameter dtype.
    """

    def __init__(
        self,
        d_in: int,
        width: int,
        activation: str,
        out_features: int | None = None,
        *,
        bias: bool = True,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; allowed: {sorted(ACTIVATIONS)}")
        self.activation = ACTIVATIONS[activation]
        self.out_features = out_features
        self.hidden_layer = nn.Linear(d_in, width, bias=bias, dtype=dtype)
        self.readout = nn.Linear(width, 1 if out_features is None else out_features, bias=bias, dtype=dtype)
        if generator is not None:  # nn.Linear's default init (Kaiming-uniform, a = √5), from this generator
            with torch.no_grad():
                for layer in (self.hidden_layer, self.readout):
                    bound = 1 / math.sqrt(layer.in_features)
                    layer.weight.uniform_(-bound, bound, generator=generator)
                    if layer.bias is not None:
                        layer.bias.uniform_(-bound, bound, generator=generator)

    @property
    def w(self) -> torch.Tensor:
        """Hidden weights ``(M, d)``."""
        return self.hidden_layer.weight

    @property
    def a(self) -> torch.Tensor:
        """Read-out weights ``(M,)`` (scalar output) or ``(M, k)``."""
        W = self.readout.weight  # (k, M)
        return W[0] if self.out_features is None else W.T

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        out = self.readout(self.activation(self.hidden_layer(X)))  # (N, k)
        return out[..., 0] if self.out_features is None else out


def particle_metrics(
    net: nn.Module, directions: torch.Tensor | None, activation: str, threshold: float = 0.9
) -> dict[str, float]:
    r"""Diversity and teacher-recovery metrics of a network's hidden units $(a_i, w_i)$.

    With ``L`` the live units ([`live_particles`][meanfield.metrics.diversity.live_particles], $\|a_i\|$ above 5 % of
    the mean) and sign symmetry ``|cos|`` for the teacher metrics (``w`` and $-w$ span the same direction):

    - ``aligned``: fraction of live units with $\max_k |\cos(w_i, w^*_k)| \ge \tau$ (τ = ``threshold``);
    - ``coverage``: fraction of the K teacher directions with a live unit at $|\cos| \ge \tau$;
    - ``modes``: clusters of live directions (single linkage at cosine distance 0.1, i.e. cos ≥ 0.9; ``|cos|``
      for odd activations), each holding ≥ 5 % of the live units;
    - ``collapse``: fraction of live units within cosine distance 0.01 of another (sign-aware: ``w`` and
      $-w$ are distinct for a ReLU);
    - ``live``: fraction of live units;
    - ``q``: the intensive overlap $1/M \sum_i \|P \hat{w}_i\|^2$ over all M units, ``P`` the projector on the span of
      the K teacher directions ($1/M \sum_i \sum_k (\hat{w}_i\cdot w^*_k)^2$ for orthonormal ones; ``K/d`` for uniform
      directions, 1 when every unit lies in the span): no threshold and no extreme over units, so its
      mean-field value does not depend on M ([`teacher_overlap`][meanfield.metrics.diversity.teacher_overlap]);
    - ``q_abs_a``: the same average weighted by $\|a_i\|$ (units that carry output count more).
    """
    w = particle_parameter(net, "w")  # (M, d) all M units, also when the layer is sharded over ranks
    a = particle_parameter(net, "a")  # (M,) or (M, k)
    live = live_particles(a, vector=a.dim() == 2)  # (M,)
    odd = activation in ODD_ACTIVATIONS
    out = {
        "live": float(live.float().mean()),
        "modes": float(distinct_modes(w, 0.1, symmetric=odd, live=live)),
        "collapse": float(collapse_rate(w, 0.01, symmetric=odd, live=live)),
    }
    if directions is not None:
        out["aligned"] = float(aligned_fraction(w, directions, threshold, symmetric=True, live=live))
        out["coverage"] = float(teacher_coverage(w, directions, threshold, symmetric=True, live=live))
        norm_a = a.detach().norm(dim=-1) if a.dim() == 2 else a.detach().abs()  # (M,)
        out["q"] = float(teacher_overlap(w.detach(), directions))
        out["q_abs_a"] = float(teacher_overlap(w.detach(), directions, weights=norm_a))
    return out


# ----------------------------------------------------------------------------------------------------------
# teacher–student regression with feature particles
# ----------------------------------------------------------------------------------------------------------


@dataclass
class TeacherStudentData:
    """``[data]`` of ``teacher_student`` (see [`meanfield.data.teacher_student`][meanfield.data.teacher.teacher_student])."""

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
    r"""``[model]`` of ``teacher_student``.

    ``kind = "particles"``: $f(x) = 1/M \sum a_i \sigma(w_i\cdot x)$ ([`FeatureParticles`][meanfield.nn.features.FeatureParticles], the particle group);
    ``kind = "mlp"``: the ordinary network of the same width ([`WideMLP`][meanfield.tasks.regression.WideMLP], ``bias`` in both layers,
    trained by ``[optim.others]``; ``A`` and ``sphere`` do not apply).
    """

    n_particles: int = 256
    activation: str = "relu"
    A: float | None = None
    sphere: bool = False
    kind: Literal["particles", "mlp"] = "particles"
    bias: bool = True


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
        if model.kind == "mlp":
            net = WideMLP(
                data.d, model.n_particles, model.activation, bias=model.bias, generator=g, dtype=dtype
            ).to(device)
        else:
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
            cos = teacher_alignment(particle_parameter(net, "w"), directions).abs()  # (M, k) |cos(w_i, w*_k)|
            return {
                "test_mse": test_mse,
                "test_mse_relative": test_mse / float(y_test.var()),
                "alignment_max": float(cos.max(0).values.mean()),  # mean over teachers of the best |cos|
                **particle_metrics(net, directions, model.activation),
            }

        return Experiment(
            model=net,
            batches=batches,
            next_batch=batches.next_indices,
            loss=loss,
            evaluate=evaluate,
            unit="samples",
            units_per_step=batch_size,
            description=f"{ts.description}; "
            + (
                f"WideMLP(M={model.n_particles}, σ={model.activation})"
                if model.kind == "mlp"
                else f"FeatureParticles(M={model.n_particles}, σ={model.activation})"
            ),
        )


TEACHER_STUDENT = _TeacherStudent()
"""The ``teacher_student`` task."""


# ----------------------------------------------------------------------------------------------------------
# image classification with a FeatureParticles hidden layer
# ----------------------------------------------------------------------------------------------------------


@dataclass
class ImageData:
    r"""``[data]`` of ``image_classification``.

    ``dataset``: ``"fashion_mnist"`` or ``"cifar10"`` (here the lossy JPEG-75 copy of CIFAR-10: the loader's
    description says so). ``root``: the data folder (``""``: the loaders' default). ``n_train``/``n_test``:
    the first that many images of each split (0: all). Pixels are scaled to [0, 1], standardised with the
    training split's per-channel mean and standard deviation, and flattened.

    $n_{\mathrm{val}}$: a validation split held out of the training set, for choosing hyperparameters without the
    test set (0: none, the default). $n_{\mathrm{val}}$ of the (first ``n_train``) training images, drawn uniformly
    without replacement by a fixed permutation ([`VAL_SPLIT_SEED`][meanfield.tasks.regression.VAL_SPLIT_SEED], the same for every run seed and
    every arm), are removed from training; the others are trained on in their original order. Not "the
    last $n_{\mathrm{val}}$": the CIFAR-10 JPEG copy is ordered by class, so those would all be trucks.
    ``evaluate()`` then also reports ``val_loss`` (mean cross-entropy) and ``val_error`` on them, defined as
    ``test_loss`` and ``test_error``. The standardisation statistics stay those of the whole training split
    (pixel means and deviations only, no labels), so the pixels are the same numbers with and without the
    split. An integer with $0 \le n_{\mathrm{val}} <$ the number of training images.
    """

    dataset: Literal["fashion_mnist", "cifar10"] = "fashion_mnist"
    root: str = ""
    n_train: int = 0
    n_test: int = 0
    n_val: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.n_val, bool) or not isinstance(self.n_val, int) or self.n_val < 0:
            raise ValueError(
                f"n_val must be an integer ≥ 0 (the training images held out for validation; "
                f"0: none), got {self.n_val!r}"
            )


@dataclass
class ImageModel:
    r"""``[model]`` of ``image_classification``: a one-hidden-layer MLP of width ``n_particles``.

    ``kind = "particles"``: $f(x) = 1/M \sum_i a_i \sigma(w_i\cdot x + b_i)$, $a_i \in \mathbb{R}^{\mathrm{classes}}$
    ([`FeatureParticles`][meanfield.nn.features.FeatureParticles] with ``out_features`` and ``bias``); ``kind = "mlp"``: [`WideMLP`][meanfield.tasks.regression.WideMLP].
    """

    n_particles: int = 256
    activation: str = "relu"
    kind: Literal["particles", "mlp"] = "particles"
    A: float | None = None


VAL_SPLIT_SEED = 20_281
"""Seed of the permutation that picks the validation images ([`validation_split`][meanfield.tasks.regression.validation_split]): a constant, so that
every run seed and every arm holds out the same images."""


def validation_split(n: int, n_val: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Indices of $n_{\mathrm{val}}$ validation examples among ``n``, and of the $n - n_{\mathrm{val}}$ others, each sorted.

    The validation indices are the first $n_{\mathrm{val}}$ of ``torch.randperm(n)`` drawn from a generator seeded with
    [`VAL_SPLIT_SEED`][meanfield.tasks.regression.VAL_SPLIT_SEED] (uniform without replacement, independent of the run's seed).

    Raises:
        ConfigError: unless $0 < n_{\mathrm{val}} < n$ (naming ``data.n_val`` and the number of training examples).
    """
    if not 0 < n_val < n:
        raise ConfigError(
            f"data.n_val must be ≥ 1 and < the number of training images ({n}, after data.n_train), "
            f"got {n_val}: at least one image must be left to train on"
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(VAL_SPLIT_SEED))  # (n,)
    held = torch.zeros(n, dtype=torch.bool)
    held[perm[:n_val]] = True
    return held.nonzero()[:, 0], (~held).nonzero()[:, 0]  # (n_val,), (n − n_val,)


class _ImageClassification:
    Data = ImageData
    Model = ImageModel

    def build(
        self,
        data: ImageData,
        model: ImageModel,
        *,
        batch_size: int,
        seed: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Experiment:
        root = data.root or None
        ds = _data.fashion_mnist(root) if data.dataset == "fashion_mnist" else _data.cifar10(root)
        mean = ds.mean.to(dtype)[:, None, None]  # (C, 1, 1)
        std = ds.std.to(dtype)[:, None, None]  # (C, 1, 1)

        def prepare(x: torch.Tensor, n: int) -> torch.Tensor:
            x = x[:n] if n else x
            return ((x.to(dtype) / 255 - mean) / std).flatten(1).to(device)  # (N, C·H·W)

        x_train, x_test = prepare(ds.train_x, data.n_train), prepare(ds.test_x, data.n_test)
        y_train = (ds.train_y[: data.n_train] if data.n_train else ds.train_y).to(device)  # (N,)
        y_test = (ds.test_y[: data.n_test] if data.n_test else ds.test_y).to(device)
        x_val = y_val = None
        if data.n_val:
            val, kept = validation_split(len(y_train), data.n_val)  # (n_val,), (N − n_val,) sorted indices
            x_val, y_val = x_train[val.to(device)], y_train[val.to(device)]
            x_train, y_train = x_train[kept.to(device)], y_train[kept.to(device)]
        d, k = x_train.shape[1], ds.num_classes
        g = torch.Generator().manual_seed(derive_seed(seed, "init"))
        if model.kind == "mlp":
            net = WideMLP(d, model.n_particles, model.activation, k, generator=g, dtype=dtype).to(device)
        else:
            net = FeatureParticles(
                d,
                model.n_particles,
                model.activation,
                A=model.A,
                out_features=k,
                bias=True,
                generator=g,
                dtype=dtype,
            ).to(device)
        batches = _data.Batches(len(y_train), batch_size, seed=derive_seed(seed, "batches"))

        def loss(index: torch.Tensor) -> torch.Tensor:
            index = index.to(device)
            return F.cross_entropy(net(x_train[index]), y_train[index])

        def logits_of(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([net(x[i : i + 4096]) for i in range(0, len(x), 4096)])  # (N, k)

        def evaluate() -> dict[str, float]:
            logits = logits_of(x_test)  # (N_test, k)
            error = float((logits.argmax(1) != y_test).double().mean())
            out = {
                "test_loss": float(F.cross_entropy(logits, y_test)),
                "test_error": error,
                "accuracy": 1.0 - error,
            }
            if x_val is not None:
                val_logits = logits_of(x_val)  # (n_val, k)
                out["val_loss"] = float(F.cross_entropy(val_logits, y_val))
                out["val_error"] = float((val_logits.argmax(1) != y_val).double().mean())
            return {**out, **particle_metrics(net, None, model.activation)}

        return Experiment(
            model=net,
            batches=batches,
            next_batch=batches.next_indices,
            loss=loss,
            evaluate=evaluate,
            unit="samples",
            units_per_step=batch_size,
            higher_is_better=("accuracy",),
            description=f"{ds.description}; {len(y_train)} train"
            + (f" / {data.n_val} validation (held out of train)" if data.n_val else "")
            + f" / {len(y_test)} test; "
            + (
                f"WideMLP(M={model.n_particles}, σ={model.activation})"
                if model.kind == "mlp"
                else f"FeatureParticles(M={model.n_particles}, σ={model.activation}, k={k}, bias)"
            ),
        )


IMAGE_CLASSIFICATION = _ImageClassification()
"""The ``image_classification`` task."""
