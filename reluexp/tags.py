"""TensorBoard tag names and the Custom Scalars layout that arranges them: the one place either
is spelled. Tags are `family/name`."""

LOSS = "loss/train"
GRAD_NORM_TOTAL = "grad_norm/total"
DEAD_FRACTION = "activation/dead_fraction"
# Pre-activations exactly 0.0: where a ReLU's subgradient convention matters.
EXACT_ZEROS = "activation/exact_zeros"
# Derived on the host for the charts: losses and norms span ten decades (a layout cannot set a
# log axis), and when exact zeros start shows as a step in a count.
LOSS_LOG10 = "loss/train_log10"
GRAD_NORM_TOTAL_LOG10 = "grad_norm/total_log10"
STEPS_WITH_EXACT_ZEROS = "activation/steps_with_exact_zeros"
# With a validation split, at each validation pass: its loss and accuracy, and the accuracy on
# that step's batch (accuracies NaN for regression).
VALIDATION = ("loss/val", "accuracy/val", "accuracy/train")
DERIVED = (LOSS_LOG10, GRAD_NORM_TOTAL_LOG10, STEPS_WITH_EXACT_ZEROS)
# Scalars the HParams tab sorts runs by; written once, at the end of the run.
HPARAM_METRICS = ("hparams/final_loss", "hparams/min_loss")
# Written after the runs: each custom run's loss against its built-in reference's (same config
# and seed), and per group of seeds the loss's mean, min and max (log10).
DIFFERENCE = "difference/loss_vs_reference"
GROUP = ("group/loss_mean_log10", "group/loss_min_log10", "group/loss_max_log10")


def weight_names(num_weights: int) -> list[str]:
    return [f"w{i}" for i in range(1, num_weights + 1)]


def activation_params(sizes: dict[str, int]) -> list[str]:
    """An activation's own parameters by name and size: a scalar's value; a tensor's norm,
    mean, min and max."""
    found = []
    for name, size in sizes.items():
        if size == 1:
            found.append(f"activation_param/{name}")
        else:
            found += [f"activation_param/{name}_{stat}" for stat in ("norm", "mean", "min", "max")]
    return found


def streamed(num_weights: int, param_sizes: dict[str, int] | None = None) -> list[str]:
    """The tags of one streamed metric row, in order (metrics.MetricStream.host_row)."""
    names = weight_names(num_weights)
    return [
        LOSS,
        *(f"grad_norm/{n}" for n in names),
        GRAD_NORM_TOTAL,
        *(f"weight_norm/{n}" for n in names),
        DEAD_FRACTION,
        EXACT_ZEROS,
        *activation_params(param_sizes or {}),
    ]


# The Custom Scalars tab, in reading order: {category: {chart: tags}}; a tuple of three tags
# is a margin chart (value, lower, upper: a line and its band).
LAYOUT: dict[str, dict[str, list[str] | tuple[str, str, str]]] = {
    "loss": {
        "log10 loss, every run": [LOSS_LOG10],
        "relative loss difference to the built-in reference run (0 until they part)": [DIFFERENCE],
        "log10 loss per group of seeds: mean, min-max band": GROUP,
    },
    "gradients": {
        "log10 total gradient norm": [GRAD_NORM_TOTAL_LOG10],
        "gradient norm per weight": [r"grad_norm/w\d+"],
    },
    "activation counters": {
        "logged steps with an exact-zero pre-activation (cumulative)": [STEPS_WITH_EXACT_ZEROS],
        "pre-activations exactly 0, per step": [EXACT_ZEROS],
        "dead fraction of hidden units": [DEAD_FRACTION],
    },
    "weights": {
        "weight norm per weight": [r"weight_norm/.*"],
        "the activation's own parameters": [r"activation_param/.*"],
    },
}
