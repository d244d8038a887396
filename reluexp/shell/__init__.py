"""The process shell: a command's process from its start to its closing line. Its session
(session.py), its stops and what each means in every phase (stops.py), the pre-flight before
Hydra makes a directory (preflight.py), a job and how it ends (lifecycle.py), a sweep's own
stop and its workers' (sweepstop.py)."""
