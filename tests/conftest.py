import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402


@pytest.fixture
def mixed_policy(request):
    """Runs a test under a Keras global dtype policy, restoring float32 afterwards."""
    tf.keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    tf.keras.mixed_precision.set_global_policy("float32")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (CI still runs them)")
