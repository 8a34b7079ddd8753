"""Mergesmith: merge open models and extract LoRA adapters on your own workstation.

Importing this package must stay cheap: it never imports torch or Qt.
"""

import os

__version__ = "0.1.0"

# OpenMP threads that wait at a barrier spin by default; on a machine other programs share, a descheduled thread
# makes the others spin through their time slices (a busy core made a linear merge's CPU time seven times larger).
# OpenMP reads this once, when torch loads, so it is set here, before anything can import torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
