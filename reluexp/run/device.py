"""Where a run computes: the device a config names, and whether its tensors fit there."""

import psutil
import torch

from reluexp.config import Config, ConfigError
from reluexp.options import ModelName
from reluexp.run.model import Built
from reluexp.run.resnet import resnet_sizes


def resolve_device(name: str) -> torch.device:
    """`auto` picks the best device present; any other name must exist here."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    allowed = "expected auto, cpu, cuda, cuda:N or mps"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r}: {allowed}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name!r}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            raise ConfigError(f"device={name!r}: this machine has {count} CUDA device(s)")
    elif device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ConfigError(f"device={name!r}: MPS is not available on this machine")
    elif device.type != "cpu":
        raise ConfigError(f"device={name!r}: {allowed}")
    return device


def available_memory(device: torch.device) -> int | None:
    """Bytes the run can still allocate on the device; None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type == "cpu":
        # What the system can give without swapping, page cache included (not only free pages).
        return psutil.virtual_memory().available
    return None


def check_memory(
    config: Config,
    device: torch.device,
    data_sizes: tuple[int, int, int] | None = None,
    built: Built | None = None,
    input_shape: tuple[int, ...] | None = None,
    data_bytes: int | None = None,
) -> None:
    """Refuse sizes whose tensors cannot fit before allocating them (a lower bound of a step's
    peak: data, parameters with their gradients and optimizer state, each activation's input,
    output and gradient). Called before the model is built, with the data and the MLP's
    weights (the config gives their sizes), and once it is, with any other model's parameters
    and the activations its probe saw; a ResNet is counted before it is built, from its depth
    and widths and `input_shape` (an example's). data_sizes: real data's examples, input and
    output sizes; the random data's come from the config. data_bytes: real data's arrays as
    they are kept (images as uint8 pixels, labels as integers), not counted in the run's
    dtype."""
    mlp = config.model.name == ModelName.mlp
    if built is not None and mlp:  # counted before it was built
        return
    if data_sizes is None:
        n, d_in, d_out = config.data.n, config.data.d_in, config.data.d_out
        shown = f"data.n={n}, data.d_in={d_in}, data.d_out={d_out}"
    else:
        n, d_in, d_out = data_sizes
        shown = f"data={config.data.name.value} ({n} examples of {d_in} inputs, {d_out} outputs)"
    batch = min(n, config.data.batch_size or n)
    elements = n * (d_in + d_out) if data_bytes is None else 0
    if mlp:
        shown += f", model.hidden={config.model.hidden}"
        sizes = [d_in, *config.model.hidden, d_out]
        parameters = sum(a * b for a, b in zip(sizes, sizes[1:]))
        activations = batch * (sum(config.model.hidden) + d_out)
    elif built is not None:
        shown += f", the model's {sum(p.numel() for p in built.model.parameters())} parameters"
        parameters = sum(p.numel() for p in built.model.parameters())
        activations = batch * (sum(site.elements for site in built.sites) + d_out)
    elif (
        config.model.name == ModelName.resnet and input_shape is not None and len(input_shape) == 3
    ):
        model = config.model
        parameters, per_example = resnet_sizes(input_shape, d_out, model.depth, model.hidden)
        shown += f", model.depth={model.depth} ({parameters} parameters)"
        activations = batch * (per_example + d_out)
    else:
        parameters = activations = 0
    elements += 4 * parameters + 3 * activations
    needed = elements * getattr(torch, config.dtype.value).itemsize + (data_bytes or 0)
    available = available_memory(device)
    if available is not None and needed > available:
        raise ConfigError(
            f"{shown}: needs at least {needed / 2**30:.3g} GiB on {device}, "
            f"{available / 2**30:.3g} GiB available"
        )
