"""Export a model for serving: a SavedModel, or ONNX (optionally with its int8 twin).

    python -m tfcnn.export --output_dir DIR (--checkpoint PATH | --log_dir DIR | --model NAME --weights FILE |
        --saved_model DIR) [--format saved_model|onnx] [--data_dir DIR]
        [--int8 [--int8_target tensorrt|cpu] [--calibration_images 300]]
        [--image_size N --crop_fraction F --interpolation bilinear|bicubic --eval_crop torchvision|ngc --num_classes N]

Takes what tfcnn.evaluate takes, fed as the weights record (their data config; the flags override it).
Both formats serve `images`: float32 [batch, S, S, 3] RGB pixels in 0-255, normalization inside, and return
`logits` and `probabilities`; labels.txt (from --data_dir) and tfcnn.json (model, size, classes, data
config) sit beside them. --format onnx writes DIR/model.onnx (opset 17), converted from the SavedModel's
serving_default function and checked against TensorFlow with ONNX Runtime before it is written; --int8 adds
DIR/model.int8.onnx, QDQ int8 calibrated on --calibration_images of --data_dir's train shards through the
evaluation view, for --int8_target tensorrt (symmetric int8 activations, what TensorRT takes) or cpu
(asymmetric uint8 activations, which ONNX Runtime's x86 kernels fuse). ONNX needs the onnx extra:
pip install -e '.[onnx]' (or make install ONNX=1). --saved_model converts an existing tfcnn SavedModel
export to ONNX. DIR appears only when complete.

    tfcnn.export("runs/rn50", "exported/rn50")                   # a checkpoint, log dir, zoo model, RunResult
    tfcnn.export(result, "exported/rn50_onnx", format="onnx")     # ONNX (pip install -e '.[onnx]')
"""
from __future__ import annotations

import os
import sys

from tfcnn import callable_module, sources
from tfcnn.options import add_feed_flags, add_weight_sources, check_feed_flags, command_parser

FORMATS = ("saved_model", "onnx")
# tfcnn.onnx_export.INT8_TARGETS (a test keeps them equal), here so that flags are checked before TensorFlow loads
INT8_TARGETS = ("tensorrt", "cpu")
DEFAULT_CALIBRATION_IMAGES = 300


def export(source, output_dir: str, *, format: str = "saved_model", model: str | None = None,
           data_dir: str | None = None, int8: bool = False, int8_target: str = INT8_TARGETS[0],
           calibration_images: int = DEFAULT_CALIBRATION_IMAGES, image_size: int | None = None,
           crop_fraction: float | None = None, interpolation: str | None = None, eval_crop: str | None = None,
           num_classes: int | None = None, log=print) -> str:
    """Writes the export of `source` (a path, zoo model or RunResult: tfcnn.sources; for format 'onnx' also a
    tfcnn SavedModel export) to output_dir, which appears only when complete; returns its path.
    format: saved_model or onnx. data_dir: the dataset whose labels.txt goes beside the export (default, for a
    training log directory or its RunResult: the run's own data_dir, where its labels.txt still is, or for a
    run on a Dataset that named its classes its log directory, where training wrote them), and whose train
    shards int8 calibrates on (calibration_images of them, for int8_target tensorrt or cpu)."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, received: {format!r}")
    sources.check_export_dir(output_dir)  # before any weights are read
    if int8 and format != "onnx":
        raise ValueError(f"int8 quantizes the ONNX export: pass format='onnx' (received {format!r})")
    if int8 and not data_dir:
        raise ValueError("int8 needs data_dir (the train shards it calibrates on)")
    if format == "onnx":
        from tfcnn import onnx_export

        onnx_export.require()  # before any weights are read
    if sources.is_saved_model(source):
        if format != "onnx":
            raise ValueError(f"{source} is already a SavedModel: convert it with format 'onnx' (--format onnx)")
        fixed = [name for name, value in (("model", model), ("image_size", image_size), ("crop_fraction", crop_fraction),
                                          ("interpolation", interpolation), ("eval_crop", eval_crop),
                                          ("num_classes", num_classes)) if value]
        if fixed:
            raise ValueError(f"a SavedModel export takes no {', '.join(fixed)}: its tfcnn.json fixes them")
        network = os.fspath(source)
    else:
        network = sources.load_model(source, model=model, image_size=image_size, crop_fraction=crop_fraction,
                                     interpolation=interpolation, eval_crop=eval_crop, num_classes=num_classes,
                                     log=log)
    if data_dir is None:
        data_dir = sources.run_labels_dir(source)
    if format == "saved_model":
        from tfcnn.training.export import export_saved_model

        return export_saved_model(network, output_dir, data_dir, log)
    return onnx_export.export_onnx(network, output_dir, data_dir, calibration_images if int8 else 0, int8_target, log)


def parse_args(argv=None):
    parser = command_parser("python -m tfcnn.export", __doc__)
    parser.add_argument("--output_dir", required=True, help="the export directory (replaced when complete)")
    parser.add_argument("--format", choices=FORMATS, default="saved_model")
    add_weight_sources(parser, "a tfcnn SavedModel export, to convert to --format onnx")
    parser.add_argument("--model", help="model name (default: what the checkpoint records)")
    parser.add_argument("--data_dir", help="the dataset's directory: labels.txt (default: the --log_dir run's "
                                           "own), and the train shards --int8 calibrates on")
    parser.add_argument("--int8", action="store_true", help="with --format onnx: also write model.int8.onnx")
    parser.add_argument("--int8_target", choices=INT8_TARGETS, default=INT8_TARGETS[0],
                        help="tensorrt: symmetric int8 activations (TensorRT's explicit quantization); cpu: "
                             "asymmetric uint8 activations (ONNX Runtime on x86)")
    parser.add_argument("--calibration_images", type=int, default=DEFAULT_CALIBRATION_IMAGES,
                        help="train images --int8 calibrates on")
    add_feed_flags(parser)
    args = parser.parse_args(argv)
    check_feed_flags(parser, args, ("image_size", "num_classes", "calibration_images"))
    if args.int8 and args.format != "onnx":
        parser.error(f"--int8 quantizes the ONNX export: add --format onnx (received --format {args.format})")
    if args.int8 and not args.data_dir:
        parser.error("--int8 needs --data_dir (the train shards it calibrates on)")
    if args.saved_model:
        if args.format != "onnx":
            parser.error(f"--saved_model {args.saved_model} is already a SavedModel: convert it with --format onnx")
        fixed = [f"--{name}" for name in ("model", "image_size", "crop_fraction", "interpolation", "eval_crop",
                                          "num_classes")
                 if getattr(args, name) is not None]
        if fixed:
            parser.error(f"--saved_model takes no {', '.join(fixed)}: the export's tfcnn.json fixes them")
    return args


def main(argv=None):
    args = parse_args(argv)
    source = args.saved_model or args.checkpoint or args.log_dir or args.weights
    try:
        if args.saved_model and not sources.is_saved_model(args.saved_model):
            raise ValueError(f"{args.saved_model} is not a tfcnn SavedModel export (no {sources.EXPORT_INFO_FILE})")
        directory = export(source, args.output_dir, format=args.format, model=args.model, data_dir=args.data_dir,
                           int8=args.int8, int8_target=args.int8_target, calibration_images=args.calibration_images,
                           image_size=args.image_size, crop_fraction=args.crop_fraction,
                           interpolation=args.interpolation, eval_crop=args.eval_crop, num_classes=args.num_classes)
    except (ImportError, ValueError, RuntimeError) as error:
        sys.exit(f"tfcnn.export: error: {error}")
    print(f"tfcnn.export: {args.format} export in {directory}")


callable_module(__name__, export)

if __name__ == "__main__":
    main()
