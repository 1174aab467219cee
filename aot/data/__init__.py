"""Files shipped with the package: target configs (targets/), board configs (boards/) and the C runtime
that the run and bench harnesses are built from (runtime_c/). In a checkout they lie at the top of the
repository; a wheel carries them inside the package as aot/data/targets/ and so on (pyproject.toml
maps them), read through importlib.resources so that a zipped install works too.

Users add targets and boards from directories of their own, searched before the shipped files like
PATH: the directories a caller names (`--target-dir`, `--board-dir`), then the entries of an environment
variable (AOT_TARGET_PATH, AOT_BOARD_PATH; os.pathsep-separated). A file `<name>.toml` found earlier
shadows one of the same name later, so a user file can replace a shipped one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path
from typing import TYPE_CHECKING

from aot.errors import OptionError

if TYPE_CHECKING:
    from importlib.abc import Traversable

SHIPPED = "aot"     # the origin of the files that come with the package


_CHECKOUT = Path(__file__).resolve().parents[2]     # in a checkout (editable install): the repository


def shipped(*parts: str) -> Traversable:
    """A file or directory shipped with aot, e.g. shipped("targets", "aarch64.toml"): inside the installed
    package, or at the top of the checkout."""
    res: Traversable = files(__name__) / parts[0]
    if not res.is_dir() and (_CHECKOUT / parts[0]).is_dir():
        res = _CHECKOUT / parts[0]
    for part in parts[1:]:
        res = res / part
    return res


@dataclass(frozen=True)
class SearchDir:
    path: Path
    given_by: str          # the option or environment variable that named it

    def describe(self) -> str:
        missing = "" if self.path.is_dir() else ", no such directory"
        return f"{self.path} ({self.given_by}{missing})"


def search_dirs(dirs: Sequence[str | os.PathLike], env_var: str, option: str) -> list[SearchDir]:
    """The user directories, in search order: `dirs`, then the entries of $env_var. A directory named
    explicitly must exist; entries of the variable that do not are skipped, as PATH's are."""
    found = []
    for d in dirs:
        path = Path(d).expanduser().absolute()
        if not path.is_dir():
            raise OptionError(f"{option} {d}: no such directory")
        found.append(SearchDir(path, option))
    for entry in os.environ.get(env_var, "").split(os.pathsep):
        if entry:
            found.append(SearchDir(Path(entry).expanduser().absolute(), f"${env_var}"))
    return found


@dataclass(frozen=True)
class ConfigFile:
    name: str              # the file's stem
    file: Traversable      # readable with .read_text(); a real file except in a zipped install
    origin: str            # the user directory it came from, or SHIPPED


def config_files(kind: str, user_dirs: Sequence[SearchDir]) -> list[ConfigFile]:
    """Every `<name>.toml` under the user directories and then the shipped `kind` directory; a name
    already found shadows later files of the same name."""
    found: dict[str, ConfigFile] = {}
    for d in user_dirs:
        for path in sorted(d.path.glob("*.toml")) if d.path.is_dir() else ():
            found.setdefault(path.stem, ConfigFile(path.stem, path, str(d.path)))
    for res in sorted(shipped(kind).iterdir(), key=lambda r: r.name):
        if res.name.endswith(".toml"):
            name = res.name.removesuffix(".toml")
            found.setdefault(name, ConfigFile(name, res, SHIPPED))
    return list(found.values())


def describe_search(kind: str, user_dirs: Sequence[SearchDir]) -> str:
    """The searched directories, for error messages."""
    return "; ".join([d.describe() for d in user_dirs] + [f"{shipped(kind)} (shipped with aot)"])


@contextmanager
def runtime_files(*names: str) -> Iterator[list[Path]]:
    """Real paths of files under runtime_c/ (e.g. "baremetal/startup.c") while the context lasts: a C
    compiler needs paths, and from a zipped install the files are first copied out."""
    with ExitStack() as stack:
        yield [stack.enter_context(as_file(shipped("runtime_c", *name.split("/")))) for name in names]
