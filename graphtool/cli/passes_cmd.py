"""graphtool passes"""

from __future__ import annotations

import click

from graphtool.cli import cli
from graphtool.cli.output import emit
from graphtool.inspect import format_table
from graphtool.pass_manager import PLUGINS, load_builtin_and_plugins


@cli.command("passes")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def passes_command(as_json: bool) -> None:
    """List the registered passes: built-in, and from installed plugins (marked with their
    distribution and version; a plugin runs only when named: optimize --passes/--plugins)."""
    registry = load_builtin_and_plugins()
    rows = [
        {"name": c.name, "level": c.level, "target": c.target, "analysis": c.analysis,
         "module": c.__module__, "description": c.describe(),
         "source": f"plugin {PLUGINS[c.name].label()}" if c.name in PLUGINS else "built-in"}
        for c in sorted(registry.values(), key=lambda c: (c.name in PLUGINS, c.level, c.priority, c.name))
    ]
    table = format_table([[r["name"], r["level"], r["target"], "check" if r["analysis"] else "rewrite",
                           r["source"], r["description"]] for r in rows],
                         ["pass", "level", "target", "kind", "from", "description"])
    emit(rows, as_json, table)
