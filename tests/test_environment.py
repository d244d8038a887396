"""Process-wide state: what a job sets is put back, so the next job runs as it would alone."""

import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from reluexp.environment import job_environment


def test_job_environment_puts_back_threads_rng_and_signal_handlers():
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    handler = signal.getsignal(signal.SIGTERM)
    with job_environment(torch.device("cpu"), threads=1) as stop:
        assert torch.get_num_threads() == 1
        torch.manual_seed(123)  # a checkpoint's RNG state, restored on resume
        torch.rand(3)
        assert signal.getsignal(signal.SIGTERM) == stop._handle
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), rng)
    assert signal.getsignal(signal.SIGTERM) == handler


def test_job_environment_puts_back_after_a_job_that_raised():
    threads = torch.get_num_threads()
    try:
        with job_environment(torch.device("cpu"), threads=threads + 1):
            raise RuntimeError("the activation raised")
    except RuntimeError:
        pass
    assert torch.get_num_threads() == threads


# An object whose finalizer only runs in the interpreter's teardown, an atexit handler, unflushed
# output on both streams, and optionally a thread still running when the exit is asked for.
EXIT_SCRIPT = textwrap.dedent(
    """
    import atexit, sys, threading, time
    from reluexp.environment import exit_without_teardown

    class Finalized:
        def __del__(self):
            print("teardown ran", flush=True)

    kept = Finalized()
    atexit.register(print, "atexit ran")
    if sys.argv[1] == "thread":
        threading.Thread(target=time.sleep, args=(0.5,)).start()
    sys.stdout.write("stdout written")
    sys.stderr.write("stderr written")
    exit_without_teardown({code})
    """
)


@pytest.mark.parametrize(
    ("code", "status", "message"), [(None, 0, ""), (3, 3, ""), ("'why it stopped'", 1, "why")]
)
def test_exit_without_teardown_keeps_exit_status_atexit_and_output(code, status, message):
    script = EXIT_SCRIPT.format(code=code)
    done = subprocess.run(
        [sys.executable, "-c", script, "alone"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == status
    assert done.stdout == "stdout writtenatexit ran\n"  # the teardown's finalizer never ran
    assert done.stderr.startswith("stderr written")
    assert message in done.stderr


def test_exit_without_teardown_is_pythons_own_exit_while_a_thread_runs():
    script = EXIT_SCRIPT.format(code=4)
    done = subprocess.run(
        [sys.executable, "-c", script, "thread"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 4
    assert "atexit ran" in done.stdout
    assert "teardown ran" in done.stdout
