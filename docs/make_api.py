"""Build the API reference from docstrings with pdoc: ``make docs`` (``python docs/make_api.py OUT``).

Documents the public modules: the front door (``graphtool``), the IR a pass or a script edits
(``Graph``, ``Node``, ``Model``), passes and their manager, rules, errors. Any warning pdoc raises
(a name that does not resolve, a broken link) fails the build: it runs with warnings as errors.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

MODULES = ["graphtool", "graphtool.ir.graph", "graphtool.ir.edit", "graphtool.ir.surgery", "graphtool.ir.model", "graphtool.ir.records",
           "graphtool.pass_manager", "graphtool.rewrite", "graphtool.errors"]


def main(out: str) -> None:
    warnings.simplefilter("error")
    import pdoc
    import pdoc.render

    import graphtool

    for name in graphtool._TYPES:  # the lazily imported public types become module attributes
        getattr(graphtool, name)
    pdoc.render.configure(docformat="markdown", footer_text="graphtool API reference (built from docstrings)")
    pdoc.pdoc(*MODULES, output_directory=Path(out))
    print(f"wrote {out}/index.html ({len(MODULES)} modules)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/api")
