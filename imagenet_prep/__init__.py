"""Raw images -> sharded, pre-resized TFRecords (see build_tfrecords.py)."""
import tfcnn  # noqa: F401  (sets TensorFlow's C++ log level before TensorFlow is imported)
