"""A run's data: the article's random regression, drawn from the run's seeded generator, or real
data (scikit-learn's digits, a file, a function of the user's) with a held-out split."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reluexp.config import Config, ConfigError, DataName, hidden_sizes


@dataclass
class Dataset:
    """Training inputs (N, D_in) and targets: class indices (N,) for classification, values
    (N, D_out) for regression; a validation split, when there is one."""

    x: torch.Tensor
    y: torch.Tensor
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    # Classification: how many classes (the model's output width); None for regression.
    classes: int | None = None

    @property
    def d_out(self) -> int:
        return self.classes if self.classes is not None else self.y.shape[1]

    def layer_sizes(self, hidden: Any) -> list[int]:
        """Widths from input to output: the data's input width, the hidden widths, its output."""
        return [self.x.shape[1], *hidden_sizes(hidden), self.d_out]

    def to(self, device: torch.device, dtype: torch.dtype) -> "Dataset":
        """Moved to the device once; inputs (and regression targets) in the run's dtype."""

        def move(t: torch.Tensor | None, values: bool) -> torch.Tensor | None:
            if t is None:
                return None
            return t.to(device, dtype) if values else t.to(device)

        regression = self.classes is None
        return Dataset(
            move(self.x, True),
            move(self.y, regression),
            move(self.x_val, True),
            move(self.y_val, regression),
            self.classes,
        )


def make_data(
    n: int, d_in: int, d_out: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's random regression task: x (n, d_in) and y (n, d_out), standard normal, float32."""
    x = torch.randn(n, d_in, generator=generator)
    y = torch.randn(n, d_out, generator=generator)
    return x, y


def load_data(config: Config, generator: torch.Generator) -> Dataset:
    """The configured data, on the CPU. The random data takes the seed's first draws from the
    generator (x, then y; the weights come next); real data without a validation split is
    split by a permutation from it."""
    data = config.data
    if data.name == DataName.random:
        return Dataset(*make_data(data.n, data.d_in, data.d_out, generator))
    if data.name == DataName.digits:
        arrays = digits()
    elif data.name == DataName.file:
        arrays = read_file(Path(data.path))
    else:
        from reluexp.functions.targets import import_object

        loader = import_object(data.loader, "data.loader")
        arrays = loader()
        if not isinstance(arrays, tuple | list) or len(arrays) not in (2, 4):
            raise ConfigError(
                f"data.loader={data.loader}: returned {type(arrays).__name__}; expected "
                "(x, y) or (x, y, x_val, y_val)"
            )
    return dataset(list(arrays), data.val_fraction, generator, f"data={data.name.value}")


def digits() -> tuple[Any, Any]:
    """scikit-learn's bundled 8x8 digits: 1,797 images of 64 pixels (0 to 16), 10 classes."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError(
            "data=digits: needs scikit-learn, in reluexp's `data` extra: "
            "pip install 'reluexp[data]'"
        ) from None
    images, labels = load_digits(return_X_y=True)
    return images / 16.0, labels


def read_file(path: Path) -> list[Any]:
    """x, y (and x_val, y_val) from a .npz (numpy.savez) or a .pt (torch.save of a dict of
    tensors, loaded with weights_only=True)."""
    where = f"data.path={path}"
    if not path.is_file():
        raise ConfigError(f"{where}: no such file")
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
    except Exception as error:
        raise ConfigError(f"{where}: unreadable ({type(error).__name__}: {error})") from None
    if not isinstance(contents, dict) or not {"x", "y"} <= contents.keys():
        raise ConfigError(f"{where}: needs arrays named x and y (and optionally x_val, y_val)")
    names = ["x", "y", "x_val", "y_val"] if "x_val" in contents else ["x", "y"]
    return [contents[name] for name in names]


def dataset(
    arrays: list[Any], val_fraction: float, generator: torch.Generator, where: str
) -> Dataset:
    """Tensors from arrays: classification when the targets are integers (class indices),
    regression otherwise; a held-out split of val_fraction when none was given."""
    x, y, *validation = [torch.as_tensor(a) for a in arrays]
    if not validation:
        order = torch.randperm(len(x), generator=generator)
        held_out = max(1, round(val_fraction * len(x)))
        validation = [x[order[:held_out]], y[order[:held_out]]]
        x, y = x[order[held_out:]], y[order[held_out:]]
    x_val, y_val = validation
    classification = not y.is_floating_point()
    for name, inputs, targets in (("training", x, y), ("validation", x_val, y_val)):
        if inputs.dim() != 2 or len(inputs) != len(targets) or len(inputs) == 0:
            raise ConfigError(
                f"{where}: the {name} inputs must be (N, D) with one target each, got "
                f"{tuple(inputs.shape)} and {tuple(targets.shape)}"
            )
        if classification and (targets.dim() != 1 or targets.min() < 0):
            raise ConfigError(f"{where}: class targets must be non-negative integers, (N,)")
    if x.shape[1] != x_val.shape[1]:
        raise ConfigError(f"{where}: training and validation inputs differ in width")
    if classification:
        classes = int(max(y.max(), y_val.max())) + 1
        return Dataset(x.float(), y.long(), x_val.float(), y_val.long(), classes)
    regression = [t.float().reshape(len(t), -1) for t in (y, y_val)]
    return Dataset(x.float(), regression[0], x_val.float(), regression[1])
