"""The Function lab: is a custom autograd Function's backward the derivative of its own forward
(or of the surrogate it declares), and, given a reference, is it the built-in's function?

    from reluexp.lab import check_function
    report = check_function(MyReLU, reference=torch.relu)
    assert report.ok, str(report)

The command, `python -m reluexp.check activation=...`, runs the same checks (lab/command.py).
"""

from typing import Any

__all__ = ["Finding", "Location", "Report", "Status", "check_function"]


def __getattr__(name: str) -> Any:
    """The names above, imported when first asked for: importing a module of the lab (the sweep
    report's lab/sweep.py) does not import all of it, torch included."""
    if name == "check_function":
        from reluexp.lab.pipeline import check_function

        return check_function
    if name in __all__:
        from reluexp.lab import findings

        return getattr(findings, name)
    raise AttributeError(f"module 'reluexp.lab' has no attribute {name!r}")
