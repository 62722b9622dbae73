"""Exact structural comparison of results: what a judge uses to hold a student's data against a reference.

Two values are the same only when their structure is: the same type exactly (no subclasses, a bool is no int,
a tuple no list), for tensors the same dtype, layout and shape (nothing ever broadcasts: an empty tensor is not
"equal to anything"), for dicts the same keys in the same order, for lists and tuples the same length. Only then
are the values compared, within `atol + rtol * |expected|` for floats (Python's and tensors'), exactly for
everything else. Values are compared on the CPU: where a tensor lives is not judged here.

Non-finite floats: a NaN is the same only as a NaN at the same place, an infinity only as the same infinity, and
neither is ever close to a finite number, whatever the tolerance. A reference the judge computes holds no NaN
unless NaN is the answer, so a NaN in a student's data fails; where inf is the right answer (an fp16 overflow),
the student's inf passes.

Either argument may be a student's (ranks compared with each other): both are held to the same rules, and
anything else, a grading.Other included, is never the same as a reference.
"""

from __future__ import annotations

import collections
import math

import torch

from .language import say

DICTS = (dict, collections.OrderedDict)  # the dicts the grading codec gives back
_EXACT = (bool, int, str, type(None), torch.dtype, torch.device)  # compared with ==, once the types are equal


def _tolerance(name: str, value) -> None:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ValueError(say("{name} must be a finite number >= 0, got {value!r}", name=name, value=value))


def tensor_like(got, expected) -> bool:
    """Whether `got` and `expected` are both plain torch.Tensors (no subclass) of the same dtype, layout and shape."""
    return (type(got) is torch.Tensor and type(expected) is torch.Tensor and got.dtype == expected.dtype
            and got.layout == expected.layout == torch.strided and got.shape == expected.shape)


def same_tensor(got, expected, *, atol: float = 0.0, rtol: float = 0.0) -> bool:
    """Whether `got` is `expected`: `tensor_like`, then every value close (floats) or equal (the other dtypes)."""
    _tolerance("atol", atol)
    _tolerance("rtol", rtol)
    if not tensor_like(got, expected):
        return False
    got, expected = got.detach().cpu(), expected.detach().cpu()
    if not (got.dtype.is_floating_point or got.dtype.is_complex):
        return torch.equal(got, expected)
    wide = torch.complex128 if got.dtype.is_complex else torch.float64  # exact for every float dtype
    # equal_nan: a NaN matches a NaN at the same place only; allclose itself matches an inf with the same inf only
    return torch.allclose(got.to(wide), expected.to(wide), rtol=rtol, atol=atol, equal_nan=True)


def same_state(got, expected, *, atol: float = 1e-5, rtol: float = 1e-5) -> bool:
    """Whether the state dict `got` is `expected`: dicts with the same str keys in the same order, each tensor
    `same_tensor` within the tolerances."""
    _tolerance("atol", atol)
    _tolerance("rtol", rtol)
    if type(got) not in DICTS or type(expected) not in DICTS:
        return False
    if not all(type(k) is str for k in got) or list(got) != list(expected):
        return False
    return all(same_tensor(got[k], expected[k], atol=atol, rtol=rtol) for k in got)


def same_values(got, expected, *, atol: float = 0.0, rtol: float = 0.0) -> bool:
    """Whether `got` is `expected`, nested lists, tuples and dicts of bools, ints, floats, strs, None, tensors,
    dtypes and devices: the same types and structure all the way down, floats and tensors within the tolerances.
    Raises ValueError for a value of any other type in `expected` (a reference must be plain data)."""
    _tolerance("atol", atol)
    _tolerance("rtol", rtol)
    return _same(got, expected, atol, rtol)


def _same(got, expected, atol, rtol) -> bool:
    kind = type(expected)
    if kind not in _EXACT + (float, list, tuple, torch.Tensor) + DICTS:
        raise ValueError(say("expected must be plain data (bool, int, float, str, None, list, tuple, dict, tensor, "
                             "dtype, device), got {kind}", kind=kind.__name__))
    if type(got) is not kind:
        return False
    if kind is float:
        return _same_float(got, expected, atol, rtol)
    if kind is torch.Tensor:
        return same_tensor(got, expected, atol=atol, rtol=rtol)
    if kind in DICTS:
        return _same(list(got), list(expected), 0.0, 0.0) and all(_same(got[k], expected[k], atol, rtol) for k in expected)
    if kind in (list, tuple):
        return len(got) == len(expected) and all(_same(g, e, atol, rtol) for g, e in zip(got, expected))
    return got == expected


def _same_float(got: float, expected: float, atol: float, rtol: float) -> bool:
    if math.isnan(got) or math.isnan(expected):
        return math.isnan(got) and math.isnan(expected)
    if math.isinf(got) or math.isinf(expected):
        return got == expected
    return abs(got - expected) <= atol + rtol * abs(expected)


def is_record(value, fields: dict) -> bool:
    """Whether `value` is a dict with exactly the keys of `fields` (in any order), each value of the type that
    `fields` gives for its key: a type or a tuple of types, matched exactly, or None for any type (judged apart)."""
    if type(fields) is not dict or not all(spec is None or isinstance(spec, type) or (
            type(spec) is tuple and all(isinstance(t, type) for t in spec)) for spec in fields.values()):
        raise ValueError(say("fields must be a dict of key -> type, tuple of types or None, got {fields!r}",
                             fields=fields))
    if type(value) not in DICTS or set(value) != set(fields):
        return False
    return all(spec is None or type(value[k]) in (spec if type(spec) is tuple else (spec,)) for k, spec in fields.items())
