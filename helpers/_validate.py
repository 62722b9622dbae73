"""Argument checks shared by the helpers: each failure is a ValueError naming the argument."""

from .language import say


def positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(say("{name} must be an int, got {kind} {value!r}", name=name, kind=type(value).__name__,
                             value=value))
    if value < minimum:
        raise ValueError(say("{name} must be >= {minimum}, got {value}", name=name, minimum=minimum, value=value))
    return value


def one_of(name: str, value, choices):
    if value not in choices:
        raise ValueError(say("{name} must be one of {choices}, got {value!r}", name=name, choices=sorted(choices),
                             value=value))
    return value


def positive_number(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(say("{name} must be a positive number, got {value!r}", name=name, value=value))
    return value


def function(name: str, value):
    if not callable(value):
        raise ValueError(say("{name} must be callable, got {kind}", name=name, kind=type(value).__name__))
    return value


def boolean(name: str, value) -> bool:
    if value not in (True, False):
        raise ValueError(say("{name} must be True or False, got {value!r}", name=name, value=value))
    return value


def str_dict(name: str, value) -> dict:
    """A dict of str to str, such as environment variables; None is an empty one."""
    value = {} if value is None else value
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(say("{name} must be a dict of str to str, got {value!r}", name=name, value=value))
    return value


def low_precision_dtype(name: str, value, allow_none: bool = True):
    """torch.float16 or torch.bfloat16 (or None, meaning fp32, when `allow_none`)."""
    import torch

    if value not in (torch.float16, torch.bfloat16) + ((None,) if allow_none else ()):
        raise ValueError(say("{name} must be {none}torch.float16 or torch.bfloat16, got {value}", name=name,
                             none='None, ' if allow_none else '', value=value))
    return value
