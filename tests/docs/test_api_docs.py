"""The API reference (docs/make_api.py, ``make docs``): it builds without a warning, and every
public module, class, function and method it documents has a docstring and typed parameters and
return (``self``/``cls`` and ``*args``/``**kwargs`` aside)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "docs"))
pdoc = pytest.importorskip("pdoc")

from make_api import MODULES  # noqa: E402


def _public(module_name: str):
    """The module, and its public members, recursively into classes (their own members)."""
    import graphtool

    for name in graphtool._TYPES:
        getattr(graphtool, name)
    mod = pdoc.doc.Module.from_name(module_name)
    yield mod
    exported = hasattr(mod.obj, "__all__")  # a package's front: its re-exports are its API
    stack = [m for m in mod.own_members if exported or m.taken_from[0] == module_name]
    while stack:
        member = stack.pop()
        last = member.qualname.split(".")[-1]
        if last.startswith("_") and last != "__init__":
            continue
        yield member
        if isinstance(member, pdoc.doc.Class):
            stack.extend(m for m in member.own_members)


def _problems(doc) -> list[str]:
    out = []
    if isinstance(doc, (pdoc.doc.Module, pdoc.doc.Class)):
        if not doc.docstring.strip():
            out.append(f"{doc.fullname}: no docstring")
    elif isinstance(doc, pdoc.doc.Variable):
        owner = getattr(doc, "cls", None)
        if owner is None and "." in doc.qualname:
            owner = getattr(__import__(doc.modulename, fromlist=["x"]), doc.qualname.split(".")[0], None)
        if isinstance(getattr(owner, doc.qualname.split(".")[-1], None), property) if owner is not None else False:
            if not doc.docstring.strip():
                out.append(f"{doc.fullname}: property without docstring")
    elif isinstance(doc, pdoc.doc.Function):
        name = doc.qualname.split(".")[-1]
        if name == "__init__":
            return out  # the class docstring documents construction
        if not doc.docstring.strip():
            out.append(f"{doc.fullname}: no docstring")
        try:
            sig = inspect.signature(doc.obj)
        except (TypeError, ValueError):
            return out
        for p in sig.parameters.values():
            if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if p.annotation is inspect.Parameter.empty:
                out.append(f"{doc.fullname}: parameter '{p.name}' has no type")
        if sig.return_annotation is inspect.Signature.empty and not isinstance(doc.obj, property):
            out.append(f"{doc.fullname}: no return type")
    return out


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_has_a_docstring_and_types(module):
    problems = [p for doc in _public(module) for p in _problems(doc)]
    assert problems == []


def test_make_docs_builds_without_warnings(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "make_api.py"), str(tmp_path / "api")],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Warning" not in proc.stderr, proc.stderr
    assert (tmp_path / "api" / "graphtool.html").exists()
    page = (tmp_path / "api" / "graphtool" / "ir" / "surgery.html").read_text()
    assert "insert_after" in page and "Put a new" in page
