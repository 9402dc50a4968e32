"""The precisions, as Keras policies and as the dtype of the images fed to a model; the notes for settings
that are slow on the hardware at hand (fp16 or XLA without a GPU), and which CPU kernels run."""
from __future__ import annotations

import functools
import os

import tensorflow as tf

# fp64: float64 throughout, for checking tfcnn's numerics against a float64 reference (tests/test_recipes.py);
# slow, and only on CPUs.
POLICIES = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16", "fp64": "float64"}
COMPUTE_DTYPES = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16, "fp64": tf.float64}
# CPU extensions with native bfloat16 arithmetic, which oneDNN uses for bf16 convolutions.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def require_keras_2() -> None:
    """Raises unless tf.keras is Keras 2 (TF 2.15's own, or tf_keras on TF >= 2.16). tfcnn is written
    against Keras 2: under Keras 3 the models would still build, but mixed precision, the optimizers
    and Horovod's gradient averaging behave differently, so training would silently differ."""
    version = getattr(tf.keras, "__version__", "2")  # Keras 2's tf.keras has no __version__; Keras 3's has
    if not version.startswith("2"):
        raise ImportError(
            f"tfcnn needs Keras 2, but tf.keras is Keras {version} (TensorFlow {tf.__version__}). Install the "
            f"tf_keras release matching TensorFlow and set TF_USE_LEGACY_KERAS=1 before Python starts; "
            f"tfcnn's 'make install' does both for its venv")


def set_policy(precision: str) -> None:
    """Sets Keras' global dtype policy: models built afterwards compute in that precision."""
    tf.keras.mixed_precision.set_global_policy(POLICIES[precision])


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    if not os.path.exists("/proc/cpuinfo"):
        return frozenset()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def has_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def onednn_enabled() -> bool:
    """Whether this process runs oneDNN's CPU kernels: TF_ENABLE_ONEDNN_OPTS, or TensorFlow's own choice by
    the CPU where it is unset. TensorFlow's answer (no public API gives it)."""
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def cpu_kernels() -> str | None:
    """"oneDNN's" or "Eigen's", as TF_ENABLE_ONEDNN_OPTS selects them; None where it is unset and
    TensorFlow chooses by the CPU."""
    chosen = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if chosen is None:
        return None
    return "oneDNN's" if chosen.lower() in ("1", "true") else "Eigen's"


def cpu_kernels_note() -> str:
    """Which CPU kernels TensorFlow runs and who chose: tfcnn's venv turns oneDNN's on unless the user set
    TF_ENABLE_ONEDNN_OPTS (TensorFlow's own default is oneDNN only on AVX-512-class CPUs, Eigen elsewhere)."""
    chosen = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if os.environ.get("TFCNN_ONEDNN_DEFAULT") == "1" and chosen == "1":
        return ("CPU kernels: oneDNN's (tfcnn's default; 0.9-3.5x Eigen's speed on AVX2 CPUs); "
                "TF_ENABLE_ONEDNN_OPTS=0 selects Eigen's")
    if chosen is None:
        return "CPU kernels: TensorFlow's choice (oneDNN's on AVX-512-class CPUs, Eigen's on others)"
    return f"CPU kernels: {cpu_kernels()} (TF_ENABLE_ONEDNN_OPTS={chosen}, set in the environment)"


def hardware_notes(precision: str = "fp32", use_xla: bool = False) -> list[str]:
    """Why the chosen precision or --use_xla is a poor choice on this machine: [] when it is fine.

    Without a GPU, TensorFlow runs fp16 through slow generic kernels (resnet18 training at 64 px:
    fp32 140.9 img/s, fp16 2.1, bf16 171.8 on an AVX-512 BF16 CPU), and XLA compiles convolutions to its
    own CPU code, slower than oneDNN's (bench/train_step.py: 0.36x and 0.69x on two CPUs).
    """
    if has_gpu():
        return []
    notes = []
    if precision == "fp16":
        bf16_native = any(flag in cpu_flags() for flag in BF16_CPU_FLAGS)
        advice = ("use --precision bf16, faster than fp32 on this CPU (it has AVX-512 BF16 / AMX)" if bf16_native
                  else "use --precision fp32 (bf16 pays off on CPUs with AVX-512 BF16 or AMX, which this one lacks)")
        notes.append(f"note: --precision fp16 without a GPU: TensorFlow has no fast fp16 kernels on CPUs, "
                     f"expect it to be dozens of times slower than fp32; {advice}")
    if use_xla:
        notes.append("note: --use_xla without a GPU: XLA's CPU convolutions are slower than TensorFlow's own "
                     "(0.36-0.69x in bench/train_step.py); XLA pays off on GPUs")
    return notes


def startup_notes(precision: str = "fp32", use_xla: bool = False) -> list[str]:
    """What a run prints about the hardware at start: which CPU kernels run and hardware_notes' warnings
    ([] on a GPU)."""
    return [] if has_gpu() else [cpu_kernels_note(), *hardware_notes(precision, use_xla)]
