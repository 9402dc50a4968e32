"""The three precisions, as Keras policies and as the dtype of the images fed to a model; and the note
for XLA where it slows training down (no GPU)."""
import tensorflow as tf

PRECISIONS = ("fp32", "fp16", "bf16")
POLICIES = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
COMPUTE_DTYPES = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}


def set_policy(precision: str) -> None:
    """Sets Keras' global dtype policy: models built afterwards compute in that precision."""
    tf.keras.mixed_precision.set_global_policy(POLICIES[precision])


def xla_note(use_xla: bool) -> str | None:
    """Why --use_xla is a poor choice here, or None: without a GPU, XLA compiles convolutions to its own
    CPU code, slower than TensorFlow's oneDNN kernels (bench/train_step.py: 0.36x and 0.69x on two CPUs)."""
    if use_xla and not tf.config.list_physical_devices("GPU"):
        return ("note: --use_xla without a GPU: XLA's CPU convolutions are slower than TensorFlow's own "
                "(0.36-0.69x in bench/train_step.py); XLA pays off on GPUs")
    return None
