"""tfcnn: TensorFlow 2 CNN training toolkit (model zoo, ImageNet TFRecords, Horovod mixed precision).

TensorFlow and Horovod are not listed in install_requires on purpose: `make install` installs
`tensorflow-cpu` or `tensorflow[and-cuda]` of its lane (2.21 or 2.15; pip cannot tell which one a
machine needs) with the lane's packages (tf_keras and TensorBoard on 2.21; tensorflow-addons on 2.15,
only to test tfcnn's LAMB against) and numpy as that TensorFlow wants, then builds Horovod from source
against it with tfcnn's patches. Listing any here would make pip replace or rebuild them.
"""
from setuptools import find_packages, setup

setup(
    name="tfcnn",
    version="0.1.0",
    description="TensorFlow 2 Keras CNN training toolkit with Horovod data parallelism",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9,<3.14",
    packages=find_packages(include=["tfcnn", "tfcnn.*", "imagenet_prep"]),
    package_data={"imagenet_prep": ["*.sh"]},
    install_requires=[
        "numpy>=1.23.5",
        "absl-py>=2,<3",
        "Pillow>=10",
        "matplotlib>=3.7,<3.10",
        "safetensors>=0.4",
    ],
    extras_require={
        # pytest 7.3 brought tmp_path_retention_policy (tests/pytest.ini: a passing test's files are deleted).
        "dev": ["pytest>=7.3", "pytest-timeout>=2", "pytest-xdist>=3.5"],
        # ONNX export (python -m tfcnn.export --format onnx); `make install ONNX=1` pins them per lane (TF 2.15
        # needs protobuf < 5 and numpy < 2). DALI is not an extra: its TensorFlow plugin must be installed with
        # --no-build-isolation against the installed TensorFlow (`make install DALI=1`).
        "onnx": ["tf2onnx>=1.17", "onnx>=1.16", "onnxruntime>=1.17"],
        # The documentation site (make docs): MkDocs with the Material theme, the API pages from docstrings.
        "docs": ["mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10", "mkdocstrings[python]>=0.26"],
    },
    # The command-line tools, also `python -m tfcnn.<tool>`: they run from an installed tfcnn, no checkout needed.
    entry_points={"console_scripts": [f"tfcnn-{tool}=tfcnn.{tool}:{entry}" for tool, entry in (
        ("train", "cli"), ("evaluate", "main"), ("export", "main"), ("convert", "main"), ("benchmark", "main"))]},
    license="Apache-2.0",
)
