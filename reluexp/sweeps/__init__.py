"""Many runs: a sweep's terminal, its report, and the launchers that run its jobs (submitit's
local processes and SLURM, joblib's workers)."""
