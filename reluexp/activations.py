"""Turn an activation's dotted path from the config into a callable on tensors."""

import functools
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from reluexp.config import ConfigError

Activation = Callable[[torch.Tensor], torch.Tensor]


def import_object(path: str) -> object:
    """Import `pkg.module.attr.subattr` by its longest importable module prefix."""
    # The console script, unlike `python -m`, does not put the current directory on the path.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Only a missing prefix means "try a shorter one"; a broken module is the user's error.
            if error.name is not None and module_name.startswith(error.name):
                continue
            raise
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise ConfigError(f"{path!r}: module {module_name!r} has no {attr!r}") from None
        return obj
    raise ConfigError(f"{path!r}: not an importable dotted path (expected pkg.module.Name)")


def as_activation(obj: object, params: dict[str, Any], path: str) -> Activation:
    """A Function gives its `apply`, a Module class an instance, a function itself; params bound."""
    if inspect.isclass(obj) and issubclass(obj, torch.autograd.Function):
        return functools.partial(obj.apply, **params)
    if inspect.isclass(obj) and issubclass(obj, nn.Module):
        return obj(**params)
    if callable(obj):
        return functools.partial(obj, **params)
    raise ConfigError(f"{path!r} is a {type(obj).__name__}, not a Function, Module or function")


def resolve_activation(path: str, params: dict[str, Any] | None = None) -> Activation:
    return as_activation(import_object(path), params or {}, path)
