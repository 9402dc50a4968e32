"""Everything tfcnn does with Horovod, in one module.

A process started by a launcher (`horovodrun`, `mpiexec`/`mpirun`, `srun` with PMI) uses Horovod; a
plain `python examples/train.py` runs as a single process without importing it, so training works
where Horovod is not installed. A multi-process launch without an importable Horovod is an error,
never N independent single-process runs.

Gradient averaging is explicit (`average_gradients`, called from tfcnn's own train_step) rather than
the side effect of `horovod.keras.DistributedOptimizer`, which under Keras 3 silently stops averaging.
Moving to another stack means changing this module and the pins, nothing else.
"""
from __future__ import annotations

import os

import tensorflow as tf

# Environment variables by which launchers tell a process its world size.
_LAUNCHER_SIZE_VARS = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS")

_hvd = None  # horovod.tensorflow, once init() found a launcher


def launched_size() -> int:
    """World size announced by a launcher's environment, 1 when none is there."""
    for var in _LAUNCHER_SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def init() -> None:
    """Starts Horovod under a launcher, pins one GPU per local rank (memory growth on), and on CPUs
    splits the cores between the local ranks so they do not oversubscribe them."""
    global _hvd
    if _hvd is None and (launched_size() > 1 or "HOROVOD_RANK" in os.environ):
        try:
            import horovod.tensorflow as hvd
        except ImportError as error:
            raise RuntimeError(
                f"launched as {launched_size()} processes, but Horovod cannot be imported ({error}); "
                f"run `make install` (it builds Horovod), or start a single process with plain `python`"
            ) from error
        hvd.init()
        _hvd = hvd
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[local_rank() % len(gpus)], "GPU")
    elif local_size() > 1:
        threads = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
                      // local_size())
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, threads)))


def rank() -> int:
    return _hvd.rank() if _hvd else 0


def size() -> int:
    return _hvd.size() if _hvd else 1


def local_rank() -> int:
    return _hvd.local_rank() if _hvd else 0


def local_size() -> int:
    return _hvd.local_size() if _hvd else 1


def is_chief() -> bool:
    """True on the process that writes logs, checkpoints and exports (rank 0)."""
    return rank() == 0


def average_gradients(grads, compression: bool = False):
    """Averages a list of gradients over all ranks in one grouped allreduce.

    compression: send fp16 over the wire (halves traffic; scaled fp16-training gradients that overflow
    become inf on every rank alike, and the loss-scale optimizer then skips that step everywhere).
    """
    if size() == 1:
        return list(grads)
    dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    codec = _hvd.Compression.fp16 if compression else _hvd.Compression.none
    return _hvd.grouped_allreduce(dense, op=_hvd.Average, compression=codec)


def broadcast_variables(variables, root_rank: int = 0) -> None:
    """Overwrites `variables` on every rank with the root rank's values."""
    if size() > 1 and variables:
        _hvd.broadcast_variables(list(variables), root_rank=root_rank)


def allreduce(value, average: bool = True, name: str | None = None):
    """Mean (or sum) of a tensor over ranks; the identity in a single process."""
    if size() == 1:
        return tf.convert_to_tensor(value)
    return _hvd.allreduce(tf.convert_to_tensor(value), op=_hvd.Average if average else _hvd.Sum, name=name)


def average_variables(variables) -> None:
    """Replaces each variable by its mean over ranks (e.g. batch-norm moving statistics)."""
    if size() > 1:
        for variable, mean in zip(variables, _hvd.grouped_allreduce(list(variables), op=_hvd.Average)):
            variable.assign(mean)


def broadcast_object(obj, root_rank: int = 0):
    """A picklable Python object from the root rank, on every rank."""
    return _hvd.broadcast_object(obj, root_rank=root_rank) if size() > 1 else obj

