"""``merge-scalar-muls``: ``Mul(Mul(x, a), b)`` -> ``Mul(x, a*b)`` for constant scalars a, b.

A rule is a pattern (ops, written as they nest), a check for what the pattern cannot say (it
returns None to accept, or the reason it refuses: ``--explain merge-scalar-muls`` prints it), and
a replacement that adds the new nodes and returns the value that takes the root's place.

Refuses when a and b have different dtypes (the product's dtype would be a guess).
"""

from __future__ import annotations

import numpy as np

from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Scalar, Var, op


def _same_dtype(m: Match) -> str | None:
    a, b = m.const("a"), m.const("b")
    if a.dtype != b.dtype:
        return f"the scales are {a.dtype} and {b.dtype}"
    return None


def _merged(m: Match, rw: Rewrite) -> str:
    scale = (m.const("a") * m.const("b")).astype(m.const("a").dtype)
    return rw.add("Mul", [m["x"], rw.initializer(np.asarray(scale), "scale")]).outputs[0]


# Add and Mul match either operand order; the inner Mul must be read by the outer one only
MERGE = Rule("merge-scalar-muls", op.Mul(op.Mul(Var("x"), Scalar("a")), Scalar("b")),
             replace=_merged, check=_same_dtype, emits="Mul")


class MergeScalarMuls(RulePass):
    """Merge two multiplications by constant scalars into one."""

    level = 1
    rules = (MERGE,)
