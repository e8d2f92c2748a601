"""Install tests run inside podman containers made from the image tests' offline base,
so the real machine's shared install is never touched."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "image"))
