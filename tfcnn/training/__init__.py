"""Horovod data-parallel, mixed-precision training: `train(make_config(...))`.

The configuration imports without TensorFlow, so entry points check their flags before it loads; the
trainer (and TensorFlow) loads on first use of `train` or `NonFiniteLossError`."""
from tfcnn.training.config import RECIPES, TrainConfig, make_config

__all__ = ["RECIPES", "NonFiniteLossError", "TrainConfig", "make_config", "train"]


def __getattr__(name):
    if name == "train":
        from tfcnn.training.run import train

        return train
    if name == "NonFiniteLossError":
        from tfcnn.training.callbacks import NonFiniteLossError

        return NonFiniteLossError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
