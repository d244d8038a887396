"""What a run streams and writes: its per-step metrics, event files, tag names, summary.json and
progress line; and the figures the lab and a sweep's report draw."""
