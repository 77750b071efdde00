"""The benchmarks are a plain folder at the repository root (not an installed package):
make ``import benchmarks`` work under ``--import-mode=importlib``."""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
