"""Reference weights generated from a seed by numpy alone, so that the same arrays exist in the
reference venv (torch, where the fixtures are recorded) and in the tests (no torch).

Uniform numbers come straight from PCG64's raw 64-bit stream, which numpy keeps frozen across versions
(Generator's distribution methods may change; RandomState's are frozen too, but five times slower in
float64: VGG's 138 M numbers took 3.4 s). Every tensor has its own stream, seeded by (seed, key), so
neither the key order nor other keys change a tensor.
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


# Numbers drawn at a time (even: a raw draw's two halves stay together): the bits are a small buffer, not a
# second array the size of the tensor, whose fresh pages cost more than the numbers on these VMs (VGG-11's
# 133 M: 0.35-1.5 CPU-s drawn at once, 0.28-0.36 in chunks, each in a new process).
CHUNK = 1 << 20


def uniform(entropy, low: float, high: float, shape) -> np.ndarray:
    """float32 numbers uniform in [low, high): the top 24 bits of each 32-bit half of PCG64's raw output."""
    count = int(np.prod(shape))
    values = np.empty(count, np.float32)
    generator = np.random.PCG64(entropy)
    scale, offset = np.float32((high - low) / 2**24), np.float32(low)
    for start in range(0, count, CHUNK):  # one stream, drawn in order: the same numbers as one draw
        chunk = values[start:start + CHUNK]
        bits = generator.random_raw((len(chunk) + 1) // 2).view(np.uint32)[:len(chunk)]
        bits >>= np.uint32(8)
        chunk[:] = bits  # exact: 24 bits fit a float32's mantissa
        chunk *= scale
        chunk += offset
    return values.reshape(shape)


def tensor(key: str, shape, seed: int, damped: str | None = None) -> np.ndarray:
    kind = key.rsplit(".", 1)[-1]
    shape = tuple(shape)
    if kind == "running_var":
        low, high = 0.5, 2.0
    elif kind == "running_mean":
        low, high = -0.2, 0.2
    elif kind == "bias":
        low, high = -0.1, 0.1
    elif len(shape) == 1 and damped and re.search(damped, key):
        low, high = 0.1, 0.3
    elif len(shape) == 1:  # a norm's scale
        low, high = 0.5, 1.5
    else:
        bound = float(np.sqrt(6.0 / int(np.prod(shape[1:]))))  # He-uniform on the fan-in
        low, high = -bound, bound
    return uniform([seed, zlib.crc32(key.encode())], low, high, shape)


def state_dict(keys_and_shapes, seed: int, damped: str | None = None) -> dict:
    return {key: tensor(key, shape, seed, damped) for key, shape in keys_and_shapes
            if not key.endswith("num_batches_tracked")}


def tf_variable(name: str, shape, seed: int) -> np.ndarray:
    """A TensorFlow variable (`conv2d_3/kernel`, `batch_normalization/moving_variance`, ...) by the rules of
    `tensor`, for TensorFlow's layouts: kernels (conv HWIO, dense (in, out), pointwise (1, 1, in, out))
    He-uniform on the fan-in of all but their last axis, depthwise kernels (kh, kw, in, multiplier) on kh x kw."""
    kind = name.rsplit("/", 1)[-1]
    shape = tuple(shape)
    if kind in ("moving_variance", "moving_mean", "bias", "beta"):
        key_kind = {"moving_variance": "running_var", "moving_mean": "running_mean", "beta": "bias"}.get(kind, kind)
        return tensor(f"{name}.{key_kind}", shape, seed)
    if kind == "gamma":
        return tensor(f"{name}.weight", shape, seed)
    fan_in = int(np.prod(shape[:2] if kind == "depthwise_kernel" else shape[:-1]))
    bound = float(np.sqrt(6.0 / fan_in))
    return uniform([seed, zlib.crc32(name.encode())], -bound, bound, shape)


def images(seed: int, batch: int, size: int) -> np.ndarray:
    """Normalized NHWC inputs (the models' input after mean/std), float32."""
    return uniform([seed, batch, size], -2.0, 2.0, (batch, size, size, 3))


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
