"""The Function lab: is a custom autograd Function's backward the derivative of its own forward
(or of the surrogate it declares), and, given a reference, is it the built-in's function?

    from reluexp.lab import check_function
    report = check_function(MyReLU, reference=torch.relu)
    assert report.ok, report

The command, `python -m reluexp.check activation=...`, runs the same checks (lab/command.py).
"""

from reluexp.lab.findings import Finding, Location, Report, Status
from reluexp.lab.pipeline import check_function

__all__ = ["Finding", "Location", "Report", "Status", "check_function"]
