"""A run small enough for a unit test: the teacher–student example cut down (shared by the run-loop tests).

``TINY`` are ``--set`` overrides of ``experiments/teacher_student/config.toml``: 4 steps of 16 samples, 8
particles, a metrics line every 2 steps, checkpoints at steps 2 and 4 (all kept), no evaluation, figures or
TensorBoard.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEACHER = ROOT / "experiments" / "teacher_student" / "config.toml"
TINY = [
    "data.n_train=64",
    "data.n_test=32",
    "model.n_particles=8",
    "train.batch_size=16",
    "train.steps=4",
    "train.log_every=2",
    "train.eval_every=0",
    "train.checkpoint_every=2",
    "train.keep_checkpoints=5",
    "train.figures=false",
    "train.tensorboard=false",
]
