"""Process-wide state: what a job sets is put back, so the next job runs as it would alone."""

import gc
import os
import signal
import subprocess
import sys

import pytest
import torch

from reluexp.run import runner
from reluexp.run.process import job_environment
from reluexp.shell.session import Session
from reluexp.shell.stops import StopSignals
from tests.helpers import small_config


def test_job_environment_puts_back_threads_rng_and_signal_handlers():
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    handler = signal.getsignal(signal.SIGTERM)
    with (
        job_environment(torch.device("cpu"), threads=1),
        Session() as session,
        session.holding(StopSignals()) as stop,
    ):
        assert torch.get_num_threads() == 1
        torch.manual_seed(123)  # a checkpoint's RNG state, restored on resume
        torch.rand(3)
        owner = session.owner
        assert signal.getsignal(signal.SIGTERM) == owner.dispatch and owner.phases[-1] is stop
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


def test_the_training_loop_leaves_the_heap_before_it_to_the_collector_and_puts_it_back(
    monkeypatch, tmp_path
):
    train_loop, frozen = runner.train_loop, []

    def loop(training):
        frozen.append(gc.get_freeze_count())
        cycle = []
        cycle.append(cycle)  # garbage the loop makes is still collected
        del cycle
        frozen.append(gc.collect())
        train_loop(training)

    monkeypatch.setattr(runner, "train_loop", loop)
    assert gc.get_freeze_count() == 0
    runner.run(small_config(steps=2), tmp_path / "run")
    assert frozen[0] > 10_000 and frozen[1] >= 1
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a caller's own, left as it is
    try:
        held = gc.get_freeze_count()
        runner.run(small_config(steps=2), tmp_path / "frozen")
        # Not frozen again (the run's own objects would join) nor unfrozen after.
        assert abs(frozen[2] - held) < 50 and abs(gc.get_freeze_count() - held) < 50
    finally:
        gc.unfreeze()


def test_a_stopped_worker_ignores_the_stops_second_copy_until_it_exits():
    """A joblib worker gets Ctrl-C from the terminal's group and again from its sweep; the copy
    that arrives after its job has stopped must not end it before its closing line (its job
    ends inside training's phase: shell.lifecycle.run_job)."""
    handler = signal.getsignal(signal.SIGINT)
    with Session() as session, session.holding(StopSignals(in_worker=True)) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.signum == signal.SIGINT
        os.kill(os.getpid(), signal.SIGINT)  # the other copy: ignored, the process lives
        assert stop.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) == handler


PAGE_FAULTS_OF_A_REALLOCATION = """
import contextlib, resource, sys, torch
from reluexp.run.process import keep_freed_memory

def step():
    # A large layer's pre-activation and activation, 64 MiB each, touched and freed. (One
    # block alone is not always reused: torch asks posix_memalign, which wants a free block a
    # little larger than the one freed; a step frees several, and they merge.)
    pre = torch.ones(2**24)
    return pre.clamp(min=0).sum()

def faults():
    for _ in range(4):  # till reuse settles
        step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

with keep_freed_memory() if sys.argv[1] == "keep" else contextlib.nullcontext():
    inside = faults()
print(inside, faults())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's malloc")
def test_keep_freed_memory_reuses_large_blocks_without_page_faults_then_puts_malloc_back():
    def faults(mode):
        command = [sys.executable, "-c", PAGE_FAULTS_OF_A_REALLOCATION, mode]
        # glibc's per-thread cache may keep a freed block's small alignment remainder, and with
        # it the block from merging into one the next allocation fits: in about one process in
        # four the reuse then fails. Without that cache the outcome is deterministic.
        env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
        output = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        return [int(n) for n in output.stdout.split()]

    pages = 2 * 2**26 // 4096
    # glibc's default maps a fresh block: every page faults again.
    assert all(n > pages / 2 for n in faults("default"))
    inside, after = faults("keep")
    assert inside < pages / 50
    # After the job, glibc's defaults are back: the next job runs as it would alone.
    assert after > pages / 2
