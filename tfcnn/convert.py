"""Convert timm / torchvision ImageNet weights into a tfcnn checkpoint (and optionally a SavedModel).

    python -m tfcnn.convert --model resnet50 --weights resnet50-0676ba61.pth --output_dir runs/rn50_tv \\
        [--num_classes 10 --new_head] [--export] [--image_size N --crop_fraction F --interpolation bicubic
        --mean R,G,B --std R,G,B]

Writes OUTPUT_DIR/checkpoints/ckpt-0, which records the model, its class count, the builder options the
weights need (e.g. Inception's count_include_pad) and their data config (input size, crop, mean/std on
the 0-255 scale, interpolation: from timm's config.json beside the file, torchvision's transforms for a
torchvision file name, else the family's usual, said so; the flags override it). Then:

    python -m tfcnn.evaluate --data_dir DIR --checkpoint OUTPUT_DIR
    python examples/train.py --init_weights OUTPUT_DIR ...

--export also writes OUTPUT_DIR/saved_model (both serving signatures, fed as the weights expect).
OUTPUT_DIR/convert.json says what was loaded and skipped; OUTPUT_DIR is new, empty or an older conversion,
which the new one replaces whole once written (a training run's directory is refused: it would lose its
checkpoints). Loading is strict: a file of another architecture is refused naming its keys. --weights also takes a published weights name ("imagenet",
python -m tfcnn.models NAME lists a model's), downloaded once into the weights cache.

    tfcnn.convert("resnet50", "resnet50-0676ba61.pth", "runs/rn50_tv", num_classes=10, new_head=True)
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from tfcnn import callable_module
from tfcnn.fileio import check_output_dir, staged_directory
from tfcnn.options import EVAL_CROPS, command_parser

RECORD_FILE = "convert.json"  # what a conversion records beside its checkpoint


def convert(model: str, weights: str, output_dir: str, *, num_classes: int | None = None, new_head: bool = False,
            export: bool = False, image_size: int | None = None, crop_fraction: float | None = None,
            interpolation: str | None = None, eval_crop: str | None = None, mean=None, std=None,
            log=print) -> dict:
    """Writes output_dir/checkpoints/ckpt-0 of `model` loaded with `weights` (a timm / torchvision file or a
    weights name), and with export=True output_dir/saved_model; returns what convert.json records.
    new_head: load all but the classifier, which starts fresh with num_classes classes. The feed overrides
    (image_size, crop_fraction, interpolation, eval_crop, mean and std as R,G,B on the 0-255 scale) replace
    what the weights' data config says."""
    import tensorflow as tf

    from tfcnn import checkpoints
    from tfcnn.fileio import atomic_write_text
    from tfcnn.models import create_model
    from tfcnn.models.registry import check_model
    from tfcnn.models.weights import load_weights, open_weights

    check_model(model)
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, received: {num_classes}")
    if new_head and not num_classes:
        raise ValueError("new_head needs num_classes (the new classifier's class count)")
    # A run's log directory would lose its checkpoints (the conversion's keeps one) and resume from the weights.
    check_output_dir(output_dir, RECORD_FILE, "conversion", "output_dir")
    source = open_weights(model, weights)
    data = source.data_config.replace(input_size=image_size, crop_fraction=crop_fraction,
                                      interpolation=interpolation, eval_crop=eval_crop, mean=mean, std=std)
    head = "new" if new_head else "keep"
    num_classes = num_classes or (source.num_classes if head == "keep" else None)
    network = create_model(model, num_classes=num_classes, input_shape=(data.input_size, data.input_size, 3),
                           **source.options)
    network.data_config = data
    report = load_weights(network, source, head=head, log=log)
    # Written whole beside output_dir, then moved into place: an interrupted conversion leaves an older one as it
    # was, and a new one without --export keeps no older conversion's saved_model/ beside its weights.
    final_dir = os.path.abspath(output_dir)
    with staged_directory(final_dir, RECORD_FILE, "conversion", "output_dir") as tmp:
        manager = tf.train.CheckpointManager(checkpoints.make_checkpoint(network), checkpoints.checkpoint_dir(tmp),
                                             max_to_keep=1, checkpoint_name="ckpt")
        saved = manager.save(checkpoint_number=0)  # the checkpoint records its path relative to its directory
        summary = {"model": model, "source": os.path.abspath(source.path), "kind": source.kind,
                   "num_classes": checkpoints.model_classes(network), "loaded_tensors": report["loaded"],
                   "skipped": report["skipped"], "new_head": new_head, "options": dict(network.build_options),
                   "data_config": data.to_dict(), "data_config_origin": source.data_origin,
                   "checkpoint": os.path.join(checkpoints.checkpoint_dir(final_dir), os.path.basename(saved))}
        if export:
            from tfcnn.training.export import export_saved_model

            export_saved_model(network, os.path.join(tmp, "saved_model"))
            summary["saved_model"] = os.path.join(final_dir, "saved_model")
        atomic_write_text(os.path.join(tmp, RECORD_FILE), json.dumps(summary, indent=1) + "\n")
    return summary


def _triple(text):
    values = [float(v) for v in text.split(",")]
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected three comma-separated numbers (R,G,B), received: {text!r}")
    return tuple(values)


def parse_args(argv=None):
    parser = command_parser("python -m tfcnn.convert", __doc__)
    parser.add_argument("--model", required=True, help="tfcnn model name (python -m tfcnn.models)")
    parser.add_argument("--weights", required=True, help="timm / torchvision state dict: .safetensors, or "
                                                         ".pth/.pt/.bin with torch installed; or a published weights "
                                                         "name (e.g. imagenet)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--num_classes", type=int, help="default: the file's classifier")
    parser.add_argument("--new_head", action="store_true", help="load all but the classifier (another "
                                                                 "--num_classes), which starts fresh")
    parser.add_argument("--export", action="store_true", help="also write OUTPUT_DIR/saved_model")
    parser.add_argument("--image_size", type=int, help="override the weights' input size")
    parser.add_argument("--crop_fraction", type=float, help="override the weights' evaluation crop")
    parser.add_argument("--interpolation", choices=("bilinear", "bicubic"), help="override the eval resize filter")
    parser.add_argument("--eval_crop", choices=tuple(EVAL_CROPS), help="override the evaluation view: torchvision or "
                        "ngc (the NGC scripts' central crop resized; crop fraction 0.8 unless --crop_fraction says)")
    parser.add_argument("--mean", type=_triple, help="override the normalization mean, R,G,B on the 0-255 scale")
    parser.add_argument("--std", type=_triple, help="override the normalization std, R,G,B on the 0-255 scale")
    args = parser.parse_args(argv)
    if args.num_classes is not None and args.num_classes < 1:
        parser.error(f"--num_classes must be a positive integer, received: {args.num_classes}")
    if args.new_head and not args.num_classes:
        parser.error("--new_head needs --num_classes (the new classifier's class count)")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        summary = convert(args.model, args.weights, args.output_dir, num_classes=args.num_classes,
                          new_head=args.new_head, export=args.export, image_size=args.image_size,
                          crop_fraction=args.crop_fraction, interpolation=args.interpolation,
                          eval_crop=args.eval_crop, mean=args.mean, std=args.std)
    except ValueError as error:
        sys.exit(f"tfcnn.convert: error: {error}")
    print(f"tfcnn.convert: {summary['model']} <- {summary['source']}: {summary['loaded_tensors']} tensors loaded"
          + (f", skipped {len(summary['skipped'])} ({', '.join(summary['skipped'][:3])}...)" if summary["skipped"] else "")
          + f"\n  checkpoint: {summary['checkpoint']}"
          + (f"\n  SavedModel: {summary['saved_model']}" if "saved_model" in summary else "")
          + f"\n  data config: {summary['data_config']} ({summary['data_config_origin']})"
          + f"\n  evaluate: python -m tfcnn.evaluate --data_dir DIR --checkpoint {args.output_dir}")


callable_module(__name__, convert)

if __name__ == "__main__":
    main()
