"""The ``components`` package sits at the repository top (it is the Pulumi program's, not
the runtime's), so make it importable for these tests."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
