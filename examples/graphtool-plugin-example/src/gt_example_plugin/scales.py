"""``merge-scalar-muls``: ``Mul(Mul(x, a), b)`` -> ``Mul(x, a*b)`` for constant scalars a, b.

A rule is a pattern (ops, written as they nest), a check for what the pattern cannot say (it
returns None to accept, or the reason it refuses: ``--explain merge-scalar-muls`` prints it), and
a replacement that adds the new nodes and returns the value that takes the root's place.

1. ``Mul(Mul(x, a), b)`` with scalars a, b (either operand order): one Mul by a*b, computed in
   their dtype. Not bit-exact in floating point (x*a*b and x*(a*b) round differently, by an ulp),
   well inside the tolerance ``optimize`` verifies with.
2. Refused: a*b overflows or underflows the dtype where a and b did not (the reason says so).
"""

from __future__ import annotations

import numpy as np

from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Scalar, Var, op


def _representable(m: Match) -> str | None:
    a, b = m.const("a"), m.const("b")
    with np.errstate(all="ignore"):
        product = (a * b).astype(a.dtype)
    if not np.isfinite(product).all() or (product == 0).any() and (a != 0).all() and (b != 0).all():
        return f"{a.item():g} * {b.item():g} is not representable in {a.dtype}"
    return None


def _merged(m: Match, rw: Rewrite) -> str:
    scale = (m.const("a") * m.const("b")).astype(m.const("a").dtype)
    return rw.add("Mul", [m["x"], rw.initializer(np.asarray(scale), "scale")]).outputs[0]


# Add and Mul match either operand order; the inner Mul must be read by the outer one only
MERGE = Rule("merge-scalar-muls", op.Mul(op.Mul(Var("x"), Scalar("a")), Scalar("b")),
             replace=_merged, check=_representable, emits="Mul")


class MergeScalarMuls(RulePass):
    """Merge two multiplications by constant scalars into one."""

    level = 1
    rules = (MERGE,)
