"""Reference weights generated from a seed by numpy alone, so that the same arrays exist in the
reference venv (torch, where the fixtures are recorded) and in the tests (no torch).

numpy's RandomState streams are frozen across numpy versions (unlike Generator's), and every tensor has
its own stream, seeded by (seed, key), so neither the key order nor other keys change a tensor.
Scales keep activations finite and informative through a hundred layers: He-uniform kernels, batch norm
with gamma around 1, small betas and non-trivial running statistics. The norms that end a residual
branch (the fixture's `damped` pattern) get small gammas, as trained networks have: otherwise random
branches double the activations' variance at every block, and through 30 squeeze-excitation blocks the
saturating gates amplify float rounding chaotically (1e-7 at the stem, 0.3 relative at the logits),
which would hide what the test is for.
"""
import base64
import json
import os
import re
import zlib

import numpy as np

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "reference")


def tensor(key: str, shape, seed: int, damped: str | None = None) -> np.ndarray:
    rng = np.random.RandomState((seed * 1_000_003 + zlib.crc32(key.encode())) % 2**32)
    kind = key.rsplit(".", 1)[-1]
    shape = tuple(shape)
    if kind == "running_var":
        values = rng.uniform(0.5, 2.0, shape)
    elif kind == "running_mean":
        values = rng.uniform(-0.2, 0.2, shape)
    elif kind == "bias":
        values = rng.uniform(-0.1, 0.1, shape)
    elif len(shape) == 1 and damped and re.search(damped, key):
        values = rng.uniform(0.1, 0.3, shape)
    elif len(shape) == 1:  # a norm's scale
        values = rng.uniform(0.5, 1.5, shape)
    else:
        fan_in = int(np.prod(shape[1:]))
        bound = np.sqrt(6.0 / fan_in)
        values = rng.uniform(-bound, bound, shape)
    return values.astype(np.float32)


def state_dict(keys_and_shapes, seed: int, damped: str | None = None) -> dict:
    return {key: tensor(key, shape, seed, damped) for key, shape in keys_and_shapes
            if not key.endswith("num_batches_tracked")}


def images(seed: int, batch: int, size: int) -> np.ndarray:
    """Normalized NHWC inputs (the models' input after mean/std), float32."""
    return np.random.RandomState(seed).uniform(-2.0, 2.0, (batch, size, size, 3)).astype(np.float32)


def encode(array: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(array, np.float32).tobytes()).decode()


def decode(text: str, shape) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), np.float32).reshape(shape)


def fixture(name: str) -> dict:
    """tests/fixtures/reference/NAME.json, recorded by tests/scripts/record_reference_fixtures.py."""
    with open(os.path.join(FIXTURES, f"{name}.json")) as f:
        return json.load(f)


def write_safetensors(fixture: dict, path, drop=(), extra=None) -> str:
    """The fixture's state dict, regenerated from its seed, as a .safetensors file in the reference's naming
    (without the keys in `drop`, plus the `extra` arrays)."""
    from safetensors.numpy import save_file

    tensors = state_dict([(k, s) for k, s in fixture["keys"] if k not in drop], fixture["seed"], fixture.get("damped"))
    save_file({**tensors, **(extra or {})}, str(path))
    return str(path)


def relative_error(actual, expected) -> float:
    return float(np.abs(np.asarray(actual) - expected).max() / np.abs(expected).max())
