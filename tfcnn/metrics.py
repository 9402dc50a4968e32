"""Top-1 / top-5 counting over a dataset, shared by evaluation and the trainer's --predict."""
from __future__ import annotations

import time

import tensorflow as tf


def count_correct(predict_fn, dataset, progress=None, every_seconds: float = 10.0) -> dict:
    """Sums, over every batch of `dataset`, the images and how many have the label in the top 1 / top 5
    logits (a label is in the top k when fewer than k logits are strictly greater than its own).

    progress: called as progress(counts, seconds) every `every_seconds` (and not at the end), for
    progress lines on long evaluations.
    """
    @tf.function
    def batch_counts(images, labels):
        logits = tf.cast(predict_fn(images), tf.float32)
        true_logit = tf.gather(logits, labels, axis=1, batch_dims=1)
        greater = tf.reduce_sum(tf.cast(logits > true_logit[:, None], tf.int64), axis=1)
        return tf.stack([tf.size(labels, tf.int64), tf.reduce_sum(tf.cast(greater < 1, tf.int64)),
                         tf.reduce_sum(tf.cast(greater < 5, tf.int64))])

    totals = tf.zeros([3], tf.int64)
    start = last = time.perf_counter()
    for images, labels in dataset:
        totals += batch_counts(images, labels)
        if progress and time.perf_counter() - last >= every_seconds:
            last = time.perf_counter()
            progress(_as_counts(totals), last - start)
    return _as_counts(totals)


def _as_counts(totals) -> dict:
    count, top1, top5 = (int(v) for v in totals.numpy())
    return {"count": count, "top1_correct": top1, "top5_correct": top5}


def accuracy(counts: dict) -> dict:
    """Adds top1 / top5 fractions to summed counts."""
    n = counts["count"]
    return {**counts, "top1": counts["top1_correct"] / n if n else 0.0,
            "top5": counts["top5_correct"] / n if n else 0.0}


def top5_text(top5: float, num_classes: int) -> str | None:
    """Top-5 as printed, or None where it says nothing: with 5 classes or fewer every label is among an image's
    top 5, so it is 100% whatever the model (the results and logs keep the number)."""
    return f"{100 * top5:.2f}%" if num_classes > 5 else None


def scores_text(scores: dict, num_classes: int) -> str:
    """'top1 X%, top5 Y% over N images' (top-5 left out where top5_text has none), as training's validation prints."""
    top5 = top5_text(scores["top5"], num_classes)
    return f"top1 {100 * scores['top1']:.2f}%{f', top5 {top5}' if top5 else ''} over {scores['count']} images"
