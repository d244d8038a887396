"""CIFAR-10 and CIFAR-100 as their authors distribute them (https://www.cs.toronto.edu/~kriz/
cifar.html), read from data.root: the binary version (`data_batch_1.bin` ... `test_batch.bin`;
CIFAR-100's `train.bin`, `test.bin`) or the python version (`data_batch_1` ... `test_batch`;
`train`, `test`), whose pickles are read by an unpickler that builds nothing but the arrays,
lists and dicts those files hold: a crafted pickle runs nothing. The test split is the
validation split. Nothing is downloaded."""

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from reluexp.config import ConfigError

IMAGE = (3, 32, 32)
PIXELS = 3 * 32 * 32
WHERE = "https://www.cs.toronto.edu/~kriz/cifar.html"


@dataclass(frozen=True)
class Layout:
    """One dataset's files: the folders its archives extract to, each version's file names,
    the binary version's label bytes per record (the label is the last of them), the python
    version's label key, and its classes."""

    name: str
    folders: tuple[str, str]
    train: tuple[str, ...]
    test: str
    label_bytes: int
    label_key: bytes
    classes: int


CIFAR10 = Layout(
    "CIFAR-10",
    ("cifar-10-batches-bin", "cifar-10-batches-py"),
    tuple(f"data_batch_{i}" for i in range(1, 6)),
    "test_batch",
    1,
    b"labels",
    10,
)
# CIFAR-100's records hold the coarse label, then the fine one (the 100 classes).
CIFAR100 = Layout(
    "CIFAR-100",
    ("cifar-100-binary", "cifar-100-python"),
    ("train",),
    "test",
    2,
    b"fine_labels",
    100,
)

# What the python version's pickles may name: numpy's array reconstruction (numpy 1 and 2).
ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class ArraysOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}")
        return super().find_class(module, name)


def unpickled(path: Path) -> dict:
    """A python-version batch: its dict, built by ArraysOnly (Python 2's strings as bytes)."""
    try:
        found = ArraysOnly(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as error:
        raise ConfigError(f"data.root: {path} refused ({error}); nothing in it ran") from None
    if not isinstance(found, dict):
        raise ConfigError(f"data.root: {path} holds a {type(found).__name__}, not a CIFAR batch")
    return found


def python_batch(path: Path, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    batch = unpickled(path)
    images, labels = batch.get(b"data"), batch.get(layout.label_key)
    arrays = isinstance(images, np.ndarray) and isinstance(labels, list)
    if not (arrays and images.dtype == np.uint8 and images.shape[1:] == (PIXELS,)) or len(
        labels
    ) != len(images):
        raise ConfigError(f"data.root: {path} is not a {layout.name} batch (data, labels)")
    return images, np.asarray(labels, dtype=np.int64)


def binary_batch(path: Path, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, dtype=np.uint8)
    record = layout.label_bytes + PIXELS
    if raw.size == 0 or raw.size % record:
        raise ConfigError(
            f"data.root: {path} is not a {layout.name} binary batch ({raw.size} bytes, not "
            f"records of {record})"
        )
    records = raw.reshape(-1, record)
    return records[:, layout.label_bytes :], records[:, layout.label_bytes - 1].astype(np.int64)


def files(root: Path, layout: Layout) -> tuple[list[Path], Path, bool] | None:
    """The training files, the test file and whether they are the binary version, in root or
    in the folder its archive extracts to; None where neither version is complete."""
    for folder in (root, *(root / name for name in layout.folders)):
        for binary, suffix in ((True, ".bin"), (False, "")):
            train = [folder / f"{name}{suffix}" for name in layout.train]
            test = folder / f"{layout.test}{suffix}"
            if all(path.is_file() for path in [*train, test]):
                return train, test, binary
    return None


def read_cifar(root: str | None, layout: Layout) -> tuple[torch.Tensor, ...]:
    """x, y, x_val, y_val: the training images (N, 3, 32, 32) as their uint8 pixels (a run
    normalizes them per channel: data.Dataset), their labels, and the test split likewise."""
    key = f"data={layout.name.lower().replace('-', '')}"
    if root is None:
        raise ConfigError(f"{key}: needs data.root, the folder holding its files ({WHERE})")
    found = files(Path(root).expanduser(), layout)
    if found is None:
        raise ConfigError(
            f"data.root={root}: no {layout.name} there (the binary version's "
            f"{layout.train[0]}.bin ... {layout.test}.bin, or the python version's "
            f"{layout.train[0]} ... {layout.test}); download it from {WHERE} and extract it "
            "there (reluexp downloads nothing)"
        )
    train, test, binary = found
    read = binary_batch if binary else python_batch
    batches = [read(path, layout) for path in train]
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    test_images, test_labels = read(test, layout)
    for name, values in (("training", labels), ("test", test_labels)):
        if values.min() < 0 or values.max() >= layout.classes:
            raise ConfigError(f"data.root={root}: {name} labels outside 0..{layout.classes - 1}")
    return (
        torch.from_numpy(images).reshape(-1, *IMAGE),
        torch.from_numpy(labels),
        torch.from_numpy(test_images).reshape(-1, *IMAGE),
        torch.from_numpy(test_labels),
    )
