"""tfcnn.train on data in memory, under a launcher: every rank trains on its share of the same arrays and
writes OUT_DIR/rank{r}.json: its RunResult's fields, the example ids its training stream took in one
epoch (from the images of an id-coded array, through the pipeline tfcnn.train uses), and for each validation
the ids of the validation examples it scored (their first pixel carries them into the batches it evaluated).

    horovodrun --gloo -np 2 python tests/scripts/memory_probe.py OUT_DIR

With --held instead, in one process: what a running training stream of data in memory holds (held_in_memory).
"""
import json
import os
import sys

import numpy as np


def stripe_arrays(count: int, size: int = 32, seed: int = 0):
    """(x uint8 [count, size, size, 3], y [count]): horizontal (0) or vertical (1) stripes of random phase,
    period and colour, with noise: learnable by a small CNN in a few hundred images."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, count)
    x = np.empty((count, size, size, 3), np.uint8)
    grid = np.arange(size)
    for i, label in enumerate(y):
        period, phase = rng.integers(4, 9), rng.integers(0, 8)
        on = ((grid + phase) % period) < period // 2
        mask = on[:, None] if label == 0 else on[None, :]
        colour, background = rng.integers(150, 256, 3), rng.integers(0, 100, 3)
        image = np.where(np.broadcast_to(mask, (size, size))[..., None], colour, background)
        x[i] = np.clip(image + rng.normal(0, 20, image.shape), 0, 255).astype(np.uint8)
    return x, y


def id_coded(count: int, x=None):
    """Prepared 8 px images (or the images x) whose first pixel holds the example's id (count <= 65536), zero
    labels."""
    x = np.zeros((count, 8, 8, 3), np.uint8) if x is None else x.copy()
    x[:, 0, 0, 0], x[:, 0, 0, 1] = np.arange(count) % 256, np.arange(count) // 256
    return x, np.zeros(count, np.int64)


def ids_of(images) -> list[int]:
    return [int(i) for i in images[:, 0, 0, 0].numpy().astype(int) + 256 * images[:, 0, 0, 1].numpy().astype(int)]


def epoch_ids(count: int, batch_size: int, num_shards: int, shard_index: int) -> list[int]:
    from tfcnn.data import memory

    batches = memory.train_batches(id_coded(count), batch_size=batch_size, image_size=8, num_classes=1, seed=3,
                                   num_shards=num_shards, shard_index=shard_index, train_crop="none")
    steps = len(range(shard_index, count, num_shards)) // batch_size
    return [i for images, _ in batches.take(steps) for i in ids_of(images)]


def recording_validation_ids(scored: list):
    """Makes every evaluation of data in memory (tfcnn.data.memory.eval_batches, which the trainer's validation
    reads) append the ids of the examples of its batches to `scored`."""
    from tfcnn.data import memory

    original = memory.eval_batches

    def eval_batches(data, **options):
        batches = original(data, **options)
        scored.append([i for images, _ in batches for i in ids_of(images)])
        return batches

    memory.eval_batches = eval_batches


def resident_bytes() -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) << 10


def held_in_memory() -> dict:
    """{kind: the memory a running training stream of 230 MB of uint8 images holds, as a multiple of their size},
    for the images as a Dataset (measured first: nothing freed before it for it to reuse) and as arrays, each
    stream kept running while the other is measured."""
    import tensorflow as tf

    from tfcnn.data import memory

    x = np.ones((3000, 160, 160, 3), np.uint8)  # every page written, so resident
    y = np.zeros(len(x), np.int64)
    held, running = {}, []
    for kind, data in (("dataset", lambda: tf.data.Dataset.from_tensor_slices((x, y))), ("arrays", lambda: (x, y))):
        before = resident_bytes()
        running.append(iter(memory.train_batches(data(), batch_size=8, image_size=32, num_classes=1, seed=0)))
        for _ in range(3):
            next(running[-1])
        held[kind] = (resident_bytes() - before) / x.nbytes
    return held


def main(out_dir):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import testnet  # the trainer tests' small model: what is tested here is the data's path, not a network

    import tfcnn
    from tfcnn import distributed

    testnet.register()
    scored = []
    recording_validation_ids(scored)
    x_val, y_val = stripe_arrays(50, seed=2)
    x_val = id_coded(50, x_val)[0]
    result = tfcnn.train(model="testnet", train_data=stripe_arrays(192, seed=1), val_data=(x_val, y_val),
                         num_iter=2, batch_size=16, lr=1.0, warmup_epochs=0, train_crop="inception",
                         display_every=4, seed=5, log_dir=os.path.join(out_dir, "run"))
    record = {"status": result.status, "step": result.step, "total_steps": result.total_steps,
              "validation": result.validation, "validation_history": result.validation_history,
              "validation_ids": scored, "checkpoint": result.checkpoint,
              "ids": epoch_ids(100, 4, distributed.size(), distributed.rank()), "ranks": distributed.size()}
    with open(os.path.join(out_dir, f"rank{distributed.rank()}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    if sys.argv[1] == "--held":
        print(json.dumps(held_in_memory()))
    else:
        main(sys.argv[1])
