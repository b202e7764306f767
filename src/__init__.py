"""The pipeline's code. Importing it pins torch's CPU kernels to one code path on every x86-64
machine, before torch runs anything (`src.numerics`)."""

from src.numerics import pin_kernels

pin_kernels()
