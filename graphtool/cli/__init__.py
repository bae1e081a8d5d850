"""The ``graphtool`` command: a click group whose commands live one per module in this package.

Commands are thin: parse flags, call the API, format the result. Every failure that reaches
``main`` becomes one line on stderr and an exit code (2 for bad input or usage), never a traceback
unless ``--debug`` asks for it.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback

import click

from graphtool.errors import GraphtoolError

# command name -> the module that defines it: imported only when that command runs (or for --help),
# so `graphtool viz` does not pay for onnxruntime, the passes and every other command's imports
COMMANDS = {name: f"graphtool.cli.{name}_cmd" for name in
            ("inspect", "check", "optimize", "compare", "diff", "viz", "convert", "tune", "passes")}


class LazyGroup(click.Group):
    """A click group whose commands register themselves when their module is first imported."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            __import__(COMMANDS[name])
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show the traceback of internal errors.")
@click.option("--allow-links", is_flag=True, help="Read external data files that have several hard links.")
@click.option("--memory-limit", metavar="SIZE", help="Memory onnxruntime may use in its child process (e.g. 16G).")
@click.option("--time-limit", metavar="SECONDS", type=float, help="Seconds one onnxruntime call may take.")
@click.version_option(package_name="graphtool")
@click.pass_context
def cli(ctx: click.Context, debug: bool, allow_links: bool, memory_limit: str | None, time_limit: float | None) -> None:
    """See, optimize and prove ONNX graphs."""
    ctx.ensure_object(dict)["debug"] = debug
    from graphtool import fileguard
    from graphtool.runtime import sandbox

    fileguard.ALLOW_LINKS = allow_links
    sandbox.configure(memory_limit=memory_limit, time_limit=time_limit)
    sandbox.SESSIONS = True  # every onnxruntime session of a command runs in the limited child
    ctx.call_on_close(_end_of_command)  # in-process callers (tests) get the library defaults back
    if ctx.invoked_subcommand in ("optimize", "compare", "convert", "tune"):
        sandbox.prewarm()  # onnxruntime starts in the child while the model is read here


def _end_of_command() -> None:
    from graphtool import fileguard, progress

    progress.stage("finishing")  # the line ends with the process (children still stop after this)
    from graphtool.runtime import sandbox

    if "graphtool.verify.verification" in sys.modules:  # a verification started early and never reached stops
        sys.modules["graphtool.verify.verification"].abandon_references()
    sandbox.cancel_background()  # and so does any work still running in a child: its temp files go
    fileguard.ALLOW_LINKS = False
    sandbox.SESSIONS = False


def one_line(text: str) -> str:
    """``text`` as one printable line: names in a model may hold newlines, ANSI escapes or
    bidi controls, and an error message quoting them must stay the single line we promise."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def main(argv: list[str] | None = None) -> None:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    from graphtool import progress

    progress.start_for_argv(argv if argv is not None else sys.argv[1:])  # (``__main__`` started it already)
    if argv is not None:  # a caller in-process (tests): exits are SystemExit, as click gives them
        _run(argv, debug)
        return
    try:
        _run(argv, debug)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    else:
        code = 0
    # The program ends here. Its last full collection and the interpreter's teardown would walk
    # and free every object a big model left behind, for memory the OS takes back anyway (0.8 s
    # after a 200k-node compare, seconds on a busy machine, with the terminal silent): run the
    # atexit hooks (temp folders, sandbox children, the status line), flush, and leave.
    gc.freeze()
    if os.environ.get("GRAPHTOOL_FAST_EXIT", "1") == "0":
        sys.exit(code)
    import atexit

    from graphtool import progress

    if progress.active():  # return the heap's free memory while the status line still moves: the
        try:               # kernel's unmapping at exit is otherwise a silent second on a big model
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 1
    os._exit(code)


def _stop_progress() -> None:
    from graphtool import progress

    progress.pause()  # the error line prints on a clean line; the status line ends with the process


def _run(argv: list[str] | None, debug: bool) -> None:
    try:
        code = cli.main(args=argv, prog_name="graphtool", standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except GraphtoolError as err:
        _stop_progress()
        click.echo(f"graphtool: error: {one_line(str(err))}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Exit as err:
        _stop_progress()
        sys.exit(err.exit_code)
    except click.ClickException as err:
        _stop_progress()
        click.echo(f"graphtool: error: {one_line(err.format_message())}", err=True)
        sys.exit(2)
    except (click.Abort, KeyboardInterrupt):
        _stop_progress()
        click.echo("graphtool: interrupted", err=True)
        sys.exit(130)
    except RecursionError:
        click.echo("graphtool: error: the model nests too deeply to process", err=True)
        sys.exit(2)
    except MemoryError:
        click.echo("graphtool: error: out of memory", err=True)
        sys.exit(2)
    except Exception as err:  # a bug in graphtool: still one line, traceback on request
        _stop_progress()
        if debug:
            traceback.print_exc()
        message = one_line(str(err).splitlines()[0]) if str(err).strip() else ""
        click.echo(f"graphtool: internal error: {type(err).__name__}: {message} (rerun with --debug)", err=True)
        sys.exit(2)
