# tfcnn GPU image, the default lane: CUDA 12.5.1 + cuDNN 9 (what tensorflow[and-cuda]==2.21.0 is built for),
# Python 3.11, OpenMPI, and Horovod 0.28.1 compiled with NCCL against TensorFlow 2.21 with tfcnn's patches.
#   docker build -t tfcnn .
#   docker run --gpus all --ipc=host --ulimit memlock=-1 -v /data/imagenet/tfrecords:/data tfcnn \
#       horovodrun -np 8 python -m tfcnn.train --recipe resnet50_90e --data_dir /data
# The devel image brings nvcc, the CUDA headers and NCCL, which Horovod (and DALI's TensorFlow plugin) compile against.
FROM nvidia/cuda:12.5.1-cudnn-devel-ubuntu22.04

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update && apt-get install -y --no-install-recommends software-properties-common \
    && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev \
       g++ cmake make patch git libopenmpi-dev openmpi-bin \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /workspace/tfcnn
COPY . .
# No GPU is visible during `docker build`, so ask for the GPU stack explicitly.
RUN make install HAS_GPU=1 DALI=1 ONNX=1 && rm -rf /root/.cache/pip
ENV PATH=/workspace/tfcnn/.venv/bin:$PATH \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TF_CPP_MIN_LOG_LEVEL=1
CMD ["python", "-m", "tfcnn.models"]
