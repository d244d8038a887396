"""The Function lab: shipped activations pass, planted bugs fail with the right check named."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reluexp import check
from tests.helpers import seed_loop
from tests.test_config import ACTIVATIONS


def run_check(tmp_path, *overrides):
    code = check.main([*overrides, f"hydra.run.dir={tmp_path}"])
    report = (
        json.loads((tmp_path / "check.json").read_text())
        if (tmp_path / "check.json").exists()
        else None
    )
    return code, report


def statuses(report):
    return {c["check"]: c["status"] for c in report["checks"]}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_every_shipped_activation_passes(tmp_path, name):
    code, report = run_check(tmp_path, f"activation={name}")
    assert code == 0 and report["passed"]
    assert "fail" not in statuses(report).values()


def test_lean_relu_matches_relu_exactly_and_saves_nothing_extra(tmp_path):
    _, report = run_check(tmp_path, "activation=lean_relu")
    by_name = statuses(report)
    assert by_name["edge 0 and -0.0"] == "pass"  # gradient 0 at x == 0, as torch.relu
    assert by_name["training parity"] == "pass" and report["training"]["first_parting_step"] is None
    saved = next(c["detail"] for c in report["checks"] if c["check"] == "saved bytes per element")
    assert saved.startswith("4 saved, 0 beyond the output")
    assert by_name["torch.func.vmap"] == "pass"


def test_myrelu_report_matches_an_independent_computation(tmp_path):
    code, report = run_check(tmp_path, "activation=myrelu")
    assert code == 0
    assert statuses(report)["edge 0 and -0.0"] == "convention"
    assert statuses(report)["training parity"] == "convention"
    custom = seed_loop()
    builtin = seed_loop(relu=torch.relu)
    parted = next(t for t, (a, b) in enumerate(zip(custom, builtin)) if a["loss"] != b["loss"])
    relative = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(custom, builtin))
    training = report["training"]
    assert training["first_parting_step"] == parted
    assert training["exact_zeros_before_parting"] == custom[parted - 1]["exact_zeros"] > 0
    assert training["steps_with_exact_zeros"] == sum(r["exact_zeros"] > 0 for r in custom)
    assert training["max_relative_difference"] == relative
    assert training["final_loss"] == custom[-1]["loss"]
    assert training["reference_final_loss"] == builtin[-1]["loss"]


@pytest.mark.parametrize(
    ("target", "activation", "failing_check", "detail"),
    [
        (
            "tests.planted.ScaledGradient",
            "custom",
            "gradcheck (4, 5)",
            "got 2.0, finite differences 0.99",
        ),
        (
            "tests.planted.MissingMask",
            "custom",
            "gradcheck (4, 5)",
            "got 1.0, finite differences 0.0",
        ),
        (
            "tests.planted.WrongNegativeSlope",
            "leaky_relu",
            "gradcheck (4, 5)",
            "got 0.1, finite differences 0.01",
        ),
        (
            "tests.planted.WrongBackwardDtype",
            "custom",
            "parity (17,) float32",
            "backward returned torch.float64",
        ),
        (
            "tests.planted.wrong_forward_dtype",
            "custom",
            "parity (17,) float32",
            "forward returned torch.float64",
        ),
        (
            "tests.planted.RaisesInBackward",
            "custom",
            "gradcheck (4, 5)",
            "raised ValueError: planted failure",
        ),
        (
            "tests.planted.GELUWrongConstant",
            "custom",
            "gradcheck (4, 5)",
            "finite differences",
        ),
        (
            "tests.planted.InPlaceForward",
            "custom",
            "forward keeps its input",
            "forward changed its input in place",
        ),
        (
            "tests.planted.WrongShapeBackward",
            "custom",
            "gradcheck (4, 5)",
            "Function WrongShapeBackwardBackward returned an invalid gradient at index 0",
        ),
    ],
)
def test_planted_bugs_fail_naming_the_check(
    tmp_path, capsys, target, activation, failing_check, detail
):
    code, report = run_check(
        tmp_path,
        f"activation={activation}",
        f"activation.target={target}",
        "activation.reference="
        + ("torch.relu" if activation == "custom" else "torch.nn.functional.leaky_relu"),
        "steps=20",
    )
    assert code == 1 and not report["passed"]
    first_failure = next(c for c in report["checks"] if c["status"] == "fail")
    assert first_failure["check"] == failing_check
    assert detail in first_failure["detail"] and "Spy" not in first_failure["detail"]
    assert f"FAILED {failing_check}: " in capsys.readouterr().err
    # The training runs part, and that is a problem, not rounding.
    training = next(c for c in report["checks"] if c["check"] == "training parity")
    assert "rounding" not in training["detail"]


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
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reluexp.check",
            "activation=custom",
            "activation.target=my_act.Relu",
            "activation.reference=torch.relu",
            "steps=50",
            f"hydra.run.dir={tmp_path / 'out'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "custom: gradients correct" in result.stdout
    assert "gradcheck (4, 5)" in result.stdout and "PASS" in result.stdout


def test_gelu_with_a_wrong_constant_passes_fast_gradcheck_but_not_the_lab(tmp_path):
    """Why every element is checked: fast gradcheck on (64, 100) lets 0.4 for 1/sqrt(2 pi)
    through (it projects the Jacobian onto random vectors)."""
    from tests.planted import GELUWrongConstant

    x = check.off_kinks((64, 100), torch.Generator().manual_seed(0)).requires_grad_()
    assert torch.autograd.gradcheck(GELUWrongConstant.apply, (x,), fast_mode=True)
    code, report = run_check(
        tmp_path,
        "activation=custom",
        "activation.target=tests.planted.GELUWrongConstant",
        "activation.reference=torch.nn.functional.gelu",
        "steps=20",
    )
    assert code == 1
    assert statuses(report)["gradcheck (64, 100) fast"] == "pass"
    assert statuses(report)["derivative (64, 100) every element"] == "fail"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_correct_function_with_another_formula_passes_in_half_precision(tmp_path, dtype):
    code, report = run_check(
        tmp_path,
        "activation=custom",
        "activation.target=tests.planted.SquarePlus",
        "activation.reference=tests.planted.square_plus",
        "steps=3",
        "lr=1e-12",
    )
    assert statuses(report)[f"edge dtype {dtype}"] == "pass"
    # The rule is not lax: the same Function's float16 results differ from the reference's.
    x = torch.randn(64, 100, generator=torch.Generator().manual_seed(2)).to(getattr(torch, dtype))
    from tests.planted import SquarePlus, square_plus

    grads = []
    for fn in (SquarePlus.apply, square_plus):
        leaf = x.clone().requires_grad_()
        fn(leaf).sum().backward()
        grads.append(leaf.grad)
    assert code == 0 or dtype == "bfloat16" or not torch.equal(*grads)


def test_a_bug_that_only_shows_in_float16_fails_there(tmp_path):
    code, report = run_check(
        tmp_path,
        "activation=custom",
        "activation.target=tests.planted.SquarePlusHalfOverflow",
        "activation.reference=tests.planted.square_plus",
        "steps=3",
        "lr=1e-12",
    )
    by_name = statuses(report)
    assert code == 1
    assert by_name["edge dtype float16"] == "fail"
    assert (by_name["edge dtype bfloat16"], by_name["edge dtype float32"]) == ("pass", "pass")
    detail = next(c["detail"] for c in report["checks"] if c["check"] == "edge dtype float16")
    assert re.search(r"got -?inf, reference \S+, float64 truth", detail)


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
    assert set(cost) == set(check.COST_SIZES)
    for measured in cost.values():
        assert measured["function_us"] > 0 and measured["reference_us"] > 0
        assert measured["ratio"] == measured["function_us"] / measured["reference_us"]
    line = next(c["detail"] for c in report["checks"] if c["check"].startswith("cost"))
    assert f"{cost['(64, 100)']['ratio']:.2f}x the reference's time at (64, 100)" in line


@pytest.mark.slow
def test_training_refuses_an_in_place_forward(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reluexp",
            "activation=custom",
            "activation.target=tests.planted.InPlaceForward",
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
        "reluexp: error: activation.target=tests.planted.InPlaceForward: its forward changes "
        "its input in place; autograd and the activation metrics would read values that are gone"
    )
