"""How far a forecast computed in a lower precision may lie from the float32 one: the bounds
the GPU graph, bf16 training and the GPU check are held to. Torch-free.

Every bound is in units of each window's scale (the standard deviation the network normalises
by), so that it means the same for a quiet cell and a busy one. Two float32 evaluations that
order their operations differently differ by far less than ``FLOAT32_BOUND`` on this network
(tests/tolerance.py derives the exact rounding bound). A 16-bit format rounds every stored
activation and weight to its own unit roundoff; the worst-case bound over the thousands of
operations on the way (Higham's gamma_n = n u / (1 - n u)) exceeds 1 in float16, so the bounds
below are stated, not derived (docs/decisions/precision-bounds.md): bfloat16's is 12.8 of its
unit roundoffs, and float16's is the same multiple of float16's unit roundoff, 8 times finer
(10 bits of mantissa against 7). The int8 graph for CPUs stores each weight as an integer
from -63 to 63 times one scale per output channel (7 bits: ``model.export``), so a weight is
rounded to half a step, 1/126 of its channel's largest weight; its bound is bfloat16's
multiple of that (the activations, quantised at run time to 255 steps of their own range,
round finer).
"""

from __future__ import annotations

UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8,
                 "int8": 1.0 / 126}

FLOAT32_BOUND = 1e-4
BFLOAT16_BOUND = 5e-2
FLOAT16_BOUND = BFLOAT16_BOUND * UNIT_ROUNDOFF["float16"] / UNIT_ROUNDOFF["bfloat16"]
INT8_BOUND = BFLOAT16_BOUND * UNIT_ROUNDOFF["int8"] / UNIT_ROUNDOFF["bfloat16"]
