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
    field = f"{path}'s {layout.label_key.decode()}"
    if not isinstance(images, np.ndarray):
        found = "no data" if images is None else f"data a {type(images).__name__}"
        why = f"{found}, not a uint8 array of (images, {PIXELS})"
    elif images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != PIXELS:
        why = f"data of {images.dtype} {images.shape}, not uint8 (images, {PIXELS})"
    elif not isinstance(labels, list):
        found = "none" if labels is None else f"a {type(labels).__name__}"
        why = f"{layout.label_key.decode()} is {found}, not a list of class indices"
    elif len(labels) != len(images):
        why = f"{len(labels)} {layout.label_key.decode()} for {len(images)} images"
    else:
        return images, checked_labels(np.asarray(labels, dtype=np.int64), field, layout)
    raise ConfigError(f"data.root: {path} is not a {layout.name} batch: {why}")


def binary_batch(path: Path, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    raw = np.fromfile(path, dtype=np.uint8)
    record = layout.label_bytes + PIXELS
    if raw.size == 0 or raw.size % record:
        raise ConfigError(
            f"data.root: {path} is not a {layout.name} binary batch ({raw.size} bytes, not "
            f"records of {record})"
        )
    records = raw.reshape(-1, record)
    field = f"{path}'s label byte (byte {layout.label_bytes} of each {record}-byte record)"
    labels = records[:, layout.label_bytes - 1].astype(np.int64)
    return records[:, layout.label_bytes :], checked_labels(labels, field, layout)


def checked_labels(labels: np.ndarray, field: str, layout: Layout) -> np.ndarray:
    """The labels, each a class of the layout; else one line naming the file's field, the
    first label outside and its record."""
    outside = np.flatnonzero((labels < 0) | (labels >= layout.classes))
    if outside.size:
        at = int(outside[0])
        raise ConfigError(
            f"data.root: {field}: label {labels[at]} of record {at} is outside "
            f"0..{layout.classes - 1} ({layout.name} has {layout.classes} classes)"
        )
    return labels


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
    return (
        torch.from_numpy(images).reshape(-1, *IMAGE),
        torch.from_numpy(labels),
        torch.from_numpy(test_images).reshape(-1, *IMAGE),
        torch.from_numpy(test_labels),
    )
