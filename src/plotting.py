"""matplotlib for files, not screens: `plt`, pyplot on the Agg backend.

Workflow jobs write figures and posters without a display. The backend is chosen once, here,
before pyplot is first imported; every module that draws imports `plt` from here: the
figures (`src.analysis.style`, `src.analysis.figures`) and the videos' posters
(`src.evaluation.render`).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # figures are written to files by workflow jobs without a display

import matplotlib.pyplot as plt

__all__ = ["plt"]
