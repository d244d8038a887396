"""model=resnet and data=cifar10/cifar100: the paper's network, counted; CIFAR read from small
directories in both of its authors' versions; a crafted pickle refused without running."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from reluexp.config import ConfigError
from reluexp.run import runner
from reluexp.run.batches import Batches, augmented
from reluexp.run.cifar import CIFAR10, CIFAR100, read_cifar
from reluexp.run.data import Dataset, dataset
from reluexp.run.resnet import ResNet
from tests.helpers import cifar_images, run_stopped_at, scalars, write_cifar

pytestmark = pytest.mark.compat


@pytest.mark.parametrize(
    ("depth", "parameters"),
    # He et al. 2016, table 6: 0.27M, 0.46M, 0.66M, 0.85M.
    [(20, 269_722), (32, 464_154), (44, 658_586), (56, 853_018)],
)
def test_the_resnet_has_the_papers_parameters_and_an_activation_at_every_relu(depth, parameters):
    model = ResNet((3, 32, 32), 10, depth, [16, 32, 64], torch.nn.ReLU)
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert round(parameters / 1e6, 2) == {20: 0.27, 32: 0.46, 44: 0.66, 56: 0.85}[depth]
    assert sum(isinstance(m, torch.nn.ReLU) for m in model.modules()) == depth - 1
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("layout", [CIFAR10, CIFAR100], ids=["cifar10", "cifar100"])
def test_both_versions_read_as_the_same_images(tmp_path, layout):
    write_cifar(tmp_path / "bin", layout, binary=True)
    write_cifar(tmp_path / "py" / layout.folders[1], layout, binary=False)
    from_binary = read_cifar(str(tmp_path / "bin"), layout)
    # The python version found in the folder its archive extracts to.
    from_python = read_cifar(str(tmp_path / "py"), layout)
    for a, b in zip(from_binary, from_python, strict=True):
        assert torch.equal(a, b)
    x, y, x_val, y_val = from_binary
    assert x.shape == (40 * len(layout.train), 3, 32, 32) and x_val.shape == (40, 3, 32, 32)

    # Each record's pixels channel-major (R, G, B planes of 32x32), kept as uint8; the labels as
    # written. A run's model sees them normalized per channel by the training images' mean and
    # standard deviation, a batch at a time.
    def images_of(seeds):
        rows = [torch.from_numpy(cifar_images(40, seed, layout.classes)[0]) for seed in seeds]
        return torch.cat(rows).reshape(-1, 3, 32, 32)

    train, test = images_of(range(len(layout.train))), images_of([len(layout.train)])
    assert x.dtype == torch.uint8 and torch.equal(x, train) and torch.equal(x_val, test)
    assert y_val.tolist() == cifar_images(40, len(layout.train), layout.classes)[1]
    data = dataset(list(from_binary), 0.1, torch.Generator()).to(torch.device("cpu"), torch.float64)
    assert data.x.dtype == torch.uint8
    scaled = train.double() / 255
    mean = scaled.mean(dim=(0, 2, 3), keepdim=True)
    std = scaled.std(dim=(0, 2, 3), keepdim=True)
    # The statistics are float32's (as the run's float32 data would be normalized).
    close = {"rtol": 1e-6, "atol": 1e-6}
    torch.testing.assert_close(data.inputs(data.x[:7]), (scaled[:7] - mean) / std, **close)
    torch.testing.assert_close(data.inputs(data.x_val), (test.double() / 255 - mean) / std, **close)


class Touches:
    """What a crafted pickle would run: os.system touching a file."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.path}",))


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    write_cifar(tmp_path / "cifar", CIFAR10, binary=False)
    marker = tmp_path / "ran"
    (tmp_path / "cifar" / "data_batch_3").write_bytes(pickle.dumps({b"data": Touches(marker)}))
    with pytest.raises(ConfigError) as refused:
        read_cifar(str(tmp_path / "cifar"), CIFAR10)
    assert str(refused.value) == (
        f"data.root: {tmp_path / 'cifar' / 'data_batch_3'} refused (it names posix.system); "
        "nothing in it ran"
    )
    assert not marker.exists()


def rewrite_batch(path: Path, **changes) -> None:
    """A python-version batch with its fields changed (None: removed)."""
    batch = pickle.loads(path.read_bytes())
    for key, value in changes.items():
        batch[key.encode()] = value
        if value is None:
            del batch[key.encode()]
    path.write_bytes(pickle.dumps(batch, protocol=2))


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"data": None}, "no data, not a uint8 array of (images, 3072)"),
        ({"data": np.zeros((40, 3, 32, 32), np.uint8)}, "data of uint8 (40, 3, 32, 32), not"),
        ({"data": np.zeros((40, 3072), np.float32)}, "data of float32 (40, 3072), not uint8"),
        ({"labels": None}, "labels is none, not a list of class indices"),
        ({"labels": np.zeros(40)}, "labels is a ndarray, not a list of class indices"),
        ({"labels": [0] * 39}, "39 labels for 40 images"),
    ],
)
def test_a_python_batch_of_the_wrong_shape_names_its_field_and_value(tmp_path, changes, why):
    """58: it said only `is not a CIFAR-10 batch (data, labels)`."""
    write_cifar(tmp_path / "cifar", CIFAR10, binary=False)
    path = tmp_path / "cifar" / "data_batch_2"
    rewrite_batch(path, **changes)
    with pytest.raises(ConfigError) as refused:
        read_cifar(str(tmp_path / "cifar"), CIFAR10)
    assert str(refused.value).startswith(f"data.root: {path} is not a CIFAR-10 batch: {why}")


@pytest.mark.parametrize("binary", [True, False])
def test_a_label_outside_the_classes_names_its_file_field_value_and_record(tmp_path, binary):
    """58: it said `training labels outside 0..9`, without the file or the value."""
    write_cifar(tmp_path / "cifar", CIFAR10, binary=binary)
    name = "data_batch_4.bin" if binary else "data_batch_4"
    path = tmp_path / "cifar" / name
    if binary:
        raw = bytearray(path.read_bytes())
        raw[7 * 3073] = 12  # record 7's label byte
        path.write_bytes(bytes(raw))
        field = "label byte (byte 1 of each 3073-byte record)"
    else:
        labels = pickle.loads(path.read_bytes())[b"labels"]
        labels[7] = 12
        rewrite_batch(path, labels=labels)
        field = "labels"
    with pytest.raises(ConfigError) as refused:
        read_cifar(str(tmp_path / "cifar"), CIFAR10)
    assert str(refused.value) == (
        f"data.root: {path}'s {field}: label 12 of record 7 is outside 0..9 (CIFAR-10 has 10 "
        "classes)"
    )


def test_a_missing_root_is_one_line_saying_where_to_get_it(composed, tmp_path):
    with pytest.raises(ConfigError) as missing:
        runner.prepare(composed("data=cifar10", f"data.root={tmp_path}", "model=resnet"))
    assert str(missing.value) == (
        f"data.root={tmp_path}: no CIFAR-10 there (the binary version's data_batch_1.bin ... "
        "test_batch.bin, or the python version's data_batch_1 ... test_batch); download it "
        "from https://www.cs.toronto.edu/~kriz/cifar.html and extract it there (reluexp "
        "downloads nothing)"
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_resnet_trains_on_cifar_and_resumes_bit_for_bit(
    composed, tmp_path, monkeypatch, precision
):
    write_cifar(tmp_path / "cifar", CIFAR10, binary=True)
    overrides = [
        f"precision={precision}",
        "model=resnet",
        "data=cifar10",
        f"data.root={tmp_path / 'cifar'}",
        "data.batch_size=32",
        "data.augment=true",
        "optimizer=sgd",
        "optimizer.momentum=0.9",
        "optimizer.weight_decay=1e-4",
        "schedule=cosine",
        "lr=0.05",
        "steps=8",
        "eval_every=4",
        "checkpoint_every=4",
    ]
    whole = runner.run(composed(*overrides), tmp_path / "whole")
    assert whole.status == "completed"
    sites = [tag for tag in scalars(tmp_path / "whole") if tag.endswith("/dead_fraction")]
    assert len(sites) == 19 + 1  # every activation of ResNet-20, and all together
    run_stopped_at(composed(*overrides), tmp_path / "split", 4, monkeypatch)
    resumed = runner.resume(tmp_path / "split")
    assert resumed.status == "completed" and resumed.final_loss == whole.final_loss
    tags = ["loss/train", "norm/grad_total", "loss/val"]
    split, full = scalars(tmp_path / "split"), scalars(tmp_path / "whole")
    assert all(split[tag] == full[tag] for tag in tags)


def test_the_augmentation_crops_a_padded_image_and_flips_it():
    x = torch.arange(2 * 3 * 32 * 32, dtype=torch.float32).reshape(2, 3, 32, 32)
    generator = torch.Generator().manual_seed(0)
    shifts = torch.randint(0, 9, (2, 2), generator=generator)
    flipped = torch.rand(2, generator=generator) < 0.5
    got = augmented(x, torch.Generator().manual_seed(0))
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(2):
        dy, dx = shifts[0, i].item(), shifts[1, i].item()
        crop = padded[i, :, dy : dy + 32, dx : dx + 32]
        assert torch.equal(got[i], crop.flip(2) if flipped[i] else crop)
    # The same seed and step draw the same crops: a resumed run's batches are the run's.
    batches = Batches(Dataset(x, torch.zeros(2)), None, seed=3, augment=True)
    assert torch.equal(batches.at(7)[0], batches.at(7)[0])
    assert not torch.equal(batches.at(7)[0], batches.at(8)[0])


def test_mixed_precision_streams_float32_and_refuses_a_function_without_bfloat16(composed):
    config = composed("model=cnn", "data=digits", "precision=bf16", "steps=3", "log_every=1")
    result = runner.run(config)
    assert result.status == "completed"
    # The weights stay float32 (autocast's master weights), so do their gradients and norms.
    assert {p.dtype for p in result.state.model.parameters()} == {torch.float32}
    with pytest.raises(ConfigError) as refused:
        runner.prepare(
            composed(
                "model=cnn",
                "data=digits",
                "precision=bf16",
                "activation=custom",
                "activation.target=tests.corpus.NumpyCube",
            )
        )
    assert str(refused.value).startswith(
        "precision=bf16: activation.target=tests.corpus.NumpyCube in model=cnn, under autocast, "
        "raised TypeError: Got unsupported ScalarType BFloat16 ("
    )
    with pytest.raises(ConfigError, match="mixed precision keeps float32 weights: dtype=float32"):
        runner.prepare(composed("precision=bf16", "dtype=float64"))
