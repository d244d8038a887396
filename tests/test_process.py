"""Process-wide state: what a job sets is put back, so the next job runs as it would alone."""

import signal

import torch

from reluexp.process import job_environment


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
