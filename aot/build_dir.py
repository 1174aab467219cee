"""The output directory of a build is the user's: aot writes, replaces and removes only the files it owns.

aot owns the files a previous build listed in the directory's metadata.json (and that metadata.json), as
long as each still holds what that build wrote (its sha256 there). Anything else in the directory (a
firmware's sources, a subfolder, notes) is left as it is; a build that would write over such a file, or
over one of aot's files the user has since changed, stops before writing anything and says which.

Each file is written aside, under a hidden name in the same directory, then renamed over its own name:
a reader sees the old file or the new one, whole, never a part. metadata.json is renamed last. A build that
fails or is interrupted before the renames leaves the previous build as it was (its temporary files
removed); Ctrl-C during the renames, a few milliseconds, waits for them to finish. Files of the previous
build that this one does not write (another --emit's stages, another --name's) are then removed. Builds into
one directory at once take turns (a lock on the directory), so it always holds one whole build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import tempfile
import threading
from pathlib import Path

from aot.codegen.elf import Blob, chunks
from aot.errors import OptionError

METADATA = "metadata.json"
_TEMPORARY = ".aot-tmp"


def check(dest: Path, names: list[str]) -> None:
    """Raise the OptionError write_build would for writing files `names` into `dest` as it is now."""
    dest = Path(dest)
    try:
        if dest.exists() and not dest.is_dir():
            raise OptionError(f"output directory {dest} exists and is not a directory")
        if dest.is_dir():
            owned = _owned(dest)
            for name in names:
                _check_writable(dest, name, owned)
    except OSError as err:
        raise _system_refused(dest, err) from None


def write_build(dest: Path, files: dict[str, Blob]) -> None:
    """Write `files` (name -> bytes) into `dest` as the module's docstring says. Files of the previous
    build that this one does not write are removed unless the user changed them (then no longer aot's)."""
    dest = Path(dest)
    try:
        if dest.exists() and not dest.is_dir():
            raise OptionError(f"output directory {dest} exists and is not a directory")
        dest.mkdir(parents=True, exist_ok=True)
        with _locked(dest):
            owned = _owned(dest)
            for name in files:
                _check_writable(dest, name, owned)
            stale = [n for n in owned if n not in files and n != METADATA and _unchanged(dest / n, owned[n])]
            temporary = _write_aside(dest, files)
            try:
                with _uninterrupted():
                    for name in sorted(files, key=lambda n: n == METADATA):     # metadata.json last
                        os.replace(temporary[name], dest / name)
                    for name in stale:
                        (dest / name).unlink(missing_ok=True)
            finally:        # what a failed rename left aside (a renamed one is gone from there)
                for tmp in temporary.values():
                    tmp.unlink(missing_ok=True)
    except OSError as err:
        raise _system_refused(dest, err) from None


def amend(dest: Path, name: str, data: bytes) -> None:
    """Replace file `name` of the build in `dest` (aot's own: a later figure appended to report.txt, say) and
    its sha256 in metadata.json, so that the next build still knows it as aot's."""
    dest = Path(dest)
    try:
        with _locked(dest):
            owned = _owned(dest)
            if name not in owned or owned[name] is None:
                raise OptionError(f"{dest / name}: not a file of the build in {dest}")
            _check_writable(dest, name, owned)
            meta = json.loads((dest / METADATA).read_text())
            meta["files"][name] = hashlib.sha256(data).hexdigest()
            temporary = _write_aside(dest, {name: data, METADATA: (json.dumps(meta, indent=2) + "\n").encode()})
            try:
                with _uninterrupted():
                    os.replace(temporary[name], dest / name)
                    os.replace(temporary[METADATA], dest / METADATA)
            finally:
                for tmp in temporary.values():
                    tmp.unlink(missing_ok=True)
    except OSError as err:
        raise _system_refused(dest, err) from None


def _system_refused(dest: Path, err: OSError) -> OptionError:
    name = os.path.basename(err.filename) if isinstance(err.filename, str) else ""
    shown = f" ({name[:60]}{'...' if len(name) > 60 else ''})" if name else ""
    return OptionError(f"cannot write the build into {dest}: {err.strerror or err}{shown}")


def _owned(dest: Path) -> dict[str, str | None]:
    """The files a previous aot build in `dest` wrote, each with its sha256 (None: metadata.json itself).
    A metadata.json that is not aot's is the user's file, and owns nothing."""
    path = dest / METADATA
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text())
        listed = meta["files"] if str(meta.get("generated_by", "")).startswith("aot ") else None
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
        listed = None
    if not isinstance(listed, dict):
        raise OptionError(f"{path} exists and was not written by aot: move it, or build into another "
                          f"directory (-o)")
    return {**{str(n): str(h) for n, h in listed.items() if _plain_name(str(n))}, METADATA: None}


def _plain_name(name: str) -> bool:
    """A file name of the directory itself (a metadata.json naming ../x or a/b owns nothing there)."""
    return bool(name) and name not in (".", "..") and os.sep not in name and "/" not in name


def _check_writable(dest: Path, name: str, owned: dict[str, str | None]) -> None:
    path = dest / name
    if not (path.exists() or path.is_symlink()):
        return
    if path.is_dir() or path.is_symlink():
        raise OptionError(f"{path} is a {'folder' if path.is_dir() else 'symbolic link'} where the build writes "
                          f"its file {name}: move it, or build into another directory (-o)")
    if name not in owned:
        raise OptionError(f"{path} exists and was not written by aot (no earlier build in {dest} lists it): move "
                          f"it, or build into another directory (-o)")
    if owned[name] is not None and not _unchanged(path, owned[name]):
        raise OptionError(f"{path} was changed since aot wrote it (its sha256 is not the one {dest / METADATA} "
                          f"records): move it aside to keep it, or delete it, then build again")


def _unchanged(path: Path, sha256: str | None) -> bool:
    if not path.is_file() or path.is_symlink():
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == sha256


def _write_aside(dest: Path, files: dict[str, Blob]) -> dict[str, Path]:
    """Each file written whole under a hidden name beside its own; on any failure none is left."""
    written: dict[str, Path] = {}
    try:
        for name, data in files.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=_TEMPORARY, dir=dest)
            written[name] = Path(tmp)
            with os.fdopen(fd, "wb") as f:
                f.writelines(chunks(data))
            os.chmod(tmp, 0o644)
    except BaseException:
        for tmp in written.values():
            tmp.unlink(missing_ok=True)
        raise
    return written


@contextlib.contextmanager
def _locked(dest: Path):
    """Hold an exclusive lock on the directory itself (no lock file is left in it)."""
    try:
        import fcntl
    except ImportError:          # not a POSIX system: builds into one directory at once are not ordered
        yield
        return
    fd = os.open(dest, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _uninterrupted():
    """Ctrl-C (SIGINT) waits until the block is done, then interrupts as it would have."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    previous = signal.signal(signal.SIGINT, lambda *args: caught.append(args))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and callable(previous):
            previous(*caught[0])
