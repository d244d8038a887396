"""Config composition, in-process: every YAML composes into the typed schema."""

import itertools
import json
import math
from dataclasses import asdict

import pytest
import torch
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from reluexp import hydra_glue
from reluexp.config import (
    OPTION_GROUPS,
    TENSORBOARD_POINTS,
    Config,
    ConfigError,
    Dtype,
    config_dict,
)
from reluexp.functions.targets import resolve_activation
from reluexp.hydra_glue import key_meanings
from reluexp.options import OPTION_SCHEMAS
from reluexp.validation import task_config, validate
from tests.helpers import EXPERIMENTS, SHIPPED_ACTIVATIONS

pytestmark = pytest.mark.compat


def test_defaults_are_the_reference_experiment(composed):
    config = composed()
    assert isinstance(config, Config)
    assert (config.data.n, config.data.d_in, config.model.hidden, config.data.d_out) == (
        64,
        1000,
        [100],
        10,
    )
    assert (config.lr, config.steps, config.seed, config.device) == (1e-6, 500, 42, "auto")
    assert config.activation.name == "myrelu" and config.dtype is Dtype.float32
    # log_every unset streams every one of the article's 500 steps.
    assert (config.log_every, config.streamed_every, config.print_every) == (None, 1, 100)
    # The defaults are the schema's: YAML states none of them again.
    assert asdict(config) == asdict(Config())


@pytest.mark.parametrize("name", SHIPPED_ACTIVATIONS)
def test_every_activation_composes_and_resolves(name, composed):
    config = composed(f"activation={name}")
    assert config.activation.name == name
    assert isinstance(resolve_activation(config.activation.target)(), torch.nn.Module)
    if config.activation.reference is not None:
        assert isinstance(resolve_activation(config.activation.reference)(), torch.nn.Module)


def test_custom_activation_needs_a_target(composed):
    with pytest.raises(ConfigError, match="activation.target=None: required"):
        validate(composed("activation=custom"))
    config = composed("activation=custom", "activation.target=torch.tanh")
    assert (
        resolve_activation(config.activation.target) is not None
        and config.activation.reference is None
    )


def test_activation_params_reach_the_callable(composed):
    config = composed("activation=leaky_relu", "activation.params.negative_slope=0.5")
    layer = resolve_activation(config.activation.target, config.activation.params)()
    assert layer(torch.tensor([-2.0])).item() == -1.0


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes(name):
    cfg = hydra_glue.compose_config([f"experiment={name}"])
    assert cfg.hydra.sweeper.params, f"{name} sweeps nothing"


def test_overrides_are_typed(composed):
    config = composed("lr=1e-3", "model.hidden=[64,32]", "dtype=float64", "threads=1")
    assert config.lr == 1e-3 and config.model.hidden == [64, 32]
    assert config.dtype is Dtype.float64 and config.threads == 1


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("stepz=3", "Key 'stepz' not in 'Config'"),
        ("data.width=3", "Key 'width' not in 'RandomDataConfig'"),
        ("lr=fast", "Value 'fast' of type 'str' could not be converted to Float"),
        ("dtype=float16", "Invalid value 'float16', expected one of [float32, float64]"),
        ("activation=nope", "Could not find 'activation/nope'"),
    ],
)
def test_bad_overrides_fail_at_compose_time_naming_the_key(override, message, composed):
    with pytest.raises(ConfigCompositionException) as raised:
        composed(override)
    assert message in str(raised.value) + str(raised.value.__cause__)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "+activaton=relu",
            "activaton: no such key, so nothing would read it; did you mean activation?",
        ),
        (
            "+model.hiden=[5]",
            "model.hiden: no such key, so nothing would read it; did you mean model.hidden?",
        ),
        ("+data.widht=3", "data.widht: no such key, so nothing would read it"),
    ],
)
def test_a_key_added_with_a_plus_that_nothing_reads_is_refused(override, message):
    with pytest.raises(ConfigError) as raised:
        task_config(hydra_glue.compose_config([override]))
    assert str(raised.value).startswith(message)


def test_a_custom_activations_new_param_is_read():
    cfg = hydra_glue.compose_config(
        ["activation=custom", "activation.target=torch.relu", "+activation.params.b=2"]
    )
    assert task_config(cfg).activation.params == {"b": 2}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lr", 0.0, "lr=0.0: must be finite and > 0"),
        ("lr", float("inf"), "lr=inf: must be finite and > 0"),
        ("steps", -1, "steps=-1: must be >= 0"),
        ("log_every", 0, "log_every=0: must be >= 1"),
        ("threads", 0, "threads=0: must be >= 1"),
    ],
)
def test_out_of_range_values_name_the_key(field, value, message):
    config = Config()
    setattr(config, field, value)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        validate(config)


@pytest.mark.parametrize(
    ("hidden", "message"), [(0, "every width must be >= 1"), ([], "expected an int or a list")]
)
def test_bad_hidden_sizes(hidden, message):
    config = Config()
    config.model.hidden = hidden
    with pytest.raises(ConfigError, match=message):
        validate(config)


def help_training_examples() -> list[list[str]]:
    """The single-run training examples of `--help` (conf/config.yaml's help template, its
    generated parts left unresolved)."""
    help_config = hydra_glue.compose_config([]).hydra.help
    template = OmegaConf.to_container(help_config, resolve=False)["template"]
    examples = []
    for line in template.splitlines():
        command = line.split("#")[0].split()
        if command[:3] == ["python", "-m", "reluexp"] and "-m" not in command[3:]:
            examples.append(command[3:])
    return examples


@pytest.mark.parametrize("overrides", help_training_examples(), ids=" ".join)
def test_every_help_example_trains(tmp_path, overrides, composed):
    """--help's examples produce runs that learn: no vanished gradients, the loss falls."""
    from reluexp.record.events import read_scalars
    from reluexp.run import runner

    config = composed(*overrides, "steps=200", "device=cpu", "quiet=true")
    runner.run(config, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["warnings"] == []
    losses = read_scalars(tmp_path, ["loss/train"])["loss/train"]
    assert losses[199] < losses[0] / 1000


def test_every_key_has_a_meaning_for_help():
    """A new field without a comment above it fails here, before --help shows it bare."""
    meanings = key_meanings()

    def keys(values: dict, prefix: str = "") -> list[str]:
        found = []
        for name, value in values.items():
            is_group = isinstance(value, dict) and name not in ("params", "reference_params")
            found += keys(value, f"{prefix}{name}.") if is_group else [prefix + name]
        return found

    every_option = set()
    names = {group: OPTION_SCHEMAS[base][0] for group, base in OPTION_GROUPS.items()}
    # Every option of every group at least once; a group with fewer options keeps its default.
    for options in itertools.zip_longest(*names.values()):
        config = Config(**{group: o.value for group, o in zip(names, options) if o is not None})
        chosen = {group: type(getattr(config, group)) for group in names}
        assert list(key_meanings(chosen)) == keys(config_dict(config))
        every_option |= set(keys(config_dict(config)))
    assert set(meanings) == every_option
    assert all(meanings.values()), [key for key, meaning in meanings.items() if not meaning]
    assert meanings["dtype"].endswith("One of: float32, float64.")
    assert meanings["model.init"].startswith("model=mlp: How the weights start.")
    assert meanings["model.depth"] == "model=resnet: Its layers, 6n + 2 (20, 32, 44, 56, 110)."
    assert meanings["model.init"].endswith(
        "randn: the seed's torch.randn weights; scaled: randn times sqrt(2 / fan_in)."
    )


def test_help_has_the_deeper_example():
    assert [
        "activation=relu",
        "model.hidden=[256,128]",
        "model.init=scaled",
        "lr=1e-4",
        "device=cpu",
    ] in help_training_examples()


def test_help_says_which_key_each_data_source_takes():
    """33.4: --help's data.path names data=file only; data=callable takes data.loader (and
    61.5: each data option has its own keys, said with the options that have them)."""
    meanings = key_meanings()
    assert meanings["data.path"].startswith("data=file: Required: the path of a .npz or .pt")
    assert meanings["data.loader"].startswith(
        "data=callable: Required: the dotted path of a function"
    )
    assert meanings["data.root"].startswith(
        "data=cifar10, data=cifar100: Required: the folder holding"
    )
    assert meanings["data.n"].startswith("data=random: Examples")


def test_a_c_builtins_unknown_param_is_refused_before_the_run():
    """31.10: torch.relu has no Python signature; a key it does not take is still one line at
    start-up, not a failure at step 0."""
    with pytest.raises(ConfigError) as refused:
        resolve_activation("torch.relu", {"foo": 1})
    assert str(refused.value) == (
        "activation.params: torch.relu refuses them: relu() got an unexpected keyword argument "
        "'foo'"
    )
    assert resolve_activation("torch.nn.functional.leaky_relu", {"negative_slope": 0.1})


@pytest.mark.parametrize("slope", [-1.0, 0.0, math.nan, math.inf])
def test_a_param_outside_the_range_its_function_documents_is_refused_at_start_up(slope):
    """31.4: Spike documents a finite slope > 0 and its forward raises ValueError otherwise, as
    F.hardtanh does for min_val > max_val; start-up says it in one line (slope=-1 trained with
    a gradient norm of 1e9 and no word)."""
    with pytest.raises(ConfigError) as refused:
        resolve_activation("reluexp.functions.Spike", {"slope": slope})
    assert str(refused.value) == (
        f"activation.params: reluexp.functions.Spike refuses them: slope={slope}: the "
        "surrogate's slope must be a finite number > 0"
    )
    assert resolve_activation("reluexp.functions.Spike", {"slope": 0.5})
    try:  # torch 2.3's hardtanh takes min_val > max_val without a word
        torch.nn.functional.hardtanh(torch.zeros(1), 2.0, 1.0)
    except ValueError:
        pass
    else:
        return
    with pytest.raises(ConfigError) as refused:
        resolve_activation("torch.nn.functional.hardtanh", {"min_val": 2.0, "max_val": 1.0})
    assert str(refused.value) == (
        "activation.params: torch.nn.functional.hardtanh refuses them: min_val cannot be "
        "greater than max_val"
    )


@pytest.mark.parametrize(
    ("steps", "log_every", "every"),
    [
        (500, None, 1),
        (1000, None, 1),
        (3000, None, 4),  # every 3rd and the last are 1,001 (74.5)
        (6001, None, 7),
        (3000, 1, 1),
        (3000, 10, 10),
    ],
)
def test_unset_log_every_streams_as_many_rows_as_tensorboard_keeps(steps, log_every, every):
    """60: at most 1,000 rows a tag (and the print steps and the last), evenly spaced."""
    config = Config(steps=steps, log_every=log_every)
    assert config.streamed_every == every


@pytest.mark.parametrize(
    ("overrides", "log_every", "eval_every"),
    [
        ([], 100, 1000),  # the paper's 64,000 steps: the preset's own
        (["steps=50"], 1, 10),  # a trial: 50 streamed points, 5 validation passes
        (["steps=3000"], 60, 600),
        (["steps=50", "log_every=7"], 7, 10),  # said on the command line: as said
    ],
)
def test_a_short_trial_of_the_papers_study_still_draws_curves(overrides, log_every, eval_every):
    """62.6: `experiment=cifar10_resnet20 steps=50` streamed steps 0 and 49 only (every 100),
    its loss line frozen at step 0's and two points a run on the dashboard."""
    config = task_config(
        hydra_glue.compose_config(["experiment=cifar10_resnet20", "data.root=/data", *overrides])
    )
    assert (config.log_every, config.eval_every) == (log_every, eval_every)


@pytest.mark.parametrize("steps", [999, 1000, 1001, 2000, 3000, 10_000, 64_000])
def test_the_default_cadence_streams_at_most_what_tensorboard_keeps(steps):
    """74.5: 2,000 steps streamed every other step and the 20 print steps off that grid, 1,020
    points, past the 1,000 TensorBoard's default sample keeps. Now the smallest spacing that
    fits, the print steps and the last included."""
    config = Config(steps=steps)

    def streamed(every: int) -> int:
        spaced = Config(steps=steps, log_every=every)
        return sum(spaced.streams_at(step) for step in range(steps))

    assert streamed(config.streamed_every) <= TENSORBOARD_POINTS
    if config.streamed_every > 1:
        assert streamed(config.streamed_every - 1) > TENSORBOARD_POINTS
