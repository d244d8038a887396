"""The Function lab: shipped activations pass, planted bugs fail with the right check named."""

import json
import subprocess
import sys

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
    assert detail in first_failure["detail"]
    assert f"FAILED {failing_check}: " in capsys.readouterr().err


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
            "'nomod.X': not an importable",
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
