"""Records a small real image set for the tests: scikit-learn's `load_digits` (1,797 handwritten digits,
8x8 pixels of 17 grey levels, 10 classes; BSD-3-Clause, from the UCI optical recognition of handwritten digits
data), split 1,437 train / 360 validation at random (seed 0), stratified by class. Not run by `make test`:
scikit-learn is no dependency of tfcnn or its tests. Run it in a separate venv:

    python3 -m venv ~/skref && ~/skref/bin/pip install scikit-learn
    ~/skref/bin/python tests/scripts/record_digits.py

Writes tests/fixtures/digits.npz: x_train, x_val (uint8 [N, 8, 8], the original levels 0-16 as they are) and
y_train, y_val (uint8 [N]). The tests draw them to RGB at the size they train (tests/test_training.py).
"""
import os

import numpy as np
import sklearn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "digits.npz")
VALIDATION = 360  # the split: 1,437 / 360


def main():
    digits = load_digits()
    images, labels = digits.images.astype(np.uint8), digits.target.astype(np.uint8)
    assert images.shape == (1797, 8, 8) and images.max() == 16, images.shape
    x_train, x_val, y_train, y_val = train_test_split(images, labels, test_size=VALIDATION, random_state=0,
                                                      stratify=labels)
    np.savez_compressed(OUT, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val,
                        source=np.array(f"sklearn.datasets.load_digits, scikit-learn {sklearn.__version__}"))
    print(f"wrote {OUT}: {len(x_train)} train, {len(x_val)} validation, {os.path.getsize(OUT):,} bytes")


if __name__ == "__main__":
    main()
