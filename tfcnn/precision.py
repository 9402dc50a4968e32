"""The three precisions, as Keras policies and as the dtype of the images fed to a model."""
import tensorflow as tf

PRECISIONS = ("fp32", "fp16", "bf16")
POLICIES = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}
COMPUTE_DTYPES = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}


def set_policy(precision: str) -> None:
    """Sets Keras' global dtype policy: models built afterwards compute in that precision."""
    tf.keras.mixed_precision.set_global_policy(POLICIES[precision])
