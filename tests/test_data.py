"""Beyond the article's random data: digits, a file, a loader of the user's; minibatches, a
held-out split and accuracy; activations that learn, trained and resumed like the weights."""

import builtins
import os
import signal

import numpy
import pytest
import torch

from reluexp.config import Config, ConfigError, Dtype
from reluexp.hydra_glue import compose_config
from reluexp.options import DataName
from reluexp.record import progress
from reluexp.record.events import read_scalars
from reluexp.run import runner
from reluexp.run.data import Dataset, read_source
from reluexp.run.losses import objective
from reluexp.shell.session import Session
from reluexp.shell.stops import StopSignals
from reluexp.validation import task_config, validate
from tests.helpers import run_cli, summary

pytestmark = pytest.mark.compat


def digits_config(**fields) -> Config:
    config = task_config(compose_config(["data=digits", "device=cpu", "steps=300"]))
    for key, value in fields.items():
        setattr(config, key, value)
    return config


def test_digits_reach_a_held_out_accuracy_the_same_for_the_same_seed(tmp_path):
    accuracies = {}
    for name, target in [("myrelu", "reluexp.functions.MyReLU"), ("relu", "torch.relu")]:
        config = digits_config()
        config.activation.name, config.activation.target = name, target
        runner.run(config, tmp_path / name)
        state = summary(tmp_path / name)
        assert state["status"] == "completed"
        accuracies[name] = state["val_accuracy"]
        # 360 held-out images of 1,797; the best pass and the last batch's accuracy recorded.
        assert state["best_val_accuracy"] >= state["val_accuracy"]
        assert 0 <= state["best_val_accuracy_step"] <= 299
        assert 0.8 < state["train_accuracy"] <= 1.0
    # Digits hold no exact-zero pre-activation: the two ReLUs train identically.
    assert accuracies["myrelu"] == accuracies["relu"] > 0.93
    # Streamed at each validation pass (every eval_every steps and the last): its loss and
    # accuracy, and the accuracy on that step's batch.
    tags = ["metric/accuracy_train", "loss/val", "metric/accuracy_val"]
    scalars = read_scalars(tmp_path / "relu", tags)
    passes = [*range(0, 300, 10), 299]
    assert sorted(scalars["metric/accuracy_val"]) == sorted(scalars["loss/val"]) == passes
    assert sorted(scalars["metric/accuracy_train"]) == passes
    assert scalars["metric/accuracy_val"][299] == pytest.approx(accuracies["relu"])


def interrupted_at(step: int, config: Config, run_dir, monkeypatch) -> None:
    """The run stopped by a SIGINT at a step boundary, as Ctrl-C leaves it: checkpointed."""
    update = progress.Progress.update

    def signal_at(self, reached):
        if reached == step:
            os.kill(os.getpid(), signal.SIGINT)
        update(self, reached)

    monkeypatch.setattr(progress.Progress, "update", signal_at)
    with (
        pytest.raises(runner.Interrupted),
        Session() as session,
        session.holding(StopSignals()) as stop,
    ):
        runner.run(config, run_dir, stop=stop)
    monkeypatch.setattr(progress.Progress, "update", update)


def test_minibatches_resume_to_the_same_series(tmp_path, monkeypatch):
    runner.run(digits_config(steps=40), tmp_path / "whole")
    # The batches of epoch e are drawn from the seed and e only: a resumed run sees the batches
    # the uninterrupted one saw (27 batches an epoch: the resume is mid-epoch).
    interrupted_at(30, digits_config(steps=40), tmp_path / "split", monkeypatch)
    assert summary(tmp_path / "split")["steps_done"] == 30
    runner.resume(tmp_path / "split")
    tags = ["loss/train", "metric/accuracy_train", "loss/val", "metric/accuracy_val"]
    assert read_scalars(tmp_path / "whole", tags) == read_scalars(tmp_path / "split", tags)


@pytest.mark.parametrize("suffix", [".npz", ".pt"])
def test_a_file_of_ones_own_classification_and_regression(tmp_path, suffix):
    generator = numpy.random.default_rng(0)
    x = generator.normal(size=(200, 5)).astype(numpy.float32)
    labels = (x[:, 0] > 0).astype(numpy.int64)  # learnable: the sign of the first input
    values = (x @ numpy.arange(5, dtype=numpy.float32))[:, None]
    # The summed squared error over 150 examples takes a far smaller step than cross-entropy.
    for task, y, lr in [("classification", labels, 0.1), ("regression", values, 1e-4)]:
        path = tmp_path / f"{task}{suffix}"
        if suffix == ".npz":
            numpy.savez(path, x=x[:150], y=y[:150], x_val=x[150:], y_val=y[150:])
        else:
            tensors = {"x": x[:150], "y": y[:150], "x_val": x[150:], "y_val": y[150:]}
            torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, path)
        config = task_config(
            compose_config(
                ["data=file", f"data.path={path}", "model.init=scaled", f"lr={lr}", "steps=100"]
            )
        )
        config.device = "cpu"
        runner.run(config, tmp_path / task)
        state = summary(tmp_path / task)
        assert state["status"] == "completed", state
        if task == "classification":
            assert state["val_accuracy"] > 0.85  # 50 held-out examples, given
        else:
            assert state["val_accuracy"] is None  # regression has no accuracy: null
            assert state["val_loss"] < state["min_loss"] * 50


def test_uint8_images_stay_pixels_and_the_model_sees_them_normalized(tmp_path):
    generator = numpy.random.default_rng(0)
    # Two channels of different brightness and spread; 60 examples, 12 held out.
    x = numpy.stack(
        [generator.integers(0, 60, (60, 4, 4)), generator.integers(100, 255, (60, 4, 4))], 1
    )
    path = tmp_path / "pixels.npz"
    numpy.savez(path, x=x.astype(numpy.uint8), y=numpy.arange(60) % 3)
    config = task_config(compose_config(["data=file", f"data.path={path}", "model=cnn"]))
    config.device = "cpu"
    data = runner.prepare(config).data
    assert data.x.dtype == data.x_val.dtype == torch.uint8 and data.x.shape == (48, 2, 4, 4)
    seen = data.inputs(data.x)
    assert seen.dtype == torch.float32
    # Each channel of the training split: mean 0, standard deviation 1.
    torch.testing.assert_close(seen.mean(dim=(0, 2, 3)), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(seen.std(dim=(0, 2, 3)), torch.ones(2), atol=1e-5, rtol=0)
    scaled = data.x_val.double() / 255
    train = data.x.double() / 255
    expected = (scaled - train.mean(dim=(0, 2, 3), keepdim=True)) / train.std(
        dim=(0, 2, 3), keepdim=True
    )
    torch.testing.assert_close(data.inputs(data.x_val).double(), expected, atol=1e-5, rtol=0)


def test_regression_on_ones_own_data_has_a_mean_loss_that_learns(tmp_path):
    """33.5: the README's regression file at the defaults (the summed loss, lr=1e-6) ends worse
    than predicting 0; loss=mean_squared_error, F.mse_loss, learns it."""
    generator = numpy.random.default_rng(0)
    x = generator.normal(size=(500, 8)).astype(numpy.float32)
    y = (numpy.sin(x[:, :1]) + 0.1 * x[:, 1:2]).astype(numpy.float32)
    numpy.savez(tmp_path / "reg.npz", x=x, y=y)
    data = ["data=file", f"data.path={tmp_path / 'reg.npz'}", "steps=500", "device=cpu"]
    mean = ["loss=mean_squared_error", "lr=1e-2", "model.init=scaled"]
    summed_run = runner.run(task_config(compose_config(data)), tmp_path / "summed")
    mean_run = runner.run(task_config(compose_config([*data, *mean])), tmp_path / "mean")
    assert summed_run.final_loss > float((y**2).sum())
    assert mean_run.final_loss < 0.2 * float((y**2).mean())
    weights = [torch.randn(8, 4), torch.randn(4, 1)]
    inputs, targets = torch.from_numpy(x), torch.from_numpy(y)
    loss_of = objective(Config(loss="mean_squared_error"), Dataset(inputs, targets))

    def model(batch):
        return torch.relu(batch @ weights[0]) @ weights[1]

    loss, logits = loss_of(model, inputs, targets)
    assert loss == torch.nn.functional.mse_loss(model(inputs), targets) and logits is None


def torchvision_mnist_format():
    """What a torchvision MNIST loader hands over (uint8 images (N, 28, 28), int64 targets),
    flattened as the README's loader does; made here, offline, without torchvision."""
    generator = torch.Generator().manual_seed(0)
    targets = torch.randint(0, 10, (300,), generator=generator)
    images = torch.zeros(300, 28, 28, dtype=torch.uint8)
    for row in range(2):  # two rows of the image give the class away
        images[torch.arange(300), targets * 2 + row, :] = 255
    noise = torch.randint(0, 40, (300, 28, 28), generator=generator, dtype=torch.uint8)
    images = (images.int() + noise).clamp(max=255).to(torch.uint8)
    x = images.flatten(1).float() / 255
    return x[:250], targets[:250], x[250:], targets[250:]


def test_a_loader_of_ones_own_in_torchvisions_format(tmp_path):
    config = task_config(
        compose_config(
            [
                "data=callable",
                "data.loader=tests.test_data.torchvision_mnist_format",
                "data.batch_size=50",
                "model.init=scaled",
                "lr=0.1",
                "steps=200",
            ]
        )
    )
    config.device = "cpu"
    runner.run(config, tmp_path)
    state = summary(tmp_path)
    assert state["status"] == "completed" and state["val_accuracy"] > 0.9
    assert state["config"]["data"]["name"] == DataName.callable.value


def test_data_mistakes_are_one_line(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def without_sklearn(name, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_sklearn)
    # The digits an earlier test in this process read are kept (the last source read).
    read_source.cache_clear()
    with pytest.raises(ConfigError, match=r"pip install 'reluexp\[data\]'"):
        runner.run(digits_config(), tmp_path / "digits")
    monkeypatch.setattr(builtins, "__import__", real_import)
    config = digits_config(loss="squared_error")
    with pytest.raises(ConfigError, match="loss=squared_error: the data's targets are class"):
        runner.run(config, tmp_path / "loss")
    numpy.savez(tmp_path / "bad.npz", features=numpy.zeros((3, 2)))
    config = task_config(compose_config(["data=file", f"data.path={tmp_path / 'bad.npz'}"]))
    with pytest.raises(ConfigError, match="needs arrays named x and y"):
        runner.run(config, tmp_path / "file")


GOOD_X = numpy.zeros((60, 3), dtype=numpy.float32)
GOOD_Y = numpy.arange(60) % 10


class Pickled:
    """Not a tensor: what a malicious .pt holds."""


# 31.8: what a data file holds -> the one line that refuses it.
BAD_DATA = {
    "nan in x": (
        {"x": numpy.full((60, 3), numpy.nan, dtype=numpy.float32), "y": GOOD_Y},
        "x holds NaN or inf",
    ),
    "labels 10..19": ({"x": GOOD_X, "y": GOOD_Y + 10}, "class targets run from 10 to 19"),
    "labels of 1e12": (
        {"x": GOOD_X, "y": numpy.full(60, 10**12)},
        "class targets run from 1000000000000 to 1000000000000",
    ),
    "60 inputs, 59 targets": (
        {"x": GOOD_X, "y": GOOD_Y[:59]},
        r"60 training inputs but 59 targets \(x \(60, 3\), y \(59,\)\)",
    ),
    "x_val without y_val": (
        {"x": GOOD_X, "y": GOOD_Y, "x_val": GOOD_X},
        "has one of x_val and y_val; give both, or neither",
    ),
    "0-d x": (
        {"x": numpy.float32(1.0), "y": GOOD_Y},
        r"x must be \(N, D\) or \(N, C, H, W\) with N >= 1, got \(\)",
    ),
}


@pytest.mark.parametrize("case", BAD_DATA)
def test_data_is_checked_before_anything_is_made(tmp_path, case):
    arrays, message = BAD_DATA[case]
    path = tmp_path / "data.npz"
    numpy.savez(path, **arrays)
    config = task_config(compose_config(["data=file", f"data.path={path}"]))
    # A file's own contents are named by its path; the arrays, by the data they make.
    with pytest.raises(ConfigError, match=rf"^data(=file|\.path=\S+): {message}"):
        runner.prepare(config)


def test_a_data_path_that_is_a_directory_or_a_pickle_is_refused_in_its_own_words(tmp_path):
    config = task_config(compose_config(["data=file", f"data.path={tmp_path}"]))
    with pytest.raises(ConfigError, match="is a directory; expected a .npz or a .pt file"):
        runner.prepare(config)
    marker = tmp_path / "ran"
    torch.save({"x": torch.zeros(3, 2), "y": Pickled()}, tmp_path / "evil.pt")
    config = task_config(compose_config(["data=file", f"data.path={tmp_path / 'evil.pt'}"]))
    with pytest.raises(ConfigError) as refused:
        runner.prepare(config)
    assert "holds more than tensors" in str(refused.value)
    assert "weights_only" not in str(refused.value)  # torch's advice, never passed on
    assert not marker.exists()


def test_a_data_path_that_is_no_regular_file_is_refused_without_reading_it(tmp_path):
    """42.5: a FIFO (whose read would block) and a link to /dev/zero (whose read never ends)
    were `no such file`."""
    fifo = tmp_path / "data.npz"
    os.mkfifo(fifo)
    zeros = tmp_path / "zeros.pt"
    zeros.symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO"), (zeros, "a device")):
        config = task_config(compose_config(["data=file", f"data.path={path}"]))
        with pytest.raises(ConfigError, match=rf"^data.path={path}: is {kind}; expected a .npz"):
            runner.prepare(config)


def raising_loader():
    return {}["x"]


def sparse_loader():
    x = torch.eye(60, 3).to_sparse()
    return x, torch.arange(60) % 10


@pytest.mark.parametrize(
    "loader, message",
    [
        ("raising_loader", r"raised KeyError: 'x' \(.*test_data.py:\d+\)"),
        (
            "sparse_loader",
            r"x is a sparse_coo tensor; expected a dense one \(tensor.to_dense\(\)\)",
        ),
    ],
)
def test_a_loaders_mistake_is_one_line_naming_it(loader, message):
    """42.5: a loader that raised was torch's or Python's traceback without its key; sparse
    tensors reached torch's backend error."""
    path = f"tests.test_data.{loader}"
    config = task_config(compose_config(["data=callable", f"data.loader={path}"]))
    with pytest.raises(ConfigError, match=rf"^data(.loader={path}|=callable): {message}"):
        runner.prepare(config)


@pytest.mark.parametrize("fraction, held_out", [(0.9999, 1797), (0.999, 1795), (0.95, 1707)])
def test_a_split_that_leaves_less_than_a_batch_is_refused(fraction, held_out):
    """42.5: 0.9999 made a run directory and failed in torch's max(); 0.999 trained on two
    examples of a batch of 128."""
    config = task_config(compose_config(["data=digits", f"data.val_fraction={fraction}"]))
    with pytest.raises(ConfigError) as refused:
        runner.prepare(config)
    assert str(refused.value) == (
        f"data.val_fraction={fraction}: holds out {held_out} of the 1797 examples, leaving "
        f"{1797 - held_out} to train on, fewer than a batch of data.batch_size=128"
    )
    config.data.batch_size = None  # the full batch: one example is a batch
    if held_out < 1797:
        runner.prepare(config)


def split_loader():
    """Twelve training examples and four held out, as a loader with its own split returns."""
    generator = torch.Generator().manual_seed(0)
    return (
        torch.randn(12, 3, generator=generator),
        torch.randn(12, 2, generator=generator),
        torch.randn(4, 3, generator=generator),
        torch.randn(4, 2, generator=generator),
    )


def test_a_batch_larger_than_the_training_examples_is_refused_for_every_data():
    """63: `data.batch_size=100` trained the article's 64 examples as a batch of 64 (cut
    silently), where the digits refused a batch their split could not fill."""
    with pytest.raises(ConfigError) as refused:
        validate(task_config(compose_config(["data.batch_size=100"])))
    assert str(refused.value) == (
        "data.batch_size=100: more than the data.n=64 examples (null: the full batch)"
    )
    loader = ["data=callable", "data.loader=tests.test_data.split_loader"]
    config = task_config(compose_config([*loader, "data.batch_size=13"]))
    with pytest.raises(ConfigError) as refused:
        runner.prepare(config)
    assert str(refused.value) == (
        "data.batch_size=13: more than the data's 12 training examples (null: the full batch)"
    )
    config.data.batch_size = 12  # the whole training split is a batch
    runner.prepare(config)


def test_real_datas_memory_check_names_its_own_sizes(monkeypatch):
    monkeypatch.setattr("reluexp.run.device.available_memory", lambda device: 2**18)
    config = task_config(compose_config(["data=digits"]))
    with pytest.raises(ConfigError, match=r"^data=digits \(1797 examples of 64 inputs, 10 outputs"):
        runner.prepare(config)


def test_the_memory_check_counts_uint8_pixels_as_bytes(tmp_path, monkeypatch):
    """75.4: images kept as uint8 pixels were counted as the run's float32: 4x their size."""
    pixels = numpy.zeros((3000, 3, 32, 32), dtype=numpy.uint8)  # 9.2 MB, 36.9 MB as float32
    path = tmp_path / "pixels.npz"
    numpy.savez(path, x=pixels, y=numpy.arange(3000) % 10)
    monkeypatch.setattr("reluexp.run.device.available_memory", lambda device: 20 * 2**20)
    overrides = ["data=file", f"data.path={path}", "model=cnn", "data.batch_size=10"]
    config = task_config(compose_config([*overrides, "device=cpu"]))
    assert runner.prepare(config).data.x.dtype == torch.uint8
    config.dtype = Dtype.float64  # the pixels stay uint8; the weights are what doubles
    runner.prepare(config)
    monkeypatch.setattr("reluexp.run.device.available_memory", lambda device: 8 * 2**20)
    with pytest.raises(ConfigError, match=r"^data=file \(3000 examples"):
        runner.prepare(config)


@pytest.mark.slow
def test_a_data_mistake_leaves_no_run_directory(tmp_path):
    path = tmp_path / "data.npz"
    numpy.savez(path, x=GOOD_X, y=GOOD_Y[:59])
    run_dir = tmp_path / "run"
    result = run_cli(
        "data=file", f"data.path={path}", f"hydra.run.dir={run_dir}", cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith("reluexp: error: data=file: 60 training inputs")
    assert not run_dir.exists()


def prelu_config(target: str, **fields) -> Config:
    config = Config(device="cpu", steps=200, lr=1e-4, **fields)
    config.model.init = "scaled"
    config.activation.name, config.activation.target = "prelu", target
    config.activation.reference = "torch.nn.PReLU"
    return config


def test_a_learnable_prelu_trains_like_the_builtin_and_its_slope_moves(tmp_path):
    runner.run(prelu_config("reluexp.functions.PReLU"), tmp_path / "custom")
    runner.run(prelu_config("torch.nn.PReLU"), tmp_path / "builtin")
    tags = ["loss/train", "param/act1.weight"]
    custom, builtin = (
        read_scalars(tmp_path / "custom", tags),
        read_scalars(tmp_path / "builtin", tags),
    )
    slope = list(custom["param/act1.weight"].values())
    assert slope[0] != 0.25 and abs(slope[-1] - 0.25) > 1e-3  # the slope trains
    for tag in tags:
        torch.testing.assert_close(
            torch.tensor(list(custom[tag].values())),
            torch.tensor(list(builtin[tag].values())),
            rtol=1e-4,
            atol=0,
        )


def test_a_learnable_activation_resumes_bit_for_bit(tmp_path, monkeypatch):
    runner.run(prelu_config("reluexp.functions.PReLU"), tmp_path / "whole")
    interrupted_at(100, prelu_config("reluexp.functions.PReLU"), tmp_path / "split", monkeypatch)
    runner.resume(tmp_path / "split")
    tags = ["loss/train", "param/act1.weight"]
    assert read_scalars(tmp_path / "whole", tags) == read_scalars(tmp_path / "split", tags)
