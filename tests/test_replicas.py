"""Tests of :mod:`meanfield._replicas`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import meanfield._replicas as rep

F64 = torch.float64


ALLOWED = r"a number or one value per replica: a tensor of shape \(B,\) or \(B, 1, 1\)"


def mismatch(name, held=3, B=2):
    """The anchored message of a per-replica parameter of ``held`` values met by a state of ``B`` replicas."""
    return (
        rf"^{name} has {held} per-replica values, but the state has B = {B} replicas \(x has shape "
        r"\(B, M, d\)\): give one value per replica, or a number for all$"
    )


def re_shape(shape):
    """``tuple(shape)`` as a regular expression."""
    return "\\(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + "\\)"


@pytest.mark.parametrize(
    "shape, ok",
    [
        ((3,), True),
        ((0,), True),
        ((3, 1, 1), True),
        ((1, 1, 1), True),
        ((3, 2, 1), False),
        ((3, 1, 2), False),
        ((3, 2, 2), False),
        ((3, 1), False),
        ((1, 3), False),
        ((3, 1, 1, 1), False),
        ((), False),
    ],
    ids=lambda v: ("x".join(map(str, v)) or "scalar") if isinstance(v, tuple) else str(v),
)
def test_shape_ok_accepts_exactly_b_and_b11(shape, ok):
    """``_shape_ok`` is true for ``(B,)`` and ``(B, 1, 1)`` only (both trailing axes of a 3-d shape must be 1),
    checked against the documented rule for every kind of near miss."""
    assert rep._shape_ok(torch.Size(shape)) is ok


@pytest.mark.parametrize(
    "shape", [(3, 2, 1), (3, 1, 2), (2, 2), (3, 1), (3, 1, 1, 1)], ids=lambda s: "x".join(map(str, s))
)
def test_per_replica_refuses_shapes_other_than_b_and_b11(shape):
    """A tensor of another shape (more than one number) is refused by name with its shape: ``(3, 2, 1)`` is not
    ``(B, 1, 1)`` even though its last axis is 1."""
    with pytest.raises(
        ValueError, match=rf"^kappa must be {ALLOWED}; got a tensor of shape {re_shape(shape)}$"
    ):
        rep.per_replica("kappa", torch.ones(shape))


def test_per_replica_numbers_and_one_element_tensors_are_checked_as_numbers():
    """A number (int, float, numpy scalar) or a one-element tensor comes back as ``float`` (the float32 value
    of a float32 tensor, bit for bit); the checks name the argument and honour ``minimum``/``strict`` for the
    one-element tensor exactly as for a number (``0`` passes ``≥ 0`` and fails ``> 0``)."""
    assert rep.per_replica("a", 3) == 3.0 and type(rep.per_replica("a", 3)) is float
    assert rep.per_replica("a", np.float32(0.5)) == 0.5 and rep.per_replica("a", np.int64(-2)) == -2.0
    one = rep.per_replica("a", torch.tensor([[0.1]]))
    assert type(one) is float and one == float(np.float32(0.1))
    assert rep.per_replica("s", torch.tensor([0.0]), minimum=0.0) == 0.0
    assert rep.per_replica("s", 0.0, minimum=0.0) == 0.0
    for value in (0.0, torch.tensor(0.0), torch.tensor([0.0], dtype=F64)):
        with pytest.raises(ValueError, match=r"^s must be > 0, got 0\.0$"):
            rep.per_replica("s", value, minimum=0.0, strict=True)
    for value in (-1.0, torch.tensor([[-1.0]])):
        with pytest.raises(ValueError, match=r"^a must be ≥ 0, got -1\.0$"):
            rep.per_replica("a", value, minimum=0.0)
    for value in (float("nan"), torch.tensor(float("nan")), np.float64("inf")):
        with pytest.raises(ValueError, match=r"^kappa must be finite, got (nan|inf)$"):
            rep.per_replica("kappa", value)
    with pytest.raises(ValueError, match=r"^w must be > 0\.5, got 0\.5$"):
        rep.per_replica("w", torch.tensor([0.5]), minimum=0.5, strict=True)


@pytest.mark.parametrize(
    "value, got",
    [
        (True, "bool"),
        ("1.0", "str"),
        (None, "NoneType"),
        ({"a": 1.0}, "dict"),
        ({1.0, 2.0}, "set"),
        (["a", "b"], "list"),
        ([[1.0, 2.0], [3.0]], "list"),
        (("x", 1.0), "tuple"),
        (np.array(["a", "b"]), "ndarray"),
    ],
    ids=["bool", "str", "none", "dict", "set", "list_of_str", "ragged_list", "tuple_of_str", "str_array"],
)
def test_per_replica_refuses_what_is_not_numbers_naming_its_type(value, got):
    """Anything that is not a number or an array of numbers is a ``TypeError`` naming the argument and the
    given object's type (also when the conversion to a tensor fails: the type is the caller's, not ``None``)."""
    with pytest.raises(TypeError, match=rf"^beta must be {ALLOWED}, got {got}$"):
        rep.per_replica("beta", value)


@pytest.mark.parametrize("dtype", [torch.bool, torch.complex64])
def test_per_replica_refuses_boolean_and_complex_tensors(dtype):
    """A boolean or complex tensor is a ``TypeError`` naming the dtype."""
    with pytest.raises(
        TypeError, match=rf"^c must be {ALLOWED} of real numbers, got a tensor of dtype {dtype}$"
    ):
        rep.per_replica("c", torch.ones(3, dtype=dtype))


def test_per_replica_values_come_back_as_detached_float64_b():
    """Per-replica values: a list of Python floats is read in float64 (``0.1`` stays ``0.1``, not float32's
    rounding); a float32 array/tensor keeps its float32 values; ``(B, 1, 1)`` becomes ``(B,)``; the result is
    detached and float64. Negative control: the list read in float32 differs from what comes back."""
    got = rep.per_replica("a", [0.1, 0.2, 0.3])
    assert got.dtype == F64 and got.tolist() == [0.1, 0.2, 0.3]
    assert got.tolist() != torch.tensor([0.1, 0.2, 0.3]).double().tolist()
    arr = rep.per_replica("a", np.array([0.1, 0.7], dtype=np.float32))
    assert arr.dtype == F64 and arr.tolist() == [float(np.float32(0.1)), float(np.float32(0.7))]
    t = torch.tensor([1.5, -2.0, 4.0]).reshape(3, 1, 1).requires_grad_(True)
    out = rep.per_replica("k", t)
    assert out.shape == (3,) and out.dtype == F64 and not out.requires_grad
    assert out.tolist() == [1.5, -2.0, 4.0]
    assert rep.per_replica("k", (1, 2)).tolist() == [1.0, 2.0]


@pytest.mark.parametrize(
    "value, kwargs, message",
    [
        (
            [1.0, float("nan"), float("inf")],
            {},
            r"^c\[1\] = nan \(replica 1 of 3\): every value must be finite$",
        ),
        ([1.0, 2.0, float("-inf")], {}, r"^c\[2\] = -inf \(replica 2 of 3\): every value must be finite$"),
        (
            [1.0, -2.123456789, 3.0],
            {"minimum": 0.0},
            r"^c\[1\] = -2\.1234568 \(replica 1 of 3\): every value must be finite and ≥ 0$",
        ),
        (
            [1.0, 0.0],
            {"minimum": 0.0, "strict": True},
            r"^c\[1\] = 0 \(replica 1 of 2\): every value must be finite and > 0$",
        ),
        (
            [0.25, 1.0],
            {"minimum": 0.5},
            r"^c\[0\] = 0\.25 \(replica 0 of 2\): every value must be finite and ≥ 0\.5$",
        ),
        (torch.zeros(0), {}, rf"^c must be {ALLOWED}; got an empty tensor of shape \(0,\)$"),
        (torch.zeros(0, 1, 1), {}, rf"^c must be {ALLOWED}; got an empty tensor of shape \(0, 1, 1\)$"),
    ],
    ids=["nan", "neg_inf", "below_min", "not_above_min", "min_half", "empty", "empty_b11"],
)
def test_per_replica_names_the_first_bad_replica(value, kwargs, message):
    """Non-finite or out-of-range entries: the message names the first bad replica, its value (``.8g``), the
    number of replicas and the rule (``≥``/``>`` and the minimum in ``g`` format); an empty tensor is refused."""
    with pytest.raises(ValueError, match=message):
        rep.per_replica("c", value, **kwargs)


def test_per_replica_accepts_boundary_values_unless_strict():
    """``minimum = 0``: zeros pass non-strictly and come back unchanged; strictly they fail (above)."""
    assert rep.per_replica("c", [0.0, 2.0], minimum=0.0).tolist() == [0.0, 2.0]
    assert rep.per_replica("c", [0.5, 2.0], minimum=0.5).tolist() == [0.5, 2.0]


def test_at_and_check_replicas():
    """``at``: a number is returned as it is; a ``(B,)`` value becomes ``(B, 1, 1)`` (or ``(B, 1)`` with
    ``ndim = 2``) in the state's dtype; a wrong replica count is refused naming the parameter."""
    x = torch.zeros(3, 2, 2, dtype=torch.float32)
    assert rep.at(1.5, x) == 1.5
    v = torch.tensor([1.0, 2.0, 3.0], dtype=F64)
    out = rep.at(v, x, "a")
    assert out.shape == (3, 1, 1) and out.dtype == torch.float32 and out.flatten().tolist() == [1.0, 2.0, 3.0]
    assert rep.at(v, x, "a", 2).shape == (3, 1)
    with pytest.raises(ValueError, match=mismatch("a", 3, 2)):
        rep.at(v, torch.zeros(2, 2, 2), "a")
    with pytest.raises(ValueError, match=mismatch("a per-replica parameter", 3, 4)):
        rep.at(v, torch.zeros(4, 2, 2))
    rep.check_replicas("a", 2.0, 7)
    rep.check_replicas("a", v, 3)
