"""What the lab finds: one finding type, its statuses ordered by severity, and the report they
make (the terminal's summary, the verdict, `ok`)."""

from dataclasses import asdict, dataclass, field
from enum import IntEnum, StrEnum
from typing import Any


class Status(IntEnum):
    """A finding's verdict, worst first: the lowest status of a report is its verdict."""

    WRONG = 0
    LARGE = 1
    DIFFERS = 2
    ERROR = 3
    DOUBLE_BACKWARD = 4
    PRECISION = 5
    CONVENTION = 6
    INFO = 7
    UNSUPPORTED = 8
    PASS = 9

    @property
    def label(self) -> str:
        return LABELS[self]


LABELS = {
    Status.WRONG: "wrong",
    Status.LARGE: "fails at large inputs",
    Status.DIFFERS: "differs from its reference",
    Status.ERROR: "error of the lab",
    Status.DOUBLE_BACKWARD: "double backward differs",
    Status.PRECISION: "precision",
    Status.CONVENTION: "convention",
    Status.INFO: "info",
    Status.UNSUPPORTED: "unsupported",
    Status.PASS: "pass",
}


class Group(StrEnum):
    """What a check is about: the report shows each group's findings together, in order."""

    RETURNS = "returns"
    ORACLE = "oracle"
    GRADIENTS = "gradients"
    DOUBLE_BACKWARD = "double backward"
    PARITY = "parity"
    KINKS = "kinks"
    EDGES = "edges"
    TRAINING = "training"
    LARGE_INPUTS = "large inputs"
    EVERY_MAGNITUDE = "every magnitude"
    REFERENCE = "reference"
    TRANSFORMS = "transforms"
    COMPILE = "compile"
    MEMORY = "memory"
    COST = "cost"


# What makes a check fail (exit 1). An error of the lab fails too: nothing was verified.
FAILING = frozenset({Status.WRONG, Status.LARGE, Status.DIFFERS, Status.ERROR})
# What the terminal leaves to check.md (or to verbose=true's table).
QUIET = frozenset({Status.PASS, Status.INFO, Status.UNSUPPORTED})


@dataclass
class Location:
    """Where a finding shows: one element, its input, and what disagreed there."""

    what: str  # forward, backward, gradient of <param>
    tensor: str  # x, or the parameter's name
    index: tuple[int, ...]
    input: float  # the element of `tensor` there
    dtype: str
    got: float
    expected: float
    expected_as: str  # what `expected` is: the derivative of the forward, a reference, ...

    def text(self) -> str:
        return (
            f"{self.what} at {self.tensor}{list(self.index)}={self.input!r} ({self.dtype}): "
            f"got {self.got!r}, {self.expected_as} {self.expected!r}"
        )


@dataclass(repr=False)
class Finding:
    """One check's outcome: its group and name, its status, what it says, and where it shows
    (a lab error keeps its traceback for check.md). Its repr is its line, as the terminal
    shows it (what a failing test's assertion prints)."""

    group: Group
    check: str
    status: Status
    detail: str = ""
    at: Location | None = None
    traceback: str | None = None

    def line(self) -> str:
        return f"{self.status.label.upper()} {self.check}: {self.detail}"

    def __repr__(self) -> str:
        return self.line()

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["status"] = self.status.label
        return values


def worst(findings: list[Finding]) -> Status:
    return min((f.status for f in findings), default=Status.PASS)


@dataclass(repr=False)
class Report:
    """Every finding of a check of one Function, and the facts behind them (kinks, the
    oracle, the training runs, the cost). `ok` is what the command's exit code says; its
    str and repr are the lines the terminal shows, the verdict last (what a failing test's
    `assert report.ok, str(report)` prints)."""

    name: str
    findings: list[Finding]
    facts: dict[str, Any] = field(default_factory=dict)
    # Lines the terminal shows whatever the verdict (the comparisons a check without a
    # reference skipped).
    notes: list[str] = field(default_factory=list)
    # What a passing verdict says it rests on without: a comparison that could not run.
    caveats: list[str] = field(default_factory=list)
    # --double-backward: a double backward that differs fails the check.
    double_backward_decides: bool = False

    @property
    def failing(self) -> frozenset[Status]:
        extra = {Status.DOUBLE_BACKWARD} if self.double_backward_decides else set()
        return FAILING | extra

    @property
    def status(self) -> Status:
        return worst(self.findings)

    @property
    def ok(self) -> bool:
        return all(f.status not in self.failing for f in self.findings)

    def verdict(self, lines_above: bool = True) -> str:
        """The one line that answers "is my backward right?"; its counts say how many of
        each kind are among the lines above it (one per group) where fewer are (unless no
        lines are above it)."""
        status = self.status
        if status == Status.ERROR:
            check = next(f.check for f in self.findings if f.status == Status.ERROR)
            return f"{self.name}: LAB ERROR in {check} (the lab failed, not your Function)"
        if status in self.failing:
            return f"{self.name}: {status.label.upper()}"
        shown = [f.status for f in self.shown()]
        notes = []
        for kind in (Status.DOUBLE_BACKWARD, Status.PRECISION, Status.CONVENTION):
            n = sum(f.status == kind for f in self.findings)
            if n:
                above = shown.count(kind)
                where = (
                    ""
                    if above == n or not lines_above
                    else f" ({above} above, one per group; the report has each)"
                )
                notes.append(f"{n} {kind.label} finding{'s' if n > 1 else ''}{where}")
        return f"{self.name}: gradients correct" + "".join(
            f"; {note}" for note in [", ".join(notes), *self.caveats] if note
        )

    def shown(self) -> list[Finding]:
        """The findings the terminal shows: per group whose worst finding is not a pass, that
        finding."""
        found = []
        for group in dict.fromkeys(f.group for f in self.findings):
            members = [f for f in self.findings if f.group == group and f.status not in QUIET]
            if members:
                found.append(min(members, key=lambda f: f.status))
        return found

    def summary_lines(self) -> list[str]:
        return [f.line() for f in self.shown()]

    def table(self) -> list[str]:
        width = max((len(f.check) for f in self.findings), default=0)
        return [
            f"{f.check:<{width}}  {f.status.label.upper():<26}  {f.detail}" for f in self.findings
        ]

    def markdown(self) -> str:
        rows = ["| group | check | verdict | detail |", "| --- | --- | --- | --- |"]
        for f in self.findings:
            detail = f.detail.replace("|", "\\|")
            rows.append(f"| {f.group} | {f.check} | {f.status.label} | {detail} |")
        notes = "".join(f"{note}\n\n" for note in self.notes)
        text = (
            f"# Function lab: {self.name}\n\n{self.verdict()}\n\n{notes}" + "\n".join(rows) + "\n"
        )
        for f in self.findings:
            if f.traceback:
                text += f"\n## Lab error in {f.check}\n\n```\n{f.traceback}```\n"
        return text

    def __str__(self) -> str:
        return "\n".join([*self.summary_lines(), *self.notes, self.verdict()])

    __repr__ = __str__
