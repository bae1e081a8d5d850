"""Fusions as declarative rules: a pattern written as ops, a check, a replacement.

``pattern``  the language (``op.Add(op.MatMul(x, w), b)``, ``opt``, ``either``, ``Var``/``Const``)
``match``    the anchored matcher, which also says why a near-match was refused
``rule``     ``Rule`` and ``RulePass``: the engine that commits a match and explains the rest
"""

from graphtool.rewrite import explain
from graphtool.rewrite.match import Match, Matcher
from graphtool.rewrite.naming import Namer
from graphtool.rewrite.pattern import Const, OneOf, Scalar, Var, either, ms, op, opt
from graphtool.rewrite.rule import Rewrite, Rule, RulePass, apply

__all__ = ["Const", "Match", "Matcher", "Namer", "explain", "OneOf", "Rewrite", "Rule", "RulePass", "Scalar", "Var", "apply",
           "either", "ms", "op", "opt"]
