"""Turn an activation's dotted path from the config into a callable on tensors."""

import functools
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from reluexp._compat import CUSTOM_OP_TYPES, NO_DEFAULT, op_arguments
from reluexp.config import ConfigError

Activation = Callable[[torch.Tensor], torch.Tensor]


# The packages whose code a resumed run imports from its stored config without asking: any
# other module's import-time code would run just because a run directory names it.
OWN_PACKAGES = ("reluexp", "torch")


def is_own(path: str) -> bool:
    """A dotted path into reluexp or torch (OWN_PACKAGES)."""
    return path.split(".", 1)[0] in OWN_PACKAGES


def data_location(place: Path, run_dir: Path) -> bool:
    """A place whose code a run never imports, being data: inside its run directory or an
    `outputs` tree, or a module or package directly in a directory above the run directory
    (a run directory is pasted, copied and shared), unless that is the current directory."""
    run_dir, cwd = run_dir.resolve(), Path.cwd().resolve()
    data_dirs = [run_dir, *(p for p in run_dir.parents if p.name == "outputs"), cwd / "outputs"]
    if any(place.is_relative_to(directory) for directory in data_dirs):
        return True
    return place.parent in run_dir.parents and place.parent != cwd


def refuse_modules_under(module_name: str, key: str, run_dir: Path | None) -> None:
    """Refuse, before running any of it, a module (or a package above it) that lives where a
    run's data does (data_location). find_spec locates without executing; each package above
    was checked before find_spec of its child imports it."""
    if run_dir is None:
        return
    parts = module_name.split(".")
    for end in range(1, len(parts) + 1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:end]))
        except (ImportError, ValueError):
            return
        if spec is None:
            return
        locations = [spec.origin, *(spec.submodule_search_locations or [])]
        for location in filter(None, locations):
            place = Path(location).resolve()
            if data_location(place, run_dir):
                raise ConfigError(
                    f"{key}: {module_name!r} is in {place.parent}: code in or beside a run "
                    "directory, or in an outputs tree, is never imported"
                )


def raised_at(error: BaseException) -> str:
    """`raised ErrorType: message (file:line)`, the line where it was raised in the user's code."""
    if isinstance(error, SyntaxError):
        where = f"{error.filename}:{error.lineno}"
        message = error.msg
    else:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f"{frame.filename}:{frame.lineno}"
        message = str(error).splitlines()[0] if str(error) else ""
    return f"raised {type(error).__name__}: {message} ({where})"


def import_object(path: str, key: str = "activation.target", run_dir: Path | None = None) -> object:
    """Import `pkg.module.attr.subattr` by its longest importable module prefix, never from
    where run_dir's data lives (data_location); what goes wrong is a ConfigError naming
    `key=path`."""
    # The console script, unlike `python -m`, does not put the current directory on the path.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        refuse_modules_under(module_name, key, run_dir)
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Only a missing prefix means "try a shorter one"; a broken module is the user's error.
            if error.name is not None and module_name.startswith(error.name):
                continue
            raise ConfigError(f"{key}={path}: importing {module_name} {raised_at(error)}") from None
        except Exception as error:  # the module's own code raised, or it does not parse
            raise ConfigError(f"{key}={path}: importing {module_name} {raised_at(error)}") from None
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise ConfigError(f"{key}={path}: module {module_name!r} has no {attr!r}") from None
        return obj
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ConfigError(f"{key}={path}: not a dotted path (expected pkg.module.Name)")
    raise ConfigError(
        f"{key}={path}: no module named {parts[0]!r} was found (neither installed nor a "
        f"{parts[0]}.py or {parts[0]}/ package in the working directory, {os.getcwd()})"
    )


def is_function(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, torch.autograd.Function)


def is_module(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, nn.Module)


def is_custom_op(obj: object) -> bool:
    """A torch.library custom op (or an operator under torch.ops)."""
    return isinstance(obj, CUSTOM_OP_TYPES)


def takes_tensor_arguments(obj: object) -> bool:
    """Whether obj's arguments after the input go to it positionally, tensors among them: a
    Function's (apply(x, w, b)) and a custom op's."""
    return is_function(obj) or is_custom_op(obj) and op_arguments(obj) is not None


def calling(obj: object) -> Callable[..., torch.Tensor]:
    """What calls obj with its input and its arguments: a Function's apply, anything else
    itself (a custom op)."""
    return obj.apply if is_function(obj) else obj


def arguments_after_input(obj: object) -> list[inspect.Parameter]:
    """What obj takes besides its input: a Function's forward arguments after the input (and
    the ctx, unless setup_context takes it), a custom op's schema's, a Module's constructor
    arguments, a function's arguments after the first. Raises TypeError or ValueError where
    there is no signature."""
    if is_function(obj):
        skip = 1 if obj.setup_context is not torch.autograd.Function.setup_context else 2
        return list(inspect.signature(obj.forward).parameters.values())[skip:]
    if is_custom_op(obj) and (arguments := op_arguments(obj)) is not None:
        return [
            inspect.Parameter(
                argument.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=inspect.Parameter.empty
                if argument.default is NO_DEFAULT
                else argument.default,
                annotation=torch.Tensor if argument.tensor else inspect.Parameter.empty,
            )
            for argument in arguments[1:]
        ]
    if is_module(obj):
        return list(inspect.signature(obj.__init__).parameters.values())[1:]
    return list(inspect.signature(obj).parameters.values())[1:]


def checked_params(obj: object, params: dict[str, Any], path: str) -> tuple[Any, ...]:
    """activation.params checked against what obj takes after its input (each key must name an
    argument; a number where the default is a number), and, for a Function, as the positional
    arguments after the input (Function.apply takes no keywords before torch 2.4). A builtin
    without a Python signature (torch.relu) is tried once with them on a small input: its
    TypeError names a key it does not take."""
    try:
        parameters = arguments_after_input(obj)
    except (TypeError, ValueError):
        if params and callable(obj):
            try:
                obj(torch.zeros(2, 2), **params)
            except TypeError as error:
                raise ConfigError(f"activation.params: {path} refuses them: {error}") from None
        return tuple(params.values())
    names = {p.name: p for p in parameters if p.kind is not p.VAR_KEYWORD}
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters)
    for key, value in params.items():
        if key not in names:
            if takes_any:
                continue
            allowed = ", ".join(names) or "no arguments"
            raise ConfigError(f"activation.params.{key}: {path} takes {allowed}")
        default = names[key].default
        number = isinstance(default, int | float) and not isinstance(default, bool)
        if number and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise ConfigError(
                f"activation.params.{key}={value!r}: expected a number (the default is {default})"
            )
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"activation.params.{key}={value!r}: expected true or false")
        if names[key].annotation in TENSOR_ANNOTATIONS and not tensor_like(value):
            raise ConfigError(
                f"activation.params.{key}={value!r}: expected a number or a list of numbers "
                f"({path} takes a tensor there)"
            )
    if not takes_tensor_arguments(obj):
        return ()
    missing = [p.name for p in parameters if p.name not in params and p.default is p.empty]
    if missing:
        raise ConfigError(f"activation.params.{missing[0]}: {path} needs it")
    return tuple(as_argument(p, params.get(p.name, p.default)) for p in parameters)


# How a Function's forward may annotate an argument that is a tensor (apply(x, w, b)).
TENSOR_ANNOTATIONS = (torch.Tensor, "torch.Tensor", "Tensor")


def numbers(value: Any) -> bool:
    """A number or a (nested) list of them, as a config holds a tensor's values."""
    if isinstance(value, list | tuple):
        return all(numbers(v) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def tensor_like(value: Any) -> bool:
    return isinstance(value, torch.Tensor) or numbers(value)


def as_argument(parameter: inspect.Parameter, value: Any) -> Any:
    """A number or a list of them for an argument the forward annotates as a tensor: the tensor
    (a config holds no tensors)."""
    if numbers(value) and parameter.annotation in TENSOR_ANNOTATIONS:
        return torch.tensor(value, dtype=torch.get_default_dtype())
    return value


def accepted(obj: object, params: dict[str, Any]) -> dict[str, Any]:
    """The params obj takes besides its input (all, for **kwargs; for one of torch's builtins
    without a signature, all unless a call on a small input refuses them: torch.clamp takes
    no min_val): a reference or a surrogate takes the target's params it knows."""
    try:
        parameters = arguments_after_input(obj)
    except (TypeError, ValueError):
        module = getattr(obj, "__module__", None) or ""
        if params and module.startswith("torch") and callable(obj):
            try:
                obj(torch.zeros(2, 2), **params)
            except TypeError:
                return {}
            except Exception:  # refused for another reason: the check says what
                pass
        return dict(params)
    return keywords_in(parameters, params)


def keywords_in(parameters: list[inspect.Parameter], offered: dict[str, Any]) -> dict[str, Any]:
    """The entries of `offered` these parameters name (all of them with a **kwargs)."""
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return dict(offered)
    names = {p.name for p in parameters}
    return {key: value for key, value in offered.items() if key in names}


def resolved(obj: object, key: str) -> object:
    """obj, or the object its dotted path names."""
    return import_object(obj, key) if isinstance(obj, str) else obj


def surrogate_of(obj: object, params: dict[str, Any], key: str) -> Callable | None:
    """g(x) from the declared g(x, **params): a Python (or torch) function, never called here.
    A builtin (os.system) or a class is refused before it could run."""
    if obj is None:
        return None
    g = resolved(obj, key)
    named = obj if isinstance(obj, str) else getattr(obj, "__qualname__", repr(obj))
    module = getattr(g, "__module__", "") or ""
    if not (
        inspect.isfunction(g) or isinstance(g, functools.partial) or module.startswith("torch")
    ):
        raise ConfigError(
            f"{key}={named}: a {type(g).__name__}, not a function g(x, **params) returning the "
            "derivative the backward computes"
        )
    bound = accepted(g, params)
    surrogate = functools.partial(g, **bound)
    try:
        takes = list(inspect.signature(surrogate).parameters.values())
    except (TypeError, ValueError):  # one of torch's builtins: called as g(x)
        return surrogate
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in takes if p.kind in positional and p.default is p.empty]
    if (
        not takes
        or takes[0].kind not in (*positional, inspect.Parameter.VAR_POSITIONAL)
        or len(required) > 1
    ):
        shown = ", ".join(p.name for p in takes)
        raise ConfigError(
            f"{key}={named}: takes ({shown}) besides the params it is given; a surrogate is "
            "g(x, **params): the input, then the activation's params it names"
        )
    return surrogate


def as_activation(obj: object, params: dict[str, Any], path: str) -> Activation:
    """A Function gives its `apply`, a Module class an instance, a function itself; params bound."""
    positional = checked_params(obj, params, path)
    if takes_tensor_arguments(obj):
        call = calling(obj)
        if not positional:
            return call
        return lambda x: call(x, *positional)
    if is_module(obj):
        return obj(**params)
    if callable(obj):
        return functools.partial(obj, **params)
    raise ConfigError(f"{path!r} is a {type(obj).__name__}, not a Function, Module or function")


def changes_its_input(fn: Activation) -> bool:
    """Whether fn writes into the tensor it is given (an in-place forward): autograd then
    differentiates through values that are gone, and every metric of the layer reads the
    changed ones. Tried once on a small fixed input, never on the run's tensors. A ValueError
    is raised on: it is how a forward refuses its params (F.hardtanh's min_val > max_val, the
    shipped Spike's slope <= 0)."""
    x = torch.linspace(-2.0, 2.0, 64).reshape(8, 8)
    before = x.clone()
    try:
        with torch.no_grad():
            fn(x)
    except ValueError:
        raise
    except Exception:  # a Function for another device or shape: the probe cannot tell
        return False
    return not torch.equal(x, before)


def probed_in_place(fn: Activation, path: str, params: dict[str, Any]) -> bool:
    """changes_its_input(fn), with the ValueError by which its forward refuses its params as a
    ConfigError."""
    try:
        return changes_its_input(fn)
    except ValueError as error:
        if params:
            raise ConfigError(f"activation.params: {path} refuses them: {error}") from None
        raise ConfigError(
            f"activation.target={path}: its forward raised ValueError: {error}"
        ) from None


def chosen_by_the_user(obj: object) -> bool:
    """What a resumed run (its config read from a directory, not typed by the user) may run: a
    Function or Module class, one of torch's own activations, or a function from a module in
    the current directory."""
    if is_function(obj) or is_module(obj):
        return True
    module = inspect.getmodule(obj)
    if module is None:
        return False
    if module.__name__ in ("torch", "torch.nn.functional"):
        return True
    origin = getattr(module, "__file__", None)
    return origin is not None and Path(origin).resolve().is_relative_to(Path.cwd().resolve())


class ActivationLayer(nn.Module):
    """A Function (or a function) as the Module a model places where the activation goes: one
    per place (as timm's act_layer makes them), so that a forward hook sees each place apart.
    It returns its input's dtype (a spiking library's float32 mask, in a float64 run)."""

    def __init__(self, fn: Activation, name: str):
        super().__init__()
        self.fn, self.name = fn, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fn(x)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self) -> str:
        return self.name


# Makes a fresh activation Module at each call: what a model is built with.
ActivationFactory = Callable[[], nn.Module]


def layers_of(
    activation: Activation | type[nn.Module], name: str, params: dict[str, Any]
) -> ActivationFactory:
    """A factory of the activation's Modules: a Module class's own instances (a learnable
    activation's parameters, each place its own), else ActivationLayers of the callable."""
    if is_module(activation):
        return lambda: activation(**params)
    return lambda: ActivationLayer(activation, name)


def resolve_activation(
    path: str,
    params: dict[str, Any] | None = None,
    run_dir: Path | None = None,
    resumed: bool = False,
) -> ActivationFactory:
    """What a run trains with, as a factory of the Modules a model places (layers_of); one
    whose forward writes into its input is refused. A resumed run's target is what its
    directory says: only what chosen_by_the_user allows."""
    params = params or {}
    obj = import_object(path, run_dir=run_dir)
    if resumed and not chosen_by_the_user(obj):
        raise ConfigError(
            f"activation.target={path}: a resumed run runs only a Function or Module class, "
            "torch's activations, or a function from a module in the current directory"
        )
    activation = as_activation(obj, params, path)
    if probed_in_place(activation, path, params):
        raise ConfigError(
            f"activation.target={path}: its forward changes its input in place; autograd and "
            "the activation metrics would read values that are gone"
        )
    return layers_of(obj if is_module(obj) else activation, path, params)
