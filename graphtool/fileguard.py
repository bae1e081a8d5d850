"""Open files the way a hardened loader does: look before reading, and never trust a link.

A model file comes from a stranger. ``open(path).read()`` on a FIFO blocks forever, and on a
symlink to ``/dev/zero`` reads until the kernel kills the process. So every file graphtool reads
on a model's behalf is ``stat``-ed first (regular files only, size known and bounded before the
first byte), opened non-blocking, and ``fstat``-ed again to be sure it is still the file that was
checked. External data files also need ``st_nlink == 1`` and are opened with ``O_NOFOLLOW``: a
hard link is how a model's folder can hold a name for a file that lives anywhere else on the same
disk (``~/.ssh/id_rsa``), and no path check can see that. ``--allow-links`` (``ALLOW_LINKS``)
accepts them for users whose tooling deduplicates weights with hard links.

This module sits below ``ir/`` (it imports only ``errors``) so the lazy tensors can use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO, Iterator

from graphtool.errors import BadModel, UnsafePath

ALLOW_LINKS = False  # process-wide policy, set by the CLI's --allow-links or ``allow_links()``

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def kind(mode: int) -> str:
    """'a regular file', 'a named pipe (FIFO)', 'a character device', ... for an ``st_mode``."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


@contextlib.contextmanager
def allow_links(allow: bool = True) -> Iterator[None]:
    """Accept hard-linked external data inside the block (tests, API users)."""
    global ALLOW_LINKS
    saved, ALLOW_LINKS = ALLOW_LINKS, allow
    try:
        yield
    finally:
        ALLOW_LINKS = saved


def _describe(path: str) -> str:
    """``path``, plus where it leads when it is a symlink (the user sees what was refused)."""
    try:
        if os.path.islink(path):
            return f"{path} (a symlink to {os.readlink(path)})"
    except OSError:
        pass
    return path


def read_regular(path: str, limit: int, what: str = "model") -> bytes:
    """All bytes of the regular file ``path`` (symlinks followed), refusing anything else.

    The size is known before the first read and checked against ``limit``; exactly that many
    bytes are read, so a file that grows while we read cannot make us read forever.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise BadModel(f"{path}: no such file") from None
    except OSError as err:
        raise BadModel(f"{path}: cannot read: {err.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise BadModel(f"{_describe(path)}: is a folder, not a {what} file")
    if not stat.S_ISREG(st.st_mode):
        raise BadModel(f"{_describe(path)}: is {kind(st.st_mode)}, not a {what} file")
    if st.st_size > limit:
        raise BadModel(f"{path}: {st.st_size} bytes is larger than the {limit}-byte limit for a {what} file "
                       "(ONNX models past 2 GB keep weights as external data)")
    try:  # O_NONBLOCK: if the file was swapped for a FIFO since the stat, open must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise BadModel(f"{path}: cannot read: {err.strerror}") from None
    with os.fdopen(fd, "rb", buffering=0) as f:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise BadModel(f"{path}: the file changed while it was opened ({kind(fst.st_mode)} now)")
        size = min(fst.st_size, limit)
        buf = bytearray(size)
        view, done = memoryview(buf), 0
        while done < size:
            n = f.readinto(view[done:])
            if not n:
                break  # shrank while reading: parse what is there (it will say truncated)
            done += n
        del view
        return bytes(buf[:done]) if done < size else bytes(buf)


def check_data_file(path: str, location: str, tensor: str) -> int:
    """Size of the external data file ``path`` (already resolved inside the model's folder).

    Refuses, naming the reason, anything but a regular file with one link (unless links are
    allowed). Nothing is opened here; ``open_data`` checks again on the descriptor it reads.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise BadModel(f"tensor '{tensor}': external data file '{location}' does not exist") from None
    except OSError as err:
        raise BadModel(f"tensor '{tensor}': external data file '{location}': {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BadModel(f"tensor '{tensor}': external data file '{location}' is {kind(st.st_mode)}, not a regular file")
    _check_links(st, location, tensor)
    return st.st_size


def _check_links(st: os.stat_result, location: str, tensor: str) -> None:
    if st.st_nlink != 1 and not ALLOW_LINKS:
        raise UnsafePath(f"tensor '{tensor}': external data file '{location}' has {st.st_nlink} hard links (a link "
                         "can point at any file on the disk, outside the model's folder); --allow-links reads it anyway")


def open_data(path: str, tensor: str = "") -> BinaryIO:
    """Open an external data file for reading: ``O_NOFOLLOW`` (a symlink swapped in after the
    load-time check is refused by the kernel), regular file, one link, checked on the descriptor."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        raise UnsafePath(f"tensor '{tensor}': cannot open external data '{path}': {err.strerror}") from None
    st = os.fstat(fd)
    try:
        if not stat.S_ISREG(st.st_mode):
            raise BadModel(f"tensor '{tensor}': external data '{path}' is {kind(st.st_mode)}, not a regular file")
        _check_links(st, os.path.basename(path), tensor)
    except BaseException:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
