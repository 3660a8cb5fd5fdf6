"""The referee's test helpers (tests/referee) are importable here too."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "referee"))
