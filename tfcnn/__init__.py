"""tfcnn: TensorFlow 2 CNN training toolkit (model zoo, TFRecord pipeline, Horovod mixed-precision training).

    import tfcnn
    model = tfcnn.create_model("resnet50", weights="imagenet", include_preprocessing=True)
    result = tfcnn.train(model="resnet18", train_data=(x, y), image_size=32, num_iter=10, log_dir="runs/rn18")
    scores = tfcnn.evaluate(result.checkpoint, data=(x_val, y_val))
    probabilities = tfcnn.predict(result, x_val)  # [N, classes], from 0-255 pixels
    tfcnn.export(result.checkpoint, "exported/")
    tfcnn.convert("resnet50", "resnet50-0676ba61.pth", "runs/rn50_tv")
    rows = tfcnn.benchmark("resnet50", mode="train", batch_sizes=[8])
    tfcnn.plots("plots", log_dirs=["runs/rn18"], benchmark=rows, evaluations=[scores])

train, evaluate, predict, export, convert, benchmark and plots are the modules of the same names (`python -m
tfcnn.train`, ...); each module is callable as its function. Importing tfcnn loads no TensorFlow: each loads
on first use.
"""
import contextlib
import gc
import importlib
import importlib.abc
import importlib.util
import os
import sys
import tempfile
import types

# TensorFlow's C++ INFO lines (oneDNN, CPU features) drown out the tools' own output; a user's own
# TF_CPP_MIN_LOG_LEVEL still wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _tensorflow_loaded(tf) -> None:
    """What tfcnn sets once TensorFlow is imported, by whichever import comes first.

    The objects TensorFlow's import made (430,000: _collections_paused) go to the garbage collector's permanent
    generation (gc.freeze): they live as long as the process, yet CPython's collections at exit traverse them
    all: 0.85 of the 1.0 CPU-s a tfcnn process took to exit (2-core EPYC), 0.15 frozen. Objects made later are
    collected as before.

    TensorFlow's logger prints through a handler of its own when the root logger has none, counting on the
    root staying so; but absl's first log call (TensorFlow's checkpoint writer makes one) gives the root a
    handler (logging.basicConfig), and every TensorFlow warning after a notebook's first checkpoint was
    printed twice. With its own handler it no longer passes lines on to the root's."""
    gc.freeze()
    logger = tf.get_logger()
    if logger.handlers:
        logger.propagate = False


# TensorFlow 2.21's start-up lines, each printed by both of its C++ libraries before their logging reads
# TF_CPP_MIN_LOG_LEVEL: four lines atop every command's output (and every rank's). tfcnn prints which kernels
# run itself (tfcnn.precision.cpu_kernels_note).
_STARTUP_NOISE = (b"All log messages before absl::InitializeLog() is called are written to STDERR",
                  b"] oneDNN custom operations are on.")


@contextlib.contextmanager
def _startup_noise_left_out():
    """Holds what is written to the process's stderr (file descriptor 2, where C++ writes) meanwhile, then
    writes it on without _STARTUP_NOISE's lines. With TF_CPP_MIN_LOG_LEVEL=0 (a user asking for every line),
    or without a descriptor 2, nothing is held."""
    saved = None
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") != "0":
        with contextlib.suppress(OSError):
            saved = os.dup(2)
    if saved is None:
        yield
        return
    with tempfile.TemporaryFile() as held:
        _flush_stderr()
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            _flush_stderr()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True)
                    if not any(noise in line for noise in _STARTUP_NOISE)]
            if kept:
                os.write(2, b"".join(kept))


def _flush_stderr():
    if sys.stderr is not None:  # None in a process started without one (pythonw, some embedders)
        sys.stderr.flush()


@contextlib.contextmanager
def _collections_paused():
    """No garbage collection meanwhile: TensorFlow's import makes 430,000 objects, and CPython collected about 1,200
    times as it did, each full collection through all made so far: 0.2 of the 2.6 CPU-s of `import
    tfcnn.training.run` (2-core EPYC), in every process. Those collections freed 155,000 of them, which now stay
    (frozen with the rest by _tensorflow_loaded), the process's resident memory the same to the megabyte."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _OnTensorFlowImport(importlib.abc.MetaPathFinder):
    """Calls _tensorflow_loaded once `tensorflow` has been imported, its start-up noise left out."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow" or self not in sys.meta_path:
            return None
        sys.meta_path.remove(self)  # the import below finds TensorFlow's own spec
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                with _startup_noise_left_out(), _collections_paused():
                    execute(module)
                    _tensorflow_loaded(module)  # its objects frozen before the collector runs again
            spec.loader.exec_module = exec_module
        return spec


if "tensorflow" in sys.modules:
    _tensorflow_loaded(sys.modules["tensorflow"])
else:
    sys.meta_path.insert(0, _OnTensorFlowImport())

__version__ = "0.1.0"
__all__ = ["benchmark", "convert", "create_model", "evaluate", "export", "list_models", "model_info", "plots",
           "predict", "train"]

# Modules callable as their function.
_TOOLS = ("train", "evaluate", "predict", "export", "convert", "benchmark", "plots")
_MODELS = ("create_model", "list_models", "model_info")


def callable_module(module_name: str, function) -> None:
    """Makes the module `module_name` callable as `function`, so that `tfcnn.evaluate(...)` works whether or
    not `import tfcnn.evaluate` (which binds the module to that name, as `python -m` needs it) happened."""
    module = sys.modules[module_name]

    class CallableModule(types.ModuleType):
        __doc__ = module.__doc__

        def __call__(self, *args, **kwargs):
            return function(*args, **kwargs)

    module.__class__ = CallableModule


def __getattr__(name):
    if name in _TOOLS:
        return importlib.import_module(f"tfcnn.{name}")
    if name in _MODELS:
        return getattr(importlib.import_module("tfcnn.models"), name)
    raise AttributeError(f"module 'tfcnn' has no attribute {name!r}")
