"""A run's data: the article's random regression, drawn from the run's seeded generator, or real
data (scikit-learn's digits, a file, a function of the user's) with a held-out split."""

import functools
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reluexp.config import Config, ConfigError
from reluexp.options import DataName
from reluexp.run.cifar import CIFAR10, CIFAR100, read_cifar

# More classes than this is a mistake in the labels, not a dataset (a label of 1e12 would ask
# for a 400 TB output layer).
MAX_CLASSES = 100_000


@dataclass
class Dataset:
    """Training inputs (N, ...): (N, D) features, or (N, C, H, W) images; targets: class
    indices (N,) for classification, values (N, D_out) for regression; a validation split,
    when there is one. Inputs of uint8 are pixels: kept as they are (a quarter of float32's
    memory), and what the model sees of them is `inputs()`."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    # Classification: how many classes (the model's output width); None for regression.
    classes: int | None = None
    # For pixels: the training split's per-channel mean and standard deviation of pixel / 255,
    # shaped (1, C, 1, ...) to broadcast over a batch.
    pixel_mean: torch.Tensor | None = None
    pixel_std: torch.Tensor | None = None

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """Examples of x or x_val as the model takes them: pixels scaled to [0, 1] and
        normalized per channel, in the run's dtype; other inputs as they are."""
        if self.pixel_mean is None:
            return x
        return (x.to(self.pixel_mean.dtype) / 255 - self.pixel_mean) / self.pixel_std

    @property
    def d_out(self) -> int:
        return self.classes if self.classes is not None else self.y.shape[1]

    def to(self, device: torch.device, dtype: torch.dtype) -> "Dataset":
        """Moved to the device once; inputs (but pixels), regression targets and the pixels'
        statistics in the run's dtype."""

        def move(t: torch.Tensor | None, values: bool) -> torch.Tensor | None:
            if t is None:
                return None
            return t.to(device, dtype) if values else t.to(device)

        regression, pixels = self.classes is None, self.pixel_mean is not None
        return Dataset(
            move(self.x, not pixels),
            move(self.y, regression),
            move(self.x_val, not pixels),
            move(self.y_val, regression),
            self.classes,
            move(self.pixel_mean, True),
            move(self.pixel_std, True),
        )


def make_data(
    n: int, d_in: int, d_out: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's random regression task: x (n, d_in) and y (n, d_out), standard normal, float32."""
    x = torch.randn(n, d_in, generator=generator)
    y = torch.randn(n, d_out, generator=generator)
    return x, y


def read_data(config: Config) -> list[torch.Tensor] | None:
    """Real data's arrays, read and checked (check_arrays): x, y and optionally x_val, y_val,
    on the CPU; None for the random data, which is drawn from the run's generator. Read once
    per data source in a process (read_source): a sweep's pre-flight and the jobs Hydra's
    basic launcher runs after it share the read; each gets its own copy."""
    data = config.data
    if data.name == DataName.random:
        return None
    # CIFAR's root, a file's path or a loader's dotted path (the digits ship in a package).
    source = next(
        (getattr(data, key) for key in ("root", "path", "loader") if hasattr(data, key)), None
    )
    arrays = read_source(data.name, source, files_stamp(source))
    arrays = [array.clone() for array in arrays]  # a model may write into its inputs
    check_split(arrays, config)
    if data.augment and arrays[0].dim() != 4:
        raise ConfigError(
            f"data.augment=true: crops and flips images (N, C, H, W); data={data.name.value}'s "
            f"inputs are {tuple(arrays[0].shape)}"
        )
    return arrays


def files_stamp(where: str | None) -> tuple:
    """When and how large the files at a data source's root or path are (a loader's dotted
    path names none): an edited file is read again."""
    if where is None or not Path(where).exists():
        return ()
    files = sorted(Path(where).rglob("*")) if Path(where).is_dir() else [Path(where)]
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file())


@functools.lru_cache(maxsize=1)
def read_source(name: DataName, source: str | None, stamp: tuple) -> tuple[torch.Tensor, ...]:
    """The arrays of one data source (its option, and its root, path or loader), read and
    checked, kept for the next read of the same source while its files are as they were
    (`stamp`; the last source only: CIFAR-10 is 180 MB)."""
    if name == DataName.digits:
        arrays = digits()
    elif name in (DataName.cifar10, DataName.cifar100):
        arrays = read_cifar(source, CIFAR10 if name == DataName.cifar10 else CIFAR100)
    elif name == DataName.file:
        arrays = read_file(Path(source))
    else:
        from reluexp.functions.targets import import_object, raised_at

        loader = import_object(source, "data.loader")
        try:
            arrays = loader()
        except Exception as error:
            raise ConfigError(f"data.loader={source}: {raised_at(error)}") from None
        if not isinstance(arrays, tuple | list) or len(arrays) not in (2, 4):
            raise ConfigError(
                f"data.loader={source}: returned {type(arrays).__name__}; expected "
                "(x, y) or (x, y, x_val, y_val)"
            )
    return tuple(check_arrays(list(arrays), f"data={name.value}"))


def check_split(arrays: list[torch.Tensor], config: Config) -> None:
    """What the data leaves to train on (data without a validation split is split by
    data.val_fraction, dataset()) must make at least one batch: a larger data.batch_size is
    refused, not cut to the data's size."""
    examples = len(arrays[0])
    batch = config.data.batch_size or 1
    if len(arrays) == 4:
        if examples < batch:
            raise ConfigError(
                f"data.batch_size={batch}: more than the data's {examples} training examples "
                "(null: the full batch)"
            )
        return
    held_out = held_out_of(examples, config.data.val_fraction)
    if examples - held_out < batch:
        size = f"a batch of data.batch_size={batch}" if config.data.batch_size else "one example"
        raise ConfigError(
            f"data.val_fraction={config.data.val_fraction}: holds out {held_out} of the "
            f"{examples} examples, leaving {examples - held_out} to train on, fewer than {size}"
        )


def held_out_of(examples: int, val_fraction: float) -> int:
    """How many of the examples a split by val_fraction holds out (at least one)."""
    return max(1, round(val_fraction * examples))


def load_data(
    config: Config, arrays: list[torch.Tensor] | None, generator: torch.Generator
) -> Dataset:
    """The run's data, on the CPU: the random data takes the seed's first draws from the
    generator (x, then y; the weights come next); real data (read_data's arrays) without a
    validation split is split by a permutation from it."""
    data = config.data
    if arrays is None:
        return Dataset(*make_data(data.n, data.d_in, data.d_out, generator))
    # CIFAR brings its validation split (its test split): no fraction to hold out.
    return dataset(arrays, getattr(data, "val_fraction", None), generator)


def digits() -> tuple[Any, Any]:
    """scikit-learn's bundled 8x8 digits: 1,797 images (N, 1, 8, 8), pixels from 0 to 16
    scaled to [0, 1], 10 classes."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError(
            "data=digits: needs scikit-learn, in reluexp's `data` extra: "
            "pip install 'reluexp[data]'"
        ) from None
    images, labels = load_digits(return_X_y=True)
    return (images / 16.0).reshape(-1, 1, 8, 8), labels


def read_file(path: Path) -> list[Any]:
    """x, y (and x_val, y_val) from a .npz (numpy.savez) or a .pt (torch.save of a dict of
    tensors, loaded with weights_only=True)."""
    where = f"data.path={path}"
    if path.is_dir():
        raise ConfigError(f"{where}: is a directory; expected a .npz or a .pt file")
    if not path.exists():
        raise ConfigError(f"{where}: no such file")
    if not path.is_file():  # a FIFO would block the read, a device never end it
        kind = (
            "a FIFO"
            if path.is_fifo()
            else "a device"
            if path.is_char_device() or path.is_block_device()
            else "not a regular file"
        )
        raise ConfigError(f"{where}: is {kind}; expected a .npz or a .pt file")
    try:
        if path.suffix == ".npz":
            import numpy

            with numpy.load(path, allow_pickle=False) as archive:
                contents = {key: archive[key] for key in archive.files}
        elif path.suffix == ".pt":
            contents = torch.load(path, map_location="cpu", weights_only=True)
        else:
            raise ConfigError(f"{where}: expected a .npz or a .pt file")
    except ConfigError:
        raise
    except pickle.UnpicklingError:
        # torch's message advises weights_only=False, which would run the file's code.
        raise ConfigError(
            f"{where}: refused: it holds more than tensors, and a data file's objects are "
            "never unpickled (nothing in it ran); save a dict of tensors"
        ) from None
    except Exception as error:
        raise ConfigError(f"{where}: unreadable ({type(error).__name__}: {error})") from None
    names = ["x", "y", "x_val", "y_val"]
    if not isinstance(contents, dict) or not {"x", "y"} <= contents.keys():
        raise ConfigError(f"{where}: needs arrays named x and y (and optionally x_val, y_val)")
    if ("x_val" in contents) != ("y_val" in contents):
        raise ConfigError(f"{where}: has one of x_val and y_val; give both, or neither")
    return [contents[name] for name in names if name in contents]


def check_arrays(arrays: list[Any], where: str) -> list[torch.Tensor]:
    """The arrays as CPU tensors, refused in one line unless they make a dataset: inputs
    (N, D) with one target each, finite; class targets integers 0..C-1, values finite."""
    names = ["x", "y", "x_val", "y_val"]
    tensors = []
    for name, array in zip(names, arrays):
        try:
            tensor = torch.as_tensor(array).cpu()
        except (TypeError, ValueError, RuntimeError) as error:
            raise ConfigError(f"{where}: {name} is not an array ({error})") from None
        if tensor.layout != torch.strided:
            raise ConfigError(
                f"{where}: {name} is a {str(tensor.layout).removeprefix('torch.')} tensor; "
                "expected a dense one (tensor.to_dense())"
            )
        if tensor.dtype == torch.bool or tensor.is_complex():
            raise ConfigError(f"{where}: {name} is {tensor.dtype}; expected numbers")
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ConfigError(f"{where}: {name} holds NaN or inf")
        tensors.append(tensor)
    classification = not tensors[1].is_floating_point()
    for x, y, split in ((0, 1, "training"), (2, 3, "validation"))[: len(tensors) // 2]:
        inputs, targets = tensors[x], tensors[y]
        if inputs.dim() < 2 or len(inputs) == 0 or targets.dim() == 0:
            raise ConfigError(
                f"{where}: {names[x]} must be (N, D) or (N, C, H, W) with N >= 1, got "
                f"{tuple(inputs.shape)}"
            )
        if len(inputs) != len(targets):
            raise ConfigError(
                f"{where}: {len(inputs)} {split} inputs but {len(targets)} targets "
                f"({names[x]} {tuple(inputs.shape)}, {names[y]} {tuple(targets.shape)})"
            )
        if classification and targets.dim() != 1:
            raise ConfigError(f"{where}: class targets must be (N,), got {tuple(targets.shape)}")
    if len(tensors) == 2 and len(tensors[0]) < 2:
        raise ConfigError(f"{where}: one example; a validation split needs at least two")
    if len(tensors) == 4 and tensors[0].shape[1:] != tensors[2].shape[1:]:
        raise ConfigError(f"{where}: training and validation inputs differ in shape")
    if classification:
        labels = torch.cat([t.reshape(-1) for t in tensors[1::2]])
        low, high = int(labels.min()), int(labels.max())
        if low != 0 or high >= MAX_CLASSES:
            raise ConfigError(
                f"{where}: class targets run from {low} to {high}; they must be 0..C-1 "
                f"(the model gets one output per class, C <= {MAX_CLASSES})"
            )
    return tensors


def data_sizes(arrays: list[torch.Tensor]) -> tuple[int, int, int]:
    """Real data's examples (all splits), input size (an example's elements) and output width
    (classes, or the targets' width)."""
    x, y = arrays[0], arrays[1]
    examples, d_in = sum(len(t) for t in arrays[::2]), x[0].numel()
    if y.is_floating_point():
        return examples, d_in, y.reshape(len(y), -1).shape[1]
    return examples, d_in, int(torch.cat([t.reshape(-1) for t in arrays[1::2]]).max()) + 1


def dataset(
    arrays: list[torch.Tensor], val_fraction: float | None, generator: torch.Generator
) -> Dataset:
    """A Dataset from check_arrays' tensors: classification when the targets are integers
    (class indices), regression otherwise; a held-out split of val_fraction when none was
    given; uint8 inputs kept as pixels (Dataset.inputs), others as float32."""
    x, y, *validation = arrays
    if not validation:
        order = torch.randperm(len(x), generator=generator)
        held_out = held_out_of(len(x), val_fraction)
        validation = [x[order[:held_out]], y[order[:held_out]]]
        x, y = x[order[held_out:]], y[order[held_out:]]
    x_val, y_val = validation
    pixels = x.dtype == torch.uint8
    statistics = pixel_statistics(x) if pixels else (None, None)
    if not pixels:
        x, x_val = x.float(), x_val.float()
    if y.is_floating_point():
        regression = [t.float().reshape(len(t), -1) for t in (y, y_val)]
        return Dataset(x, regression[0], x_val, regression[1], None, *statistics)
    classes = int(max(y.max(), y_val.max())) + 1
    return Dataset(x, y.long(), x_val, y_val.long(), classes, *statistics)


def pixel_statistics(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and standard deviation of pixel / 255 per channel (dim 1) over the training
    split, float32, shaped (1, C, 1, ...); a channel that never varies divides by 1e-6."""
    scaled = x.float() / 255
    over = [d for d in range(x.dim()) if d != 1]
    mean = scaled.mean(dim=over, keepdim=True)
    return mean, scaled.std(dim=over, keepdim=True).clamp(min=1e-6)
