"""The core utilities, a published API (docs/architecture.md, "Core utilities"): persistence
(``io``), shared logging (``logging``), episode-cap and video wrappers (``wrappers``) and
Weights & Biases logging (``wandb``).

Submodules are imported explicitly (``from src.core.io import save_to_file``) so that a script
needing only one of them does not pay for importing torch or wandb.
"""
