"""The multi-process launchers the tests start, and why one cannot run on this machine.

Gloo is always built by `make install`, so a missing Gloo is a failure, never a skip. OpenMPI is
optional (README): without `mpiexec`, or with a Horovod built before OpenMPI was installed, the
mpiexec tests skip and say why; CI installs OpenMPI, so there they run.
"""
import functools
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

BIN = os.path.dirname(sys.executable)
# Horovod's background thread coordinates the ranks once a cycle, busy or idle (HOROVOD_CYCLE_TIME, 1 ms by
# default): measured on 2 cores, a two-rank launch of test_stopping's 40-step run took 18.5-20.2 CPU-s, 15.2-15.4
# with a 20 ms cycle, in the same wall time. The tests' steps are their own; no result depends on the cycle.
CYCLE_TIME_MS = "20"
HOROVODRUN_GLOO = [os.path.join(BIN, "horovodrun"), "--gloo", "--cycle-time-ms", CYCLE_TIME_MS, "-np", "2",
                   "-H", "localhost:2"]
MPIEXEC = ["mpiexec", "--allow-run-as-root", "--oversubscribe", "-x", f"HOROVOD_CYCLE_TIME={CYCLE_TIME_MS}", "-np", "2"]


@functools.lru_cache(maxsize=None)
def mpi_missing() -> str | None:
    """Why the mpiexec launcher cannot run tfcnn here, or None when it can."""
    if not shutil.which("mpiexec"):
        return ("OpenMPI's mpiexec is not installed (optional: `apt-get install openmpi-bin libopenmpi-dev`, "
                "then `make install` rebuilds Horovod with MPI)")
    import horovod.tensorflow as hvd

    if not hvd.mpi_built():
        return "Horovod was built without MPI (`make install` rebuilds it now that mpicxx is installed)"
    return None


needs_mpi = pytest.mark.skipif(mpi_missing() is not None, reason=mpi_missing() or "")


def run_without_tensorflow(code: str) -> tuple[list[str], str]:
    """Runs `code` in a Python of its own, from the repository, which must exit 0 without having loaded
    TensorFlow (seconds to import: what answers a user at once must not need it). (Its output lines, its
    error output.) An entry point's exit inside it: `try: runpy.run_module(...) except SystemExit`."""
    probe = "\nimport sys\nprint('tensorflow loaded:', 'tensorflow' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code + probe], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr[-2000:]
    *lines, loaded = done.stdout.splitlines()
    assert loaded == "tensorflow loaded: False", done.stdout[-2000:]
    return lines, done.stderr


def worker_processes(launcher_pid: int) -> dict:
    """{(HOROVOD_HOSTNAME, HOROVOD_RANK): psutil.Process} of the Python workers a launcher started."""
    import psutil

    found = {}
    for process in psutil.Process(launcher_pid).children(recursive=True):
        try:
            environ = process.environ()
        except (psutil.Error, OSError):
            continue
        if "HOROVOD_RANK" in environ and "python" in os.path.basename(process.cmdline()[0]):
            found[(environ.get("HOROVOD_HOSTNAME"), int(environ["HOROVOD_RANK"]))] = process
    return found


def wait_for(condition, what: str, timeout: float = 240) -> None:
    """Polls `condition` until it holds; fails naming `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


def logged_steps(log_dir) -> list[int]:
    """The steps a training run in `log_dir` (a pathlib.Path) has logged to metrics.jsonl so far."""
    path = log_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []
