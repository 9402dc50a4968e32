"""The multi-process launchers the tests start, and why one cannot run on this machine.

Gloo is always built by `make install`, so a missing Gloo is a failure, never a skip. OpenMPI is
optional (README): without `mpiexec`, or with a Horovod built before OpenMPI was installed, the
mpiexec tests skip and say why; CI installs OpenMPI, so there they run.
"""
import functools
import os
import shutil
import sys

import pytest

BIN = os.path.dirname(sys.executable)
HOROVODRUN_GLOO = [os.path.join(BIN, "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2"]
MPIEXEC = ["mpiexec", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


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
