"""Docs that run: every reluexp command in the bash blocks of the README and of every page of
the docs site (docs/) works as written."""

import json
import re
import shlex
import subprocess

import pytest

from reluexp.sweeps.report.outputs import OPTIONAL_COLUMNS
from tests.helpers import EXPERIMENTS, REPO_ROOT, Done, run_cli, write_readme_cifar

pytestmark = pytest.mark.slow

README = (REPO_ROOT / "README.md").read_text()
# The README, then the site's pages: every block of either runs.
DOCS = "\n".join([README, *(p.read_text() for p in sorted((REPO_ROOT / "docs").rglob("*.md")))])


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOCS, flags=re.S)


def commands() -> list[str]:
    """reluexp commands of the bash blocks (set-up and tensorboard lines are tested elsewhere)."""
    found = []
    for block in blocks("bash"):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            # SLURM commands need a cluster: tests/test_slurm.py runs them on one.
            runnable = "<" not in command and "slurm" not in command
            if command.startswith(("python -m reluexp", "reluexp ")) and runnable:
                found.append(command)
    return list(dict.fromkeys(found))


def shrunk(command: str) -> tuple[str, list[str]]:
    """The command's module and arguments (`reluexp ...` is `python -m reluexp ...`), with tiny
    step counts, so the whole README runs in a minute."""
    argv = [arg for arg in shlex.split(command) if not arg.startswith("steps=")]
    module, args = ("reluexp", argv[1:]) if argv[0] == "reluexp" else (argv[2], argv[3:])
    if "--help" in args:
        return module, args
    args.append("steps=20" if module == "reluexp.check" else "steps=3")
    if "experiment=lr_search" in args or "hydra/sweeper=optuna" in args:
        args.append("hydra.sweeper.n_trials=3")
    return module, args


def run_shrunk(command: str, cwd) -> Done:
    """The command, shrunk, as a user types it in `cwd` (in this process: tests.helpers)."""
    module, args = shrunk(command)
    return run_cli(*args, cwd=cwd, module=module, check=False)


def test_every_reluexp_line_of_the_docs_is_run_by_a_test():
    """75.5: this asserted only that there were eight commands to run. A line left out of
    commands() is run elsewhere: a SLURM cluster's by tests/test_slurm.py, a resume of a run
    directory a user names by the closing-line tests that paste the command they print."""
    left_out = []
    for block in blocks("bash"):
        for line in block.splitlines():
            command = line.split("  #")[0].strip()
            if command.startswith(("python -m reluexp", "reluexp ")) and command not in commands():
                left_out.append(command)
    on_slurm = [c for c in left_out if "hydra/launcher=slurm" in c or "submitit_slurm" in c]
    resumes = [c for c in left_out if re.fullmatch(r"python -m reluexp resume=\S*<[^>]+>\S*", c)]
    assert sorted(left_out) == sorted(on_slurm + resumes)
    assert "python -m reluexp" in commands()


def test_the_docs_run_every_named_study():
    named = {arg.split("=", 1)[1] for c in commands() for arg in c.split() if "experiment=" in arg}
    assert set(EXPERIMENTS) <= named


def write_config_files(directory):
    """The docs' YAML blocks of the user's own configs, at the paths the text gives them."""
    paths = re.findall(r"`(my_configs/\S+\.yaml)`[^`]*?:\n\n```yaml\n(.*?)```", DOCS, flags=re.S)
    assert len(paths) == 2
    for path, text in paths:
        (directory / path).parent.mkdir(parents=True, exist_ok=True)
        (directory / path).write_text(text)


@pytest.mark.parametrize("command", commands())
def test_docs_command_works_as_written(tmp_path, command):
    write_config_files(tmp_path)
    write_readme_cifar(tmp_path, command)
    worked_example = (
        "my_relu.MyReLU" in command and "reluexp.check" in command and "--cost" not in command
    )
    if "my_relu.MyReLU" in command:
        # The docs' worked example: its Function, with the bug it plants.
        (source,) = [b for b in blocks("python") if "class MyReLU" in b]
        (tmp_path / "my_relu.py").write_text(source)
    if "my_models." in command:  # "Your own model": its factories, as the README gives them
        (source,) = [b for b in blocks("python") if "def mlp_with_norm" in b]
        (tmp_path / "my_models.py").write_text(source)
    result = run_shrunk(command, tmp_path)
    if worked_example:
        assert result.returncode == 1
        failure = re.search(
            r"WRONG gradcheck \(4, 5\): backward at x\[0, 3\]=[0-9.]+ \(float64\): got 2\.0",
            result.stdout,
        ).group(0)
        assert failure in DOCS.replace("\n", " ")
        assert result.stdout.splitlines()[-1].startswith("MyReLU: WRONG. Report: ")
    elif "--cost" in command:  # the how-to's two lines, the article's MyReLU beside torch.relu
        assert result.returncode == 0, result.stderr[-2000:]
        memory, cost = result.stdout.splitlines()
        assert memory.startswith("memory: saved for backward, bytes per element: 4 saved")
        assert cost.startswith("cost: forward+backward: ") and "x the reference's time" in cost
    else:
        assert result.returncode == 0, result.stderr[-2000:]
    if "-m" in shrunk(command)[1]:  # a sweep: every job trained
        (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
        summaries = [json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")]
        assert len(summaries) >= 3
        assert all(
            s["steps_done"] <= 3 and s["status"] in ("completed", "diverged") for s in summaries
        )
        assert (sweep_dir / "summary.md").is_file()
        if "my_relu.MyReLU" in command:  # its planted bug, in the report's lab column
            assert "| WRONG: lab/MyReLU-" in (sweep_dir / "summary.md").read_text()


EXPERIMENTS_README = (REPO_ROOT / "experiments" / "README.md").read_text()


def study_sections() -> list[tuple[str, str, str | None]]:
    """experiments/README.md's studies: (name, the command it gives, its summary table)."""
    found = []
    for section in re.split(r"^## ", EXPERIMENTS_README, flags=re.M)[1:]:
        name = section.split("\n", 1)[0].strip()
        (command,) = re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)
        table = re.search(r"^\| group \|.*?(?=\n\n|\Z)", section, flags=re.M | re.S)
        found.append((name, command, table.group(0) if table else None))
    return found


def table_rows(table: str) -> list[list[str]]:
    lines = [line for line in table.strip().splitlines() if not line.startswith("| ---")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_experiments_readme_documents_every_study():
    assert sorted(name for name, _, _ in study_sections()) == sorted(EXPERIMENTS)


@pytest.mark.parametrize(("name", "command", "table"), study_sections())
def test_experiments_readme_commands_run_and_their_tables_are_the_reports(
    tmp_path, name, command, table
):
    """47.6: its tables had columns the report had renamed (`n` for `jobs`) and values it no
    longer writes. Each command runs as written (with few steps), and its table has the
    report's columns, in the report's order, and its groups."""
    assert f"experiment={name}" in command
    write_readme_cifar(tmp_path, command)
    result = run_shrunk(command, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    if table is None:  # Optuna's study: its result is the best trial, in the text; the
        # ResNet study has no run on this project's machines to table (its text says so)
        assert name in ("lr_search", "cifar10_resnet20")
        return
    (sweep_dir,) = (tmp_path / "outputs" / "multirun").iterdir()
    summary_md = (sweep_dir / "summary.md").read_text()
    ran = table_rows(re.search(r"^\| group \|.*", summary_md, flags=re.M | re.S).group(0))
    documented = table_rows(table)
    header, ran_header = documented[0], ran[0]
    assert [column for column in ran_header if column in header] == header
    assert not [c for c in ran_header if c not in header and c not in OPTIONAL_COLUMNS]
    # The same groups (in another order: groups sort by final loss, which few steps change).
    assert sorted(row[0] for row in documented[1:]) == sorted(row[0] for row in ran[1:])
    jobs = header.index("jobs")
    for row in documented[1:]:
        assert "– ± –" not in " ".join(row), row
        assert row[header.index("status")].startswith(("completed: ", "diverged: "))
        assert int(row[jobs]) == sum(
            int(count) for count in re.findall(r": (\d+)", row[header.index("status")])
        )


def test_the_quickstart_ends_on_a_dashboard_that_fills(tmp_path):
    """62.5: its last line was `tensorboard --logdir outputs`, 55 runs after its commands, past
    the 40 TensorBoard ticks by itself: the page opened empty. Its commands run in one
    directory, as a user types them; the last line's logdir holds runs, no more than 40."""
    quickstart = README.split("## Quickstart", 1)[1]
    (block,) = re.findall(r"```bash\n(.*?)```", quickstart.split("\n## ", 1)[0], flags=re.S)
    lines = [line.split("  #")[0].strip() for line in block.splitlines()]
    for command in lines[:-1]:
        if "--help" not in command:
            result = run_shrunk(command, tmp_path)
            assert result.returncode == 0, (command, result.stderr[-2000:])
    assert lines[-1].startswith("tensorboard --logdir ")
    logdir = subprocess.run(
        ["bash", "-c", f"echo {lines[-1].removeprefix('tensorboard --logdir ')}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    runs = {path.parent for path in (tmp_path / logdir).rglob("events.out.tfevents.*")}
    assert 0 < len(runs) <= 40, (logdir, len(runs))
    everything = {path.parent for path in (tmp_path / "outputs").rglob("events.out.tfevents.*")}
    assert len(everything) > 40  # what `tensorboard --logdir outputs` would have opened
