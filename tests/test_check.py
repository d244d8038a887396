"""The Function lab: Functions written by others pass, planted bugs fail, each verdict says what
it means, naming the user's class and the input."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from reluexp import check
from tests import corpus
from tests.helpers import seed_loop
from tests.test_config import ACTIVATIONS

pytestmark = pytest.mark.compat

# Enough steps for training parity to part (or not); the default 500 is the CLI's.
STEPS = "steps=100"


def run_check(tmp_path, *overrides, capsys=None):
    code = check.main([*overrides, f"hydra.run.dir={tmp_path}"])
    path = tmp_path / "check.json"
    report = json.loads(path.read_text()) if path.exists() else None
    return code, report


def statuses(report):
    return {c["check"]: c["status"] for c in report["checks"]}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_shipped_activation_passes(tmp_path, name):
    code, report = run_check(tmp_path, f"activation={name}")
    assert code == 0 and report["passed"], report["checks"]
    assert not set(statuses(report).values()) & set(check.FAILING)


@pytest.mark.parametrize("name", corpus.CORRECT)
def test_a_correct_function_written_by_others_passes(tmp_path, capsys, name):
    code, report = run_check(tmp_path, *corpus.CORRECT[name], STEPS)
    failing = [c for c in report["checks"] if c["status"] in check.FAILING]
    assert code == 0 and not failing, failing
    assert "gradients correct" in capsys.readouterr().out.splitlines()[-1]


# What each planted bug's first failing line must say (its user's class, the input, the cause).
PLANTED_LINES = {
    "doubled": r"WRONG gradcheck \(4, 5\): backward at x\[0, 0\]=-6\.93\S* \(float64\): "
    r"got -0\.0115\d*, finite differences -0\.00578",
    "wrong_constant": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=\S+ \(float64\): "
    r"got \S+, finite differences",
    "wrong_sign_by_a_kink": r"WRONG gradcheck \(4, 5\): backward at x\[\d, \d\]=0\.\d+ "
    r"\(float64\): got -1\.0, finite differences 1\.0",
    "wrong_shape": r"WRONG returns a tensor, leaves its input alone: raised RuntimeError: "
    r"WrongShape\.backward returned an invalid gradient at index 0 - got \[5\] but expected "
    r"shape compatible with \[4, 5\]",
    "tuple_return": r"WRONG returns a tensor, leaves its input alone: forward returned a tuple "
    r"of 2, not a tensor",
    "in_place": r"WRONG returns a tensor, leaves its input alone: forward changed its input in "
    r"place",
    "overflowing_forward": r"FAILS AT LARGE INPUTS large inputs float32: forward at "
    r"x\[2\]=100\.0 \(float32\): got inf, reference 100\.0.*non-finite from x=8\d\.\d+ on, "
    r"where exp\(x\) overflows float32: .*relu\(x\) \+ log1p\(exp\(-\|x\|\)\)",
    "wrong_for_large_inputs": r"WRONG large inputs float32: backward at x\[2\]=100\.0 "
    r"\(float32\): got 0\.0, reference 1\.0",
    "wrong_in_float64": r"WRONG gradcheck \(4, 5\): backward at x\[0, 0\]=\S+ \(float64\)",
    "wrong_surrogate_constant": r"WRONG parity float32: backward at x\[0, 0\]=\S+ \(float32\): "
    r"got \S+, reference \S+, declared surrogate",
    "wrong_slope_gradient": r"WRONG gradcheck \(4, 5\): the gradient of weight differs from "
    r"finite differences",
}


@pytest.mark.parametrize("name", corpus.PLANTED)
def test_a_planted_bug_fails_naming_the_class_and_the_input(tmp_path, capsys, name):
    code, report = run_check(tmp_path, *corpus.PLANTED[name], STEPS)
    out = capsys.readouterr().out
    assert code == 1 and not report["passed"]
    lines = out.splitlines()
    # The verdict line names the user's class; a line per failing group says where.
    target = corpus.PLANTED[name][1].rsplit(".", 1)[1]
    assert re.match(rf"{target}: (WRONG|FAILS AT LARGE INPUTS)\. Report: ", lines[-1])
    assert re.search(PLANTED_LINES[name], out), out
    # Nothing of the lab's own wrappers or of autograd's node names reaches the user.
    assert not re.search(r"Spy|ApplyTemplate|Backward\b|Traceback", out)


def test_the_output_is_a_line_per_failing_group_and_the_table_is_behind_verbose(tmp_path, capsys):
    run_check(tmp_path / "quiet", *corpus.PLANTED["doubled"], STEPS)
    lines = capsys.readouterr().out.splitlines()
    groups = [line.split(":")[0] for line in lines[:-1]]
    assert len(groups) == len(set(groups)) <= 6
    assert all(len(line) < 400 for line in lines)
    run_check(tmp_path / "verbose", *corpus.PLANTED["doubled"], STEPS, "verbose=true")
    table = capsys.readouterr().out
    assert "gradgradcheck (4, 5)" in table and "PASS" in table


def test_myrelu_report_matches_an_independent_computation(tmp_path):
    code, report = run_check(tmp_path, "activation=myrelu")
    assert code == 0
    assert statuses(report)["kink at x=0"] == "convention"
    assert statuses(report)["training parity"] == "convention"
    custom, builtin = seed_loop(), seed_loop(relu=torch.relu)
    parted = next(t for t, (a, b) in enumerate(zip(custom, builtin)) if a["loss"] != b["loss"])
    relative = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(custom, builtin))
    training = report["training"]["float32"]
    assert training["first_parting_step"] == parted
    assert training["exact_zeros_before_parting"] == custom[parted - 1]["exact_zeros"] > 0
    assert training["steps_with_exact_zeros"] == sum(r["exact_zeros"] > 0 for r in custom)
    assert training["max_relative_difference"] == relative
    assert training["final_loss"] == custom[-1]["loss"]
    assert training["reference_final_loss"] == builtin[-1]["loss"]


def test_lean_relu_matches_relu_exactly_and_saves_nothing_extra(tmp_path):
    _, report = run_check(tmp_path, "activation=lean_relu")
    by_name = statuses(report)
    assert by_name["kink at x=0"] == "pass"  # gradient 0 at x == 0, as torch.relu
    assert by_name["training parity"] == "pass"
    assert report["training"]["float32"]["first_parting_step"] is None
    saved = next(c["detail"] for c in report["checks"] if c["check"] == "saved bytes per element")
    assert saved.startswith("4 saved, 0 beyond the output")
    assert by_name["torch.func.vmap"] == "pass"


@pytest.mark.parametrize(
    ("name", "kinks"),
    [
        ("hardswish", [-3.0, 3.0]),
        ("hardsigmoid", [-3.0, 3.0]),
        ("hard_mish", [-2.0]),
        ("relu6", [0.0, 6.0]),
        ("hardtanh", [-1.0, 1.0]),
        ("elu", []),
        ("softsign", []),
    ],
)
def test_kinks_are_found_where_the_reference_has_them(tmp_path, name, kinks):
    _, report = run_check(tmp_path, *corpus.CORRECT[name], "steps=3")
    assert [k["x"] for k in report["kinks"]] == kinks


def test_a_different_subgradient_at_a_kink_away_from_0_is_a_convention(tmp_path):
    _, report = run_check(tmp_path, *corpus.CORRECT["clamp_at_2"], "steps=3")
    assert [k["x"] for k in report["kinks"]] == [2.0]
    kink = next(c for c in report["checks"] if c["check"] == "kink at x=2")
    assert kink["status"] == "convention"
    assert kink["detail"] == (
        "backward at x[0]=2.0 (float64): got 0.0, reference 1.0 (the reference has the "
        "subgradients 1.0 from the left, 0.0 from the right)"
    )


def test_the_naive_tanh_is_less_precise_in_half_precision_and_says_by_how_much(tmp_path):
    _, report = run_check(tmp_path, *corpus.CORRECT["tanh_from_output"], "steps=3")
    half = next(c for c in report["checks"] if c["check"] == "parity float16")
    assert half["status"] == "precision"
    units = int(re.search(r"(\d+) units in the last place", half["detail"]).group(1))
    assert units > 2
    assert "compute in float32, cast back" in half["detail"]
    assert statuses(report)["parity float32"] == statuses(report)["parity float64"] == "pass"


def test_an_overflow_in_float16_is_precision_not_wrong_near_the_dtypes_range(tmp_path):
    """hardswish's x * (x + 3) overflows float16 near its largest values, where the built-in
    computes in float32; at ordinary inputs, an overflow is wrong."""
    _, report = run_check(tmp_path, *corpus.CORRECT["hardswish"], "steps=3")
    assert statuses(report)["large inputs float16"] == "precision"
    code, report = run_check(
        tmp_path / "overflow",
        "activation=custom",
        "activation.target=tests.corpus.SquarePlusHalfOverflow",
        "activation.reference=tests.corpus.square_plus",
        "steps=3",
        "lr=1e-12",
    )
    assert code == 1
    parity = next(c for c in report["checks"] if c["check"] == "parity float16")
    assert parity["status"] == "wrong" and "got -inf" in parity["detail"]


def test_training_parity_is_decided_in_float64(tmp_path):
    """Swish computed in float32 drifts from the built-in by rounding alone; in float64 the runs
    part, if at all, by rounding's size."""
    _, report = run_check(tmp_path, *corpus.CORRECT["swish"])
    training = report["training"]
    assert statuses(report)["training parity"] == "pass"
    assert training["float32"]["max_relative_difference"] > 1e-6
    at_parting = training["float64"]["relative_difference_at_parting"]
    assert at_parting is None or at_parting < 1e-12


def test_runs_that_both_diverge_are_information_with_settings_that_train(tmp_path):
    code, report = run_check(tmp_path, *corpus.CORRECT["exp"], STEPS)
    assert code == 0
    detail = next(c["detail"] for c in report["checks"] if c["check"] == "training parity")
    assert detail.startswith("both runs diverge: the experiment's settings are too large")
    assert "model.init=scaled lr=" in detail


def test_a_declared_surrogate_is_what_the_backward_is_checked_against(tmp_path):
    code, report = run_check(tmp_path, "activation=spike")
    assert code == 0
    gradcheck = next(c for c in report["checks"] if c["check"] == "gradcheck")
    assert "declared surrogate" in gradcheck["detail"]
    assert report["activation"]["surrogate"] == "reluexp.functions.fast_sigmoid_derivative"


def test_the_picture_shows_the_function_and_its_reference(tmp_path):
    run_check(tmp_path, *corpus.CORRECT["hardswish"], "steps=3")
    png = (tmp_path / "check.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000
    assert "| kinks | kink at x=-3 |" in (tmp_path / "check.md").read_text()
    # The same picture and table in TensorBoard, in the check directory's own run.
    events = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "tensors": 0})
    events.Reload()
    (image,) = events.Images("check/functions")
    assert image.encoded_image_string == png
    (text,) = events.Tensors("check/report")
    assert text.tensor_proto.string_val[0].decode() == (tmp_path / "check.md").read_text()


def test_gelu_with_a_wrong_constant_passes_fast_gradcheck_but_not_the_lab(tmp_path):
    """gradcheck's tolerance lets 0.4 for 1/sqrt(2 pi) through; every element does not."""
    from tests.corpus import GELUWrongConstant

    x = check.sample((64, 100), torch.Generator().manual_seed(0), []).requires_grad_()
    assert torch.autograd.gradcheck(GELUWrongConstant.apply, (x,), fast_mode=True)
    code, _ = run_check(tmp_path, *corpus.PLANTED["wrong_constant"], "steps=3")
    assert code == 1


def test_messages_carry_the_innermost_cause():
    try:
        try:
            raise ValueError("planted failure in the user's forward")
        except ValueError as inner:
            raise RuntimeError("backend='aot_eager' raised:\n") from inner
    except RuntimeError as error:
        message = check.raised(error)
    assert message == (
        "raised RuntimeError: backend='aot_eager' raised: "
        "raised ValueError: planted failure in the user's forward"
    )


def test_the_report_gives_the_cost_against_the_reference(tmp_path):
    code, report = run_check(tmp_path, "activation=myrelu", "steps=3")
    assert code == 0
    cost = report["cost"]
    assert set(cost) == {"(1,)", "(64, 100)"}
    for measured in cost.values():
        assert measured["function_us"] > 0 and measured["reference_us"] > 0
        assert measured["ratio"] == measured["function_us"] / measured["reference_us"]
    line = next(c["detail"] for c in report["checks"] if c["check"].startswith("cost"))
    assert f"{cost['(64, 100)']['ratio']:.2f}x the reference's time at (64, 100)" in line


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["activation=custom", "activation.target=torch.relu"],
            "activation.reference=None: custom needs a reference",
        ),
        (["activation=nope"], "Could not find 'activation/nope'"),
        (["lr=0"], "lr=0.0: must be finite and > 0"),
        (
            ["activation=custom", "activation.target=nomod.X", "activation.reference=torch.relu"],
            "activation.target=nomod.X: not an importable",
        ),
        (
            ["activation=leaky_relu", "+activation.params.bogus=1"],
            "activation.params.bogus: reluexp.functions.LeakyReLU takes negative_slope",
        ),
    ],
)
def test_usage_errors_exit_2_with_a_message(tmp_path, capsys, overrides, message):
    code, _ = run_check(tmp_path, *overrides)
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("reluexp.check: error: ") and message in err


@pytest.mark.slow
def test_users_own_function_from_the_current_directory(tmp_path):
    (tmp_path / "my_act.py").write_text(
        "import torch\n"
        "class Relu(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x.clamp(min=0)\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return g * (x > 0)\n"
    )
    command = [sys.executable, "-m", "reluexp.check", "activation=custom"]
    command += ["activation.target=my_act.Relu", "activation.reference=torch.relu", "steps=50"]
    result = subprocess.run(
        [*command, f"hydra.run.dir={tmp_path / 'out'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("Relu: gradients correct")


@pytest.mark.slow
def test_training_refuses_an_in_place_forward(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reluexp",
            "activation=custom",
            "activation.target=tests.corpus.InPlace",
            "steps=5",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "reluexp: error: activation.target=tests.corpus.InPlace: its forward changes "
        "its input in place; autograd and the activation metrics would read values that are gone"
    )
