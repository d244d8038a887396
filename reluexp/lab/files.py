"""What a check writes into its directory, when asked: check.json (the findings and the facts),
check.md (the table, and a lab error's traceback), check.png (the Function, its oracle and its
reference over the tested range) and the same picture and table in TensorBoard."""

import time
from pathlib import Path
from typing import Any

import torch

from reluexp.lab.calls import (
    ReferenceFailed,
    autograd_message,
    forward_backward,
    raised,
    the_reference,
)
from reluexp.lab.cases import KINK_RANGE, Kink
from reluexp.lab.findings import Report
from reluexp.lab.oracle import Oracle
from reluexp.lab.subject import Subject
from reluexp.record.events import loss_gap_series, write_derived
from reluexp.record.figures import new_figure, png
from reluexp.record.whole import write_json, write_whole


def curves(subject: Subject, oracle: Oracle, kinks: list[Kink]) -> dict[str, torch.Tensor]:
    """The curves of the picture, in float64 over the range the kinks call for (inside the
    domain); the reference's where it takes the grid (one written for 2-D input may not)."""
    reach = min(max([6.0, *(1.5 * abs(k.x) for k in kinks)]), KINK_RANGE)
    grid = torch.linspace(*oracle.domain.inner(reach), 2001, dtype=torch.float64)
    ones = torch.ones_like(grid)
    found = {"x": grid}
    found["forward"], (found["backward"], *_), _ = forward_backward(
        subject, subject.call, grid.requires_grad_(), ones
    )
    oracle_grads = oracle.grads(grid.detach(), ones, [p.double() for p in subject.inputs(grid)])
    if oracle_grads[0] is not None:
        found["oracle"] = oracle_grads[0]
    if subject.reference is not None:
        try:
            with the_reference(subject):
                reference, (reference_backward, *_), _ = forward_backward(
                    subject, subject.reference, grid, ones
                )
            found["reference"], found["reference backward"] = reference, reference_backward
        except ReferenceFailed:
            pass  # the findings say where the reference could not be compared
    return found


def draw_check(subject: Subject, oracle: Oracle, kinks: list[Kink], title: str) -> bytes:
    """Forward above, backward below: the Function's, its oracle's (the derivative it is judged
    against) and the reference's, kinks as dotted lines, the largest backward difference from
    the oracle marked: a PNG."""
    c = curves(subject, oracle, kinks)
    grid = c["x"].detach()
    figure = new_figure(figsize=(8, 6.5))
    top, bottom = figure.subplots(2, 1, sharex=True)
    if "reference" in c:
        top.plot(grid, c["reference"], color="tab:gray", linewidth=3, alpha=0.5, label="reference")
        bottom.plot(
            grid,
            c["reference backward"],
            color="tab:gray",
            linewidth=3,
            alpha=0.5,
            label="reference's derivative",
        )
    # matplotlib leaves out of the legend a label that starts with "_" (Pyro's _SafeLog).
    name = f" {subject.name}" if subject.name.startswith("_") else subject.name
    top.plot(grid, c["forward"], color="tab:blue", linewidth=1.2, label=name)
    if "oracle" in c:
        bottom.plot(
            grid, c["oracle"], color="tab:green", linewidth=3, alpha=0.4, label=oracle.expected_as
        )
    bottom.plot(grid, c["backward"], color="tab:blue", linewidth=1.2, label=f"{name}.backward")
    away = torch.ones_like(grid, dtype=torch.bool)
    for kink in kinks:
        away &= (grid - kink.x).abs() > 2 * (grid[1] - grid[0])
        for axes in (top, bottom):
            axes.axvline(kink.x, color="tab:red", linestyle=":", linewidth=1)
    if "oracle" in c:
        difference = ((c["backward"] - c["oracle"]).abs() * away).nan_to_num(nan=0.0)
        if difference.max() > 0:
            i = int(difference.argmax())
            bottom.plot(
                [grid[i]],
                [c["backward"][i]],
                "o",
                color="tab:red",
                label=f"largest difference: {difference[i].item():.3g} at x={grid[i].item():.3g}",
            )
    kink_text = ", ".join(f"{k.x:g}" for k in kinks) or "none"
    top.set_title(f"{title}  (kinks: {kink_text})", fontsize="medium")
    top.set_ylabel("forward")
    bottom.set_ylabel("backward (dy/dx)")
    bottom.set_xlabel("x (float64)")
    for axes in (top, bottom):
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small")
    # Fixed margins that fit its labels: a tight layout would cost a whole second drawing.
    figure.subplots_adjust(left=0.1, right=0.98, top=0.94, bottom=0.08, hspace=0.08)
    return png(figure, dpi=100, tight=False)


def write_report(
    report: Report, subject: Subject, oracle: Oracle | None, kinks: list[Kink], directory: Path
) -> list[str]:
    """check.json, check.md, check.png and their TensorBoard run in `directory`; what could not
    be drawn is returned as a line to show, the rest stands."""
    directory.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "name": report.name,
        "verdict": report.status.label,
        "passed": report.ok,
        "findings": [f.as_dict() for f in report.findings],
        **report.facts,
    }
    markdown = report.markdown()
    write_whole(directory / "check.md", markdown)
    images, problems = {}, []
    start = time.perf_counter()
    if oracle is not None:
        try:
            images["check/functions"] = draw_check(subject, oracle, kinks, report.verdict())
            write_whole(directory / "check.png", images["check/functions"])
        except Exception as error:  # a Function the plot cannot evaluate: the report stands
            problems.append(f"(no check.png: {autograd_message(raised(error), subject.name)})")
    report.facts.setdefault("seconds", {})["picture"] = time.perf_counter() - start
    write_json(directory / "check.json", payload | {"seconds": report.facts["seconds"]})
    gap = report.facts.get("training", {}).get("float32 reference", {}).get("gap", [])
    series = loss_gap_series(report.name, dict(enumerate(gap)))
    # The picture and the table in TensorBoard too, in the check directory's own run.
    write_derived(directory, "check", series, images=images, texts={"check/report": markdown})
    return problems
