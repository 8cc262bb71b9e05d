"""The package from the source tree when it is not installed (pytest run
from a checkout); an installed copy on sys.path comes first."""
import os
import sys

try:
    import cucache  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
