"""Horovod data-parallel, mixed-precision training: `train(make_config(...))`."""
from tfcnn.training.config import RECIPES, TrainConfig, make_config
from tfcnn.training.trainer import NonFiniteLossError, train

__all__ = ["RECIPES", "NonFiniteLossError", "TrainConfig", "make_config", "train"]
