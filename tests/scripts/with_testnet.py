"""Runs a tfcnn entry point unchanged, with the tests' small models (tests/testnet.py) registered besides
the zoo:

    python tests/scripts/with_testnet.py examples/train.py [its flags]
    python tests/scripts/with_testnet.py bench/grouped_conv.py [its flags]
    python tests/scripts/with_testnet.py -m tfcnn.evaluate [its flags]
"""
import os
import runpy
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import testnet

    testnet.register()
    if sys.argv[1] == "-m":
        sys.argv = sys.argv[2:]
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    else:
        sys.argv = sys.argv[1:]
        # Python puts a script's directory first on sys.path: bench/'s scripts import their common.py from it.
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
        runpy.run_path(sys.argv[0], run_name="__main__")
