"""One training run: config -> state -> loop -> outcome. `run(config)` returns the RunResult;
with a run directory it streams its events, summary and checkpoints there (runner.py)."""
