"""TensorBoard tag names, what the derived ones mean, and the Custom Scalars layout that arranges
them: the one place each is spelled. Tags are `family/name`. TensorBoard's Time Series tab
sorts families by character; its Scalars tab sorts a family whose name goes on with `_` or a
digit before the one it extends (`loss_gap` before `loss`) and opens the first two. So the
names are chosen for `loss` to sort first in both (then `lossgap_log10`, `lossrange_log10`,
`metric`, `norm`, `param`, `summary`, `units`)."""

import re

from reluexp.config import TENSORBOARD_POINTS, ConfigError

LOSS = "loss/train"
# The lr a step's update used, where a schedule changes it.
LR = "optimizer/lr"
# Under precision=fp16: the recorded steps so far that the gradient scaler skipped.
SKIPPED_STEPS = "optimizer/skipped_steps"
# A parameter's gradient norm (before the step's update) and its own norm (after it):
# `norm/grad_w1`, `norm/weight_w1`.
GRAD_NORM_PREFIX, WEIGHT_NORM_PREFIX = "norm/grad_", "norm/weight_"
GRAD_NORM_TOTAL = "norm/grad_total"
DEAD_FRACTION = "units/dead_fraction"
# Pre-activations exactly 0.0: where a ReLU's subgradient convention matters.
EXACT_ZEROS = "units/exact_zeros"
# Derived on the host for the charts: losses and norms span ten decades (a layout cannot set a
# log axis), and when exact zeros start shows as a step in a count.
LOSS_LOG10 = "loss/train_log10"
GRAD_NORM_TOTAL_LOG10 = "norm/grad_total_log10"
STEPS_WITH_EXACT_ZEROS = "units/steps_with_exact_zeros"
# With a validation split, at each validation pass: its loss and accuracy, and the accuracy on
# that step's batch (accuracies NaN for regression).
VALIDATION = ("loss/val", "metric/accuracy_val", "metric/accuracy_train")
DERIVED = (LOSS_LOG10, GRAD_NORM_TOTAL_LOG10, STEPS_WITH_EXACT_ZEROS)
# The HParams tab's metric columns: the final and lowest loss, written at the end of the run,
# and, for a custom run, its final loss relative to its reference run's (written by the report).
FINAL_LOSS_VS_REFERENCE = "summary/final_loss_vs_reference"
HPARAM_METRICS = ("summary/final_loss", "summary/min_loss", FINAL_LOSS_VS_REFERENCE)
# |relative loss gap| to the reference run, log10, where the two runs are identical: below any
# float64 difference (log10 of float64's smallest relative step is about -15.95).
IDENTICAL_LOG10 = -17.0


def activation_params(sizes: dict[str, int]) -> list[str]:
    """The activation Modules' own parameters by name and size: a scalar's value; a tensor's
    norm, mean, min and max."""
    found = []
    for name, size in sizes.items():
        if size == 1:
            found.append(f"param/{name}")
        else:
            found += [f"param/{name}_{stat}" for stat in ("norm", "mean", "min", "max")]
    return found


# Per activation site (a call of an activation Module, run.model.Site): the fraction of its
# units at 0 for the whole batch, its inputs exactly 0, and the extremes of its output.
SITE_STATISTICS = ("dead_fraction", "exact_zeros", "output_max", "output_min")


def site_tags(site: str) -> list[str]:
    return [f"units/{site}/{statistic}" for statistic in SITE_STATISTICS]


# A streamed row's named segments, in the order of its columns (record.metrics computes each).
LOSS_SEGMENT, GRAD_NORMS, GRAD_TOTAL, WEIGHT_NORMS = "loss", "grad_norms", "grad_total", "weights"
UNITS, SITES, ACTIVATION_PARAMS, OF_THE_STEP = "units", "sites", "activation_params", "of_the_step"


def segments(
    params: list[str],
    sites: list[str],
    activation_param_sizes: dict[str, int] | None = None,
    of_the_step: tuple[str, ...] = (),
) -> dict[str, list[str]]:
    """A streamed row's segments, by name, each with its tags, in the row's order: the loss,
    each parameter's gradient norm (by its named_parameters name), their total, each one's
    norm, the units over every site, each site's, the activation's own parameters, and the
    values known from the step alone (the scheduled lr). A tag that two values would share
    (a parameter named `total` against the total's) is a ConfigError in one line."""
    named = {
        LOSS_SEGMENT: [LOSS],
        GRAD_NORMS: [GRAD_NORM_PREFIX + n for n in params],
        GRAD_TOTAL: [GRAD_NORM_TOTAL],
        WEIGHT_NORMS: [WEIGHT_NORM_PREFIX + n for n in params],
        UNITS: [DEAD_FRACTION, EXACT_ZEROS],
        SITES: [tag for site in sites for tag in site_tags(site)],
        ACTIVATION_PARAMS: activation_params(activation_param_sizes or {}),
        OF_THE_STEP: list(of_the_step),
    }
    seen: set[str] = set(DERIVED)
    for tag in (tag for tags in named.values() for tag in tags):
        if tag in seen:
            raise ConfigError(
                f"two streamed values would share the tag {tag}: rename the model's parameter "
                "or activation site that streams under it (a parameter named `total` is the "
                "total gradient norm's)"
            )
        seen.add(tag)
    return named


def streamed(
    params: list[str],
    sites: list[str],
    activation_param_sizes: dict[str, int] | None = None,
    of_the_step: tuple[str, ...] = (),
) -> list[str]:
    """The tags of one streamed metric row, in order (segments())."""
    named = segments(params, sites, activation_param_sizes, of_the_step)
    return [tag for tags in named.values() for tag in tags]


GAP_FAMILY, RANGE_FAMILY = "lossgap_log10", "lossrange_log10"


def loss_gap(group: str) -> str:
    """A custom group's log10 |relative loss gap| to its reference, one tag per pair: each
    pair gets its own chart, its seeds the lines."""
    return f"{GAP_FAMILY}/{group}"


def loss_band(group: str) -> tuple[str, str, str]:
    """A group's log10 loss over its seeds: mean, min, max (a margin chart's line and band)."""
    return tuple(f"{RANGE_FAMILY}/{group}/{stat}" for stat in ("mean", "min", "max"))


# What each tag a run streams means (description()), TensorBoard's (i) beside its chart.
MEANINGS = {
    LOSS: "the training loss of the step's batch, before the step's update",
    LR: "the learning rate the step's update used (the schedule's)",
    SKIPPED_STEPS: "recorded steps so far whose update fp16's gradient scaler skipped "
    "(a gradient that overflowed float16 once unscaled)",
    GRAD_NORM_TOTAL: "the L2 norm of every trained parameter's gradient together, before the "
    "step's update",
    DEAD_FRACTION: "the fraction of the activation's units (a channel, for images) that are 0 "
    "for every example of the batch, over every site",
    EXACT_ZEROS: "pre-activations exactly 0.0 in the step's batch, over every site: where a "
    "ReLU's subgradient convention decides the gradient",
    LOSS_LOG10: "log10 of loss/train",
    GRAD_NORM_TOTAL_LOG10: "log10 of norm/grad_total",
    STEPS_WITH_EXACT_ZEROS: "streamed steps so far with an exact-zero pre-activation",
    "loss/val": "the loss on the validation split, at each validation pass",
    "metric/accuracy_val": "the accuracy on the validation split, at each validation pass",
    "metric/accuracy_train": "the accuracy on the step's batch, at each validation pass",
}
# By a tag's prefix or suffix: each parameter's and each activation site's.
SITE_MEANINGS = {
    "dead_fraction": "the fraction of this site's units that are 0 for every example of the batch",
    "exact_zeros": "this site's pre-activations exactly 0.0 in the step's batch",
    "output_max": "the largest value this site's activation gave in the step's batch",
    "output_min": "the smallest value this site's activation gave in the step's batch",
}


def description(tag: str) -> str | None:
    """What a tag's values mean, for the Scalars tab, which shows it behind an (i) beside its
    chart (a derived tag's chart has no Custom Scalars title to explain it)."""
    family = tag.split("/", 1)[0]
    if family == GAP_FAMILY:
        return (
            "log10 of |loss - reference loss| / reference loss at each step, against the run of "
            f"the same config and seed with the activation's reference; {IDENTICAL_LOG10:g} "
            "where the two losses are identical (below any float64 difference)"
        )
    if family == RANGE_FAMILY:
        return "log10 of the loss over the group's seeds at each step: their mean, min or max"
    if tag in MEANINGS:
        return MEANINGS[tag]
    if tag.startswith(GRAD_NORM_PREFIX):
        return f"the L2 norm of {tag.removeprefix(GRAD_NORM_PREFIX)}'s gradient, before the update"
    if tag.startswith(WEIGHT_NORM_PREFIX):
        return f"the L2 norm of {tag.removeprefix(WEIGHT_NORM_PREFIX)} after the step's update"
    if family == "units" and tag.count("/") == 2:
        return SITE_MEANINGS.get(tag.rpartition("/")[2])
    if family == "param":
        return (
            "the activation's own parameter after the step's update (a tensor's norm, mean, "
            "min or max)"
        )
    return None


# A chart is a list of tag regexes (a line per matching run and tag) or a list of tag triples
# (value, lower, upper): a margin chart, a line and its band per triple.
Chart = list[str] | list[tuple[str, str, str]]


def layer_of(param: str) -> str:
    """The layer a parameter belongs to, as charts group them: its Module's path
    (`features.0.weight` -> `features.0`); a model's own parameters (the MLP's w1, w2, b1)
    make one group."""
    return param.rsplit(".", 1)[0] if "." in param else "the model's own parameters"


def by_layer(prefix: str, params: list[str]) -> dict[str, Chart]:
    """A chart per layer of its parameters' tags under prefix."""
    layers: dict[str, list[str]] = {}
    for param in params:
        layers.setdefault(layer_of(param), []).append(re.escape(prefix + param))
    return layers


def layout(params: list[str], sites: list[str]) -> dict[str, dict[str, Chart]]:
    """A run's Custom Scalars tab, in reading order: {category: {chart: tags}}; its gradient
    and weight norms a chart per layer. A sweep's report adds, first in the tab, a chart per
    custom/reference pair and the band per group."""
    return {
        "loss": {"log10 loss, every run": [re.escape(LOSS_LOG10)]},
        "gradients": {
            "log10 total gradient norm": [re.escape(GRAD_NORM_TOTAL_LOG10)],
            **{
                f"gradient norm: {layer}": tags
                for layer, tags in by_layer(GRAD_NORM_PREFIX, params).items()
            },
        },
        "activation counters": {
            "logged steps with an exact-zero pre-activation (cumulative)": [
                re.escape(STEPS_WITH_EXACT_ZEROS)
            ],
            "pre-activations exactly 0, per step": [
                re.escape(EXACT_ZEROS),
                *(re.escape(f"units/{site}/exact_zeros") for site in sites),
            ],
            "dead fraction of hidden units": [
                re.escape(DEAD_FRACTION),
                *(re.escape(f"units/{site}/dead_fraction") for site in sites),
            ],
            "activation output, max and min": [
                re.escape(f"units/{site}/{extreme}")
                for site in sites
                for extreme in ("output_max", "output_min")
            ],
        },
        "weights": {
            **{
                f"weight norm: {layer}": tags
                for layer, tags in by_layer(WEIGHT_NORM_PREFIX, params).items()
            },
            "the activation's own parameters": [r"param/.*"],
        },
    }


def quoted(command: str) -> str:
    """A command inside a line of prose, between backticks: copied from a terminal, the
    sentence's period or comma after it is not part of it."""
    return f"`{command}`"


def dashboard_command(logdir: str, rows: int | None) -> str:
    """`tensorboard --logdir DIR`, keeping every streamed point where a tag has more of them
    than TensorBoard's default sample (a random TENSORBOARD_POINTS)."""
    keep = f" --samples_per_plugin=scalars={rows}" if rows and rows > TENSORBOARD_POINTS else ""
    return f"tensorboard --logdir {logdir}{keep}"
