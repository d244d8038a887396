"""The Function trained inside the network one cares about: the shipped CNN, a user's factory,
model.replace in an existing architecture; what streams for any model, resume, the lab in it,
and a factory's mistakes."""

import json
import math
import subprocess
import sys
import time

import pytest
import torch

from reluexp.config import ConfigError
from reluexp.hydra_glue import compose_config
from reluexp.lab import check_function
from reluexp.record.events import read_events, read_scalars
from reluexp.run import runner
from reluexp.run.checkpoint import load_checkpoint
from reluexp.validation import task_config
from tests.helpers import REPO_ROOT, run_cli, run_stopped_at, summary

CNN_DIGITS = ["model=cnn", "data=digits", "device=cpu"]


def composed(*overrides: str):
    return task_config(compose_config([*overrides, "device=cpu", "quiet=true"]))


def test_a_models_parameters_and_activation_sites_stream_by_their_names(tmp_path):
    """41: every parameter's gradient and weight norm by its named_parameters name, each
    activation site's counters, and a Custom Scalars chart per layer."""
    result = runner.run(composed(*CNN_DIGITS, "steps=3", "log_every=1"), tmp_path)
    assert result.status == "completed"
    params = ["features.0.weight", "features.0.bias", "features.2.weight", "features.2.bias"]
    params += ["head.weight", "head.bias"]
    sites = ["features.1", "features.3"]
    tags = [f"norm/grad_{p}" for p in params] + [f"norm/weight_{p}" for p in params]
    tags += [f"units/{s}/{stat}" for s in sites for stat in ("dead_fraction", "exact_zeros")]
    streamed = read_scalars(tmp_path, tags)
    assert all(list(streamed[tag]) == [0, 1, 2] for tag in tags), tags
    # The norms are the parameters' (their weights after the last step's update).
    state = result.state.model.state_dict()
    for name in params:
        assert streamed[f"norm/weight_{name}"][2] == pytest.approx(
            state[name].double().norm().item(), rel=1e-6
        )
    layout = next(
        event.summary.value[0].tensor.string_val[0]
        for event in read_events(tmp_path)
        if event.summary.value and event.summary.value[0].tag == "custom_scalars__config__"
    )
    for layer in ("features.0", "features.2", "head"):
        assert f"gradient norm: {layer}".encode() in layout


def test_the_cnn_learns_the_digits_beside_the_builtin(tmp_path):
    """41: model=cnn on the bundled digits, myrelu beside relu, same seed: both learn it."""
    accuracies = {}
    for activation in ("myrelu", "relu"):
        runner.run(
            composed(*CNN_DIGITS, f"activation={activation}", "steps=150"), tmp_path / activation
        )
        accuracies[activation] = summary(tmp_path / activation)["val_accuracy"]
    assert min(accuracies.values()) > 0.85, accuracies


@pytest.mark.slow
def test_a_factory_from_a_file_in_the_working_directory_trains(tmp_path):
    """41: a user's own model from the command line, as they would write it."""
    (tmp_path / "my_models.py").write_text(
        "from torch import nn\n\n"
        "def build(activation, d_in, d_out):\n"
        "    return nn.Sequential(nn.Linear(d_in, 32), activation(), nn.Linear(32, d_out))\n"
    )
    run_dir = tmp_path / "run"
    run_cli(
        "model=custom",
        "model.target=my_models.build",
        "steps=5",
        "device=cpu",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    state = summary(run_dir)
    assert (
        state["status"] == "completed" and state["config"]["model"]["target"] == "my_models.build"
    )
    streamed = read_scalars(run_dir, ["norm/grad_0.weight", "units/1/exact_zeros"])
    assert list(streamed["norm/grad_0.weight"]) == list(range(5))
    assert list(streamed["units/1/exact_zeros"]) == list(range(5))
    # Resume asks again before it imports a factory that is not reluexp's or torch's.
    state["status"] = "interrupted"
    (run_dir / "summary.json").write_text(json.dumps(state))
    refused = run_cli(f"resume={run_dir}", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith(
        f"resume={run_dir} model=custom model.target=my_models.build"
    )
    resumed = run_cli(
        f"resume={run_dir}", "model=custom", "model.target=my_models.build", cwd=tmp_path
    )
    assert "completed after 5 steps" in resumed.stderr


def test_replacing_a_models_relus_changes_nothing_else(tmp_path):
    """41: every nn.ReLU swapped for torch.relu trains exactly as when swapped for a fresh
    nn.ReLU (the model as written); with myrelu, the swapped instances are the configured
    Function's."""
    factory = [
        "model=custom",
        "model.target=tests.models.with_relus",
        "model.replace=torch.nn.ReLU",
    ]
    factory.append("steps=40")
    as_written = runner.run(
        composed(*factory, "activation=custom", "activation.target=torch.nn.ReLU"),
        tmp_path / "written",
    )
    replaced = runner.run(composed(*factory, "activation=relu"), tmp_path / "relu")
    assert list(replaced.series.losses) == list(as_written.series.losses)
    mine = runner.run(composed(*factory, "activation=myrelu"), tmp_path / "myrelu")
    layers = [m for m in mine.state.model if type(m).__name__ == "ActivationLayer"]
    assert [layer.name for layer in layers] == ["reluexp.functions.MyReLU"] * 2
    assert not any(isinstance(m, torch.nn.ReLU) for m in mine.state.model)
    assert [site.name for site in mine.state.sites] == ["2", "4"]


def test_one_activation_module_called_twice_is_two_sites(tmp_path):
    run = composed("model=custom", "model.target=tests.models.one_activation_twice", "steps=2")
    result = runner.run(run, tmp_path)
    assert [site.name for site in result.state.sites] == ["act", "act#2"]
    assert set(read_scalars(tmp_path, ["units/act#2/dead_fraction"])["units/act#2/dead_fraction"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model.target=tests.models.raising"],
            "model.target=tests.models.raising: raised ValueError: no such architecture (",
        ),
        (
            ["model.target=tests.models.not_a_module"],
            "model.target=tests.models.not_a_module: returned list, not an nn.Module",
        ),
        (
            ["model.target=tests.models.without_parameters"],
            "model.target=tests.models.without_parameters: the model has no parameters to train",
        ),
        (
            ["model.target=tests.models.ignoring_the_activation"],
            "model.target=tests.models.ignoring_the_activation: the model holds no activation "
            "Module it was given: call `activation()` where the activation goes, or name the "
            "class the model uses, as model.replace=torch.nn.ReLU",
        ),
        (
            ["model.target=tests.models.wrong_output"],
            "model.target=tests.models.wrong_output: its output for 2 examples is (2, 13); the "
            "data's targets need (2, 10)",
        ),
        (
            ["model.target=tests.models.ignoring_the_activation", "model.replace=torch.nn.ReLU"],
            "model.replace=torch.nn.ReLU: the model has 0 instances of it",
        ),
        (["model.target=null"], "model.target=None: required with model=custom"),
        (
            ["model.target=tests.models.two_layer", "model.replace=torch.relu"],
            "model.replace=torch.relu: not an nn.Module class",
        ),
        (  # 51.4: it said "the model has no parameters to train"
            ["model.target=tests.models.two_layer", "model.replace=torch.nn.Module"],
            "model.replace=torch.nn.Module: the whole model is one, and so is every layer in it: "
            "name a layer class, such as torch.nn.ReLU",
        ),
    ],
    ids=[
        "raises",
        "not a Module",
        "no parameters",
        "ignores the activation",
        "wrong output",
        "replace finds none",
        "no target",
        "replace not a class",
        "replace every Module",
    ],
)
def test_a_factorys_mistake_is_one_line_before_anything_runs(overrides, message):
    """41: each one line (exit 2 from the command, no run directory: the next test)."""
    with pytest.raises(ConfigError) as refused:
        runner.prepare(composed("model=custom", *overrides))
    assert str(refused.value).startswith(message), str(refused.value)


@pytest.mark.slow
def test_a_factorys_mistake_from_the_command_line_leaves_no_directory(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "model=custom",
        "model.target=tests.models.wrong_output",
        f"hydra.run.dir={run_dir}",
        cwd=REPO_ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("reluexp: error: model.target=tests.models.wrong_output: ")
    assert len(result.stderr.splitlines()) == 1
    assert not run_dir.exists()


@pytest.mark.parametrize("activation", ["myrelu", "prelu"])
def test_a_factory_may_place_the_activation_as_a_module(tmp_path, activation):
    """49: `nn.Sequential(..., activation, ...)` (it was `TypeError: ... placed is not a Module
    subclass`): the Module placed trains, each of its calls a site that streams, and a learnable
    activation's parameter streams too."""
    run = composed(
        "model=custom",
        "model.target=tests.models.placing_the_module",
        "data=digits",
        f"activation={activation}",
        "steps=5",
        "log_every=1",
    )
    result = runner.run(run, tmp_path)
    assert result.status == "completed"
    tags = ["units/2/dead_fraction", "units/2#2/dead_fraction"]
    if activation == "prelu":
        tags.append("param/2.act.weight")
    scalars = read_scalars(tmp_path, tags)
    assert all(len(scalars[tag]) == 5 for tag in tags), scalars


def test_a_forward_that_fails_on_the_datas_shape_names_it_and_the_usual_fix():
    with pytest.raises(ConfigError) as refused:
        runner.prepare(
            composed("model=custom", "model.target=tests.models.without_flatten", "data=digits")
        )
    message = str(refused.value)
    assert message.startswith(
        "model.target=tests.models.without_flatten: the forward of the data's first inputs, "
        "of shape (2, 1, 8, 8), raised RuntimeError: mat1 and mat2 shapes cannot be multiplied"
    ), message
    assert message.endswith(
        "(linear layers take each example flat: start the model with nn.Flatten())"
    ), message


def test_the_cnn_refuses_data_that_is_not_images():
    with pytest.raises(ConfigError, match=r"^model=cnn: takes images .* examples are \(1000,\)"):
        runner.prepare(composed("model=cnn"))


def test_the_same_seed_with_dropout_is_the_same_run(tmp_path):
    """51.2: dropout draws from torch's generator, seeded from the run's seed at its start:
    two runs of one seed are bit-identical whatever the process drew before each (here torch's
    generator moved between them), and their checkpoints' generator states are equal."""
    overrides = [
        "model=custom",
        "model.target=tests.models.with_relus_and_dropout",
        "model.replace=torch.nn.ReLU",
        "data=digits",
        "data.batch_size=32",
        "steps=100",
        "log_every=1",
    ]
    first = runner.run(composed(*overrides), tmp_path / "first")
    torch.rand(7)
    second = runner.run(composed(*overrides), tmp_path / "second")
    tags = ["loss/train", "norm/grad_total"]
    assert read_scalars(tmp_path / "second", tags) == read_scalars(tmp_path / "first", tags)
    assert second.final_loss == first.final_loss
    states = [
        load_checkpoint(tmp_path / run, summary(tmp_path / run)["config"])["rng_cpu"]
        for run in ("first", "second")
    ]
    assert torch.equal(*states)
    other_seed = runner.run(composed(*overrides, "seed=1"), tmp_path / "other")
    assert other_seed.final_loss != first.final_loss


@pytest.mark.parametrize(
    "update",
    [
        ["optimizer=manual", "lr=0.05"],
        ["optimizer=adam", "lr=1e-3"],
        # 49: momentum and weight decay in the optimizer's state, the schedule from the step.
        [
            "optimizer=sgd",
            "optimizer.momentum=0.9",
            "optimizer.nesterov=true",
            "optimizer.weight_decay=1e-3",
            "schedule=cosine",
            "schedule.warmup=10",
            "lr=0.05",
        ],
    ],
    ids=["manual", "adam", "sgd_recipe"],
)
def test_any_model_resumes_bit_for_bit(tmp_path, update, monkeypatch):
    """41: model state, optimizer state, data order and torch's generator (dropout draws from
    it) come back from the checkpoint."""
    overrides = [
        "model=custom",
        "model.target=tests.models.with_relus_and_dropout",
        "model.replace=torch.nn.ReLU",
        "data=digits",
        *update,
        "steps=60",
        "checkpoint_every=20",
        "log_every=1",
    ]
    whole = runner.run(composed(*overrides), tmp_path / "whole")
    run_stopped_at(composed(*overrides), tmp_path / "split", 40, monkeypatch)
    resumed = runner.resume(
        tmp_path / "split", confirmed=["model.target=tests.models.with_relus_and_dropout"]
    )
    assert resumed.status == "completed"
    tags = ["loss/train", "norm/grad_total", "loss/val"]
    assert read_scalars(tmp_path / "split", tags) == read_scalars(tmp_path / "whole", tags)
    assert resumed.final_loss == whole.final_loss


DROPOUT_FACTORY = "model.target=tests.models.with_relus_and_dropout"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "confirmation"),
    [
        (CNN_DIGITS, []),
        # 51.2: dropout draws from torch's generator, which resumes from the checkpoint.
        (
            ["model=custom", DROPOUT_FACTORY, "model.replace=torch.nn.ReLU", "data=digits"],
            ["model=custom", DROPOUT_FACTORY],
        ),
    ],
    ids=["cnn", "dropout"],
)
def test_kill_9_and_resume_is_bit_identical(tmp_path, model, confirmation):
    """41: SIGKILL mid-run (no chance to checkpoint), then resume from the last checkpoint.
    Run from the repository, where `tests.models` imports (hydra.run.dir puts the runs in
    tmp_path)."""
    args = [*model, "device=cpu", "steps=400", "checkpoint_every=50", "print_every=1000000"]
    killed_dir, whole_dir = tmp_path / "killed", tmp_path / "whole"
    process = subprocess.Popen(
        [sys.executable, "-m", "reluexp", *args, f"hydra.run.dir={killed_dir}"],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (killed_dir / "checkpoint.pt").exists():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    process.kill()
    process.wait()
    assert summary(killed_dir)["status"] == "running"
    run_cli(f"resume={killed_dir}", *confirmation, cwd=REPO_ROOT)
    run_cli(*args, f"hydra.run.dir={whole_dir}", cwd=REPO_ROOT)
    tags = ["loss/train", "loss/val", "norm/grad_total"]
    assert read_scalars(killed_dir, tags) == read_scalars(whole_dir, tags)
    assert summary(killed_dir)["final_loss"] == summary(whole_dir)["final_loss"]


def test_the_lab_trains_its_parity_pair_in_the_configured_model():
    """41: the Function beside its oracle twin, in the CNN on the digits."""
    experiment = composed(*CNN_DIGITS, "activation=myrelu")
    report = check_function(
        "reluexp.functions.MyReLU", "torch.relu", experiment=experiment, dtypes=("float32",)
    )
    assert report.ok, str(report)
    parity = next(f for f in report.findings if f.check == "training parity")
    assert parity.detail.startswith("float64 runs beside its own forward differentiated")
    twin = report.facts["training"]["float64 twin"]
    assert twin["steps"] == 50 and math.isfinite(twin["final_loss"])


@pytest.mark.parametrize(
    ("input_shape", "depth", "widths"),
    [((3, 32, 32), 20, [16, 32, 64]), ((1, 8, 8), 8, [4, 6, 10]), ((3, 7, 5), 14, [2, 3])],
)
def test_a_resnets_size_is_known_from_its_shape_before_it_is_built(input_shape, depth, widths):
    """58: the memory pre-check counts a ResNet's parameters and activation outputs from its
    depth and widths, as the built model has them (odd image sides included)."""
    from reluexp.run.resnet import ResNet, resnet_sizes

    model = ResNet(input_shape, 10, depth, widths, torch.nn.ReLU)
    elements = []
    hooks = [
        module.register_forward_hook(lambda _, __, out: elements.append(out[0].numel()))
        for module in model.modules()
        if isinstance(module, torch.nn.ReLU)
    ]
    model(torch.zeros(1, *input_shape))
    for hook in hooks:
        hook.remove()
    parameters = sum(p.numel() for p in model.parameters())
    assert resnet_sizes(input_shape, 10, depth, widths) == (parameters, sum(elements))


def test_a_resnet_too_deep_for_the_machine_is_one_line_before_it_is_built(tmp_path):
    """58: model.depth=6000002 (a valid 6n + 2) grew the process to the machine's memory."""
    result = run_cli(
        "model=resnet", "data=digits", "model.depth=6000002", cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "reluexp: error: data=digits (1797 examples of 64 inputs, 10 outputs), "
        "model.depth=6000002 (97215977786 parameters): needs at least "
    )
    assert len(result.stderr.splitlines()) == 1 and not (tmp_path / "outputs").exists()
