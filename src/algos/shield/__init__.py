"""Shielded IPPO: a shield from a learned world model and opponent model (docs/design.md).

Parts, one file each: `bounds` (risk bound, delta_t schedule, K_t), `replay` (real
transitions with a validation split), `world_model` (`WM_VERSIONS`), `opponent_model`
(`OM_VERSIONS`), `shield` (the batched filter, `SHIELD_VERSIONS`), `assemble` (building the
parts; `load_shield` for evaluation), `trainer` (`ShieldedIPPO`), `diagnostics` (the shield
against the true env). The config is `src.config.shield.ShieldConfig`. Nothing is imported
here, so each part stands alone.
"""
