"""examples/train.py, unchanged, with the tests' small models (tests/testnet.py) registered besides the zoo.

    python tests/scripts/train_small.py [examples/train.py's flags]
"""
import os
import runpy
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_PY = os.path.join(os.path.dirname(TESTS), "examples", "train.py")

if __name__ == "__main__":
    sys.path.insert(0, TESTS)
    import testnet

    testnet.register()
    sys.argv[0] = TRAIN_PY
    runpy.run_path(TRAIN_PY, run_name="__main__")
