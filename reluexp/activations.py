"""Turn an activation's dotted path from the config into a callable on tensors."""

import importlib
import inspect
from collections.abc import Callable

import torch
from torch import nn

from reluexp.config import ConfigError

Activation = Callable[[torch.Tensor], torch.Tensor]


def import_object(path: str) -> object:
    """Import `pkg.module.attr.subattr` by its longest importable module prefix."""
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


def resolve_activation(path: str) -> Activation:
    """An autograd Function gives its `apply`, an nn.Module class an instance, a function itself."""
    obj = import_object(path)
    if inspect.isclass(obj) and issubclass(obj, torch.autograd.Function):
        return obj.apply
    if inspect.isclass(obj) and issubclass(obj, nn.Module):
        return obj()
    if callable(obj):
        return obj
    raise ConfigError(f"{path!r} is a {type(obj).__name__}, not a Function, Module or function")
