"""Stopping a run cleanly before it is killed: on a signal (Slurm, Kubernetes and spot machines send
SIGTERM or a chosen signal some seconds before they kill) or at a time limit (--max_minutes).

Any rank may be the one that receives the signal, or whose clock runs out. Its handler only takes note;
at the start of the next step the rank raises its stop flag, and the flag travels in that step's
gradient allreduce (one more scalar in the same grouped collective, no collective of its own). The step
ends with every rank knowing the same answer, so all stop after the same step. Then rank 0 writes the
checkpoint of that step, which every rank holds alike (nothing of the run is lost:
the step being computed when the signal came is completed and saved), every rank waits for the save, and
train() reports the run as stopped; examples/train.py exits with PREEMPTED_EXIT_CODE: "resume me".
Rerunning the same command resumes from that checkpoint, exactly as after any checkpoint.

A second signal while stopping is noted and ignored: the stop is already under way, and the checkpoint
is not cut short by it. That holds until the process exits: after a stop by a signal, train() returns with
the handlers still installed, and exit_preempted() ignores the stop signals while Horovod shuts down,
then leaves at once (os._exit), before Python's finalization puts back the default handlers: a repeated
SIGTERM meeting the default would end the process with the signal's status (143) instead of 75, and a
scheduler would read a failure.
Only a second SIGINT (Ctrl-C again) raises KeyboardInterrupt at once, as a user who insists expects; a
checkpoint it cuts short is never the latest one (TensorFlow writes the data files first, then rewrites
the `checkpoint` index atomically).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

import tensorflow as tf

from tfcnn import distributed
from tfcnn.options import parse_signals

# sysexits.h EX_TEMPFAIL, "temporary failure; user is invited to retry": a stopped run that is not done.
PREEMPTED_EXIT_CODE = 75


class StopRequest:
    """Notes the first stop signal this process receives, and whether max_minutes have passed since it
    was made. A context manager: the handlers are installed inside and the previous ones put back after,
    unless a stop signal came (the process is on its way out: repeats stay noted and ignored)."""

    def __init__(self, signals: str = "none", max_minutes: float = 0.0, log=print):
        """signals: --stop_signals' value (e.g. 'TERM,INT,USR1', or 'none')."""
        self.signals = parse_signals(signals)
        self.deadline = time.monotonic() + 60 * max_minutes if max_minutes else None
        self.max_minutes = max_minutes
        self.received = None  # the signal's name, once one came
        self.log = log
        self._previous = {}

    @property
    def enabled(self) -> bool:
        return bool(self.signals) or self.deadline is not None

    def reason(self) -> str | None:
        """Why this rank wants to stop now ('SIGTERM', 'the --max_minutes 30 time limit'), or None."""
        if self.received:
            return self.received
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return f"the --max_minutes {self.max_minutes:g} time limit"
        return None

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        first = self.received is None
        if not first and name == "SIGINT":  # Ctrl-C again: the user wants out now (the index stays atomic)
            raise KeyboardInterrupt(f"{name} received twice")
        self.received = self.received or name
        try:  # the launcher may be gone and stdout a broken pipe: the handler itself must never fail
            self.log(f"tfcnn: {name} received: " + ("stopping after the current step, once every rank agrees"
                                                     if first else f"already stopping (for {self.received})"))
        except OSError:
            pass

    def __enter__(self):
        if self.signals and threading.current_thread() is not threading.main_thread():
            self.log("tfcnn: not in the main thread: --stop_signals cannot be installed here (the time limit "
                     "still works)")
        elif self.signals:
            for name in self.signals:
                number = getattr(signal, f"SIG{name}")
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc):
        if self.received:
            return False
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()
        return False


def exit_preempted(signals: str) -> None:
    """Exits with PREEMPTED_EXIT_CODE ("resume me") as soon as the stop is done: the stop signals ignored
    from now on (SIGINT excepted: Ctrl-C again still ends the process at once, as a user who insists
    expects), Horovod shut down, autograph's temporary files removed, the output flushed, then os._exit.
    Every rank has waited for the checkpoint by then; what Python and TensorFlow would still tear down holds
    nothing of the run, and a launcher's grace period (horovodrun kills its workers after it) could run out
    on it, turning the 75 into a kill."""
    for name in parse_signals(signals):
        if name != "INT":
            signal.signal(getattr(signal, f"SIG{name}"), signal.SIG_IGN)
    distributed.shutdown()
    remove_autograph_files()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(PREEMPTED_EXIT_CODE)


def autograph_files() -> set[str]:
    """This process's autograph files: TensorFlow writes each function it converts to a temporary file, the
    file of a module it loads under that prefix, and removes it at exit (atexit)."""
    return {module.__file__ for name, module in list(sys.modules.items())
            if name.startswith("__autograph_generated_file") and getattr(module, "__file__", None)}


def remove_autograph_files() -> None:
    """Removes this process's autograph files, which os._exit would leave (a few dozen a stopped run) in the
    temporary directory."""
    for path in autograph_files():
        try:
            os.remove(path)
        except OSError:  # gone already (a tmp cleaner): nothing left to do
            pass


class StopAgreement(tf.keras.callbacks.Callback):
    """Raises the trainer's stop flag when this rank wants to stop, and ends fit() after the step at
    which the ranks agreed (`stopped_at`, with `reason` when the request was this rank's)."""

    _supports_tf_logs = True  # "stop" is read once per step; the other logs stay tensors

    def __init__(self, trainer, request: StopRequest, start_step: int):
        super().__init__()
        self.trainer, self.request, self.start_step = trainer, request, start_step
        self.raised = False
        self.stopped_at = None

    def on_train_batch_begin(self, batch, logs=None):
        if not self.raised and self.request.reason():
            self.trainer.stop_flag.assign(1.0)
            self.raised = True

    def on_train_batch_end(self, batch, logs=None):
        if bool(logs["stop"]):
            self.stopped_at = self.start_step + batch + 1
            self.model.stop_training = True

    @property
    def reason(self) -> str:
        return self.request.reason() or "a stop request on another rank"
