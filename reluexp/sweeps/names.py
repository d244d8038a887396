"""A sweep job's directory name, made in one place: `<number>_<overrides>`, the number
zero-padded so that directories sort in job order (in ls and in TensorBoard). Readers take a
job's number from what Hydra recorded (.hydra/hydra.yaml), not from its name."""

import hashlib

# A `/` in an override's value (data.root=/data/cifar) would nest the job a level down, where
# its sweep's report does not look: it reads as the division slash U+2215 instead.
SLASH = "\u2215"

# The longest file name most file systems take, in bytes (NAME_MAX).
NAME_MAX = 255


def job_prefix(number: int | str) -> str:
    """The directory prefix of job `number` (Hydra's hydra.job.num): `003`."""
    return f"{int(number):03d}"


def job_dir_name(number: int | str, overrides: str) -> str:
    """`003_lr=0.1,seed=1`: job `number`'s directory name, one level whatever the overrides
    hold (a `/` reads as `\u2215`). Overrides too long for one file name are cut, with a hash of
    the whole so that names stay distinct: `003_lr=...~1a2b3c4d`."""
    name = f"{job_prefix(number)}_{overrides.replace('/', SLASH)}"
    if len(name.encode()) <= NAME_MAX:
        return name
    digest = "~" + hashlib.sha256(overrides.encode()).hexdigest()[:8]
    kept = name.encode()[: NAME_MAX - len(digest)].decode(errors="ignore")
    return kept + digest
