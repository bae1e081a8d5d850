"""Errors a user can act on.

Every failure that comes from the input (a broken file, an unsafe path, a model that does not run)
is a ``GraphtoolError``; the CLI prints its message as one line on stderr and exits with
``exit_code``. Anything else that escapes is a bug in graphtool, reported the same way but marked
as internal.
"""

from __future__ import annotations


class GraphtoolError(Exception):
    """Base of all user-facing errors; ``str(err)`` is the one line the user sees."""

    exit_code = 2


class BadModel(GraphtoolError):
    """The file is not a usable ONNX model: unparsable, truncated, cyclic, dangling names..."""


class UnsafePath(GraphtoolError):
    """A model asked for a file outside its own folder (absolute path, '..', symlink out)."""


class ModelDoesNotRun(GraphtoolError):
    """The original model fails in onnxruntime on every input set tried: its own failure, not a
    rewrite's; the message quotes onnxruntime and names the flags that supply real inputs."""


class VerificationFailed(GraphtoolError):
    """A rewritten model's outputs differ from the original's beyond tolerance."""

    exit_code = 1


class UsageError(GraphtoolError):
    """Flags that cannot work together, or a name that does not exist (pass, input, node)."""
