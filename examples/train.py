"""Train an ImageNet CNN, one process per GPU (the same program as `python -m tfcnn.train`):

    python examples/train.py --model resnet18 --data_dir DIR --image_size 64 --num_iter 5
    horovodrun -np 8 python examples/train.py --recipe resnet50_90e --data_dir DIR --log_dir runs/rn50
    mpiexec --allow-run-as-root -np 8 python examples/train.py --recipe resnet50_90e --data_dir DIR

Without --data_dir it trains on synthetic data. Flags override the --recipe's values, which override
the defaults; the resolved configuration is written to --log_dir/config.json. Rerunning with the same
--log_dir resumes from its latest checkpoint. --flagfile FILE reads flags from a file. SIGTERM, SIGINT
or SIGUSR1 (--stop_signals) or --max_minutes stop the run after a step, with its checkpoint written,
and exit with status 75: rerun the same command to resume.
"""
from tfcnn.train import cli

if __name__ == "__main__":
    cli()
