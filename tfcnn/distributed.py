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


def is_elastic() -> bool:
    """True under `horovodrun --min-np/--max-np/--host-discovery-script`, whose workers may come and go."""
    return os.environ.get("HOROVOD_ELASTIC") == "1"


def _collective() -> bool:
    """Whether collectives must be issued: with more than one rank, and always in an elastic run, whose
    compiled steps must keep their allreduces when it shrinks to one worker and grows back."""
    return _hvd is not None and (_hvd.size() > 1 or is_elastic())


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


def shutdown() -> None:
    """Shuts Horovod down on this rank (every rank does, at the end), if it was started."""
    if _hvd is not None:
        _hvd.shutdown()


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


def average_gradients(grads, compression: bool = False, state=()):
    """(gradients, state) averaged over all ranks in one grouped allreduce.

    state: tensors every rank must hold alike after the step (batch-norm moving statistics, the stop
    flag), averaged in the same collective. compression: send the gradients as fp16 over the wire
    (halves traffic; scaled fp16-training gradients that overflow become inf on every rank alike, and
    the loss-scale optimizer then skips that step everywhere); the state then takes a second, exact
    allreduce (a moving variance can exceed fp16's range).
    """
    grads, state = list(grads), list(state)
    if not _collective():
        return grads, state
    dense = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
    if not compression:
        averaged = _hvd.grouped_allreduce(dense + state, op=_hvd.Average)
        return averaged[:len(dense)], averaged[len(dense):]
    return (_hvd.grouped_allreduce(dense, op=_hvd.Average, compression=_hvd.Compression.fp16),
            _hvd.grouped_allreduce(state, op=_hvd.Average) if state else [])


def broadcast_variables(variables, root_rank: int = 0) -> None:
    """Overwrites `variables` on every rank with the root rank's values."""
    if _collective() and variables:
        _hvd.broadcast_variables(list(variables), root_rank=root_rank)


def allreduce(value, average: bool = True, name: str | None = None):
    """Mean (or sum) of a tensor over ranks; the identity in a single process."""
    if not _collective():
        return tf.convert_to_tensor(value)
    return _hvd.allreduce(tf.convert_to_tensor(value), op=_hvd.Average if average else _hvd.Sum, name=name)


def broadcast_object(obj, root_rank: int = 0):
    """A picklable Python object from the root rank, on every rank."""
    return _hvd.broadcast_object(obj, root_rank=root_rank) if _collective() else obj


def run_elastic(run_once, variables, log=print):
    """Runs `run_once(commit)` under Horovod's elastic driver until it returns; returns its result.

    `commit()`, called by run_once at the same steps on every rank, copies `variables` (weights,
    optimizer slots, step, ...) aside in memory and raises when the driver has added or removed
    workers. When a worker is lost, a collective fails on the survivors: they put the last committed
    values back. After either event the ranks re-form (Horovod shuts down and starts again with the
    new set of workers), rank 0's values are broadcast to every rank (newcomers included) and
    run_once runs again, reading the new size() and rank().
    """
    from horovod.common.elastic import State, run_fn
    from horovod.common.exceptions import HorovodInternalError

    class VariablesState(State):
        def __init__(self):
            super().__init__(bcast_object=_hvd.broadcast_object, get_rank=_hvd.rank)
            self.save()

        def save(self):
            self.saved = [tf.identity(v) for v in variables]

        def restore(self):
            for variable, value in zip(variables, self.saved):
                variable.assign(value)

        def sync(self):
            _hvd.broadcast_variables(variables, root_rank=0)
            self.save()

    def attempt(state):
        try:
            return run_once(state.commit)
        except tf.errors.OpError as error:  # a collective failed: a peer is gone
            if "Horovod" not in str(error) and "gloo" not in str(error).lower():
                raise
            log(f"tfcnn: rank {rank()}: a collective failed ({str(error).strip().splitlines()[0][:200]}); "
                f"rolling back to the last commit")
            raise HorovodInternalError(error) from error

    def reset():
        _hvd.shutdown()
        _hvd.init()

    return run_fn(attempt, reset)(VariablesState())

