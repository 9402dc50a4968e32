"""tfcnn: TensorFlow 2 CNN training toolkit (model zoo, TFRecord pipeline, Horovod mixed-precision training)."""
import os

# TensorFlow's C++ INFO lines (oneDNN, CPU features) drown out the tools' own output; a user's own
# TF_CPP_MIN_LOG_LEVEL still wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

__version__ = "0.1.0"
