"""Shielded IPPO: a shield from a learned world model and safety critic (docs/design.md).

Parts, one file each: `bounds` (risk bound and delta_t schedule of the calibration), `replay`
(real transitions with a validation split), `world_model` (`WM_VERSIONS`), `critic` (the
safety critic), `opponent_model` (`OM_VERSIONS`, the decentralised shield's), `decentral`,
`search`, `budget` (the filter, `BudgetShield`), `calibration` (calibration map, allowance and
certificate), `assemble` (building the parts, `SHIELD_VERSIONS`; `load_shield` for
evaluation), `trainer` (`ShieldedIPPO`), `diagnostics` (the shield against the true env). The
config is `src.config.shield.ShieldConfig`. Nothing is imported here, so each part stands
alone.
"""
