"""One call for every input pipeline: tf.data (tfcnn.data.pipeline) or NVIDIA DALI (tfcnn.data.dali,
decoding on the CPU or the GPU). Both yield the same batches, (uint8 [batch, size, size, 3] RGB, int32
[batch] 0-based labels), so the trainer, the evaluator and the benchmarks never know which one fed them.
Above both modules, which import neither this one nor each other."""
from __future__ import annotations

from tfcnn.data import pipeline
from tfcnn.options import DATA_BACKENDS


def build_dataset(backend: str, data_dir: str | None, split: str, batch_size: int, image_size: int, **options):
    """pipeline.build_dataset's batches from `backend` ('tf', 'dali_cpu', 'dali_gpu'), with its arguments.
    Synthetic data (data_dir None) never needs DALI."""
    if backend not in DATA_BACKENDS:
        raise pipeline.DataError(f"--data_backend must be one of {', '.join(DATA_BACKENDS)}, received: {backend!r}")
    if backend == "tf" or data_dir is None:
        return pipeline.build_dataset(data_dir, split, batch_size, image_size, **options)
    from tfcnn.data import dali

    return dali.build_dataset(data_dir, split, batch_size, image_size, device=backend.split("_", 1)[1], **options)
