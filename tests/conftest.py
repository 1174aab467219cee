import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# tests import their helpers (oracle.py), the example model zoo and the conformance script by module name.
for path in (ROOT / "tests", ROOT / "examples", ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
