"""A fresh virtual environment for tests that install packages the way a user would.

Creating a venv and installing graphtool's dependencies from the registry would take minutes and
the network; instead the new venv (no pip of its own, no packages) reads the site-packages of the
interpreter running the tests through one ``.pth`` file, and what the test installs lands in the
new venv's own site-packages, seen by it alone. ``pip install --no-deps --no-build-isolation``
then installs a project in about a second, built with the setuptools/wheel the test venv has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from dataclasses import dataclass


@dataclass
class FreshVenv:
    root: str

    @property
    def python(self) -> str:
        return os.path.join(self.root, "bin", "python")

    @property
    def bin(self) -> str:
        return os.path.join(self.root, "bin")

    def run(self, *args: str, cwd: str | None = None, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
        """``args`` with this venv's bin/ first on PATH (``graphtool`` is then its console script)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GRAPHTOOL_PLUGINS_WARNED")}
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        env["VIRTUAL_ENV"] = self.root
        proc = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{args} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def gt(self, *args: str, check: bool = False, cwd: str | None = None) -> subprocess.CompletedProcess:
        """``python -m graphtool ARGS`` in this venv (``cwd``: where it runs; its folder is on sys.path)."""
        return self.run(self.python, "-m", "graphtool", *args, check=check, cwd=cwd)

    def pip_install(self, *targets: str) -> None:
        self.run(self.python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                 "--no-index", *targets, check=True)

    def pip_uninstall(self, *names: str) -> None:
        self.run(self.python, "-m", "pip", "uninstall", "-q", "-y", *names, check=True)


def make_venv(root: str) -> FreshVenv:
    """A new venv at ``root`` that also sees this interpreter's site-packages (dependencies, pip,
    setuptools, wheel) after its own: what it installs comes first."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    env = FreshVenv(root)
    site_dir = subprocess.run([env.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    dirs = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    with open(os.path.join(site_dir, "_shared_site.pth"), "w") as f:
        f.write("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
    return env
