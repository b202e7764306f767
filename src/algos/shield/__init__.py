"""Shielded IPPO: a shield from a learned world model and opponent model (DESIGN.md section 6).

Parts, one file each: `config` (ShieldConfig), `bounds` (risk bound, delta_t schedule, K_t),
`replay` (real transitions with a validation split), `world_model` (WM_VERSIONS),
`opponent_model` (OM_VERSIONS), `shield` (the batched filter, SHIELD_VERSIONS), `assemble`
(building the parts; `load_shield_filter` for evaluation), `trainer` (ShieldedIPPO).
The trainer is not imported here, so the parts stand alone without the training loop.
"""

from __future__ import annotations

from src.algos.shield.assemble import load_shield_filter
from src.algos.shield.config import ShieldConfig
from src.algos.shield.opponent_model import OM_VERSIONS
from src.algos.shield.shield import SHIELD_VERSIONS
from src.algos.shield.world_model import WM_VERSIONS

__all__ = [
    "OM_VERSIONS",
    "SHIELD_VERSIONS",
    "WM_VERSIONS",
    "ShieldConfig",
    "load_shield_filter",
]
