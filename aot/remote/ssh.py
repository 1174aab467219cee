"""An SSH session to a board (paramiko): verified host keys, key authentication only, timeouts, and a
private remote directory that is removed whatever happens. Every path sent to the remote shell is quoted."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import paramiko

from aot.errors import RunError
from aot.remote.board import Board


class Session:
    def __init__(self, board: Board, accept_new_host_key: bool = False, timeout: float = 15.0):
        self.board = board
        self.client = paramiko.SSHClient()
        known = board.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        self.known_hosts = known
        if os.path.exists(known):
            self.client.load_host_keys(known)
        self.client.set_missing_host_key_policy(_RecordNewKey(known) if accept_new_host_key
                                                else paramiko.RejectPolicy())
        where = f"board {board.name} ({board.user}@{board.host}:{board.port})"
        try:
            self.client.connect(board.host, port=board.port, username=board.user,
                                key_filename=board.identity_file or None, look_for_keys=not board.identity_file,
                                allow_agent=False, timeout=timeout, banner_timeout=timeout, auth_timeout=timeout)
        except paramiko.BadHostKeyException:
            raise RunError(f"{where}: its host key does not match the one in {known}; refusing to connect") from None
        except paramiko.SSHException as err:
            if "not found in known_hosts" in str(err):
                raise RunError(f"{where}: unknown host key (not in {known}); check it and rerun with "
                               "--accept-new-host-key to record it") from None
            raise RunError(f"{where}: SSH failed: {err}") from None
        except (TimeoutError, OSError) as err:
            raise RunError(f"{where}: cannot connect: {err}") from None
        self.where = where
        self.remote_dir: str | None = None

    def run(self, command: str, timeout: float) -> tuple[int, str, str]:
        """Run a shell command; (exit status, stdout, stderr). A timeout or lost connection is a RunError."""
        try:
            _, out, err = self.client.exec_command(command, timeout=timeout)
            stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
            return out.channel.recv_exit_status(), stdout, stderr
        except TimeoutError:
            raise RunError(f"{self.where}: the program did not finish within {timeout:g} s") from None
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise RunError(f"{self.where}: connection lost: {err}") from None

    def make_remote_dir(self) -> str:
        rc, out, err = self.run(f"mktemp -d {shlex.quote(self.board.work_dir.rstrip('/') + '/aot.XXXXXXXX')}", 30)
        if rc != 0:
            raise RunError(f"{self.where}: cannot create a directory in {self.board.work_dir}: {err.strip()}")
        self.remote_dir = out.strip()
        return self.remote_dir

    def upload(self, files: list[Path]) -> None:
        try:
            with self.client.open_sftp() as sftp:
                for f in files:
                    remote = f"{self.remote_dir}/{f.name}"
                    sftp.put(str(f), remote)
                    if os.access(f, os.X_OK):
                        sftp.chmod(remote, 0o755)
        except (OSError, paramiko.SSHException) as err:
            detail = "the board's disk is full" if "Failure" in str(err) or "No space" in str(err) else str(err)
            raise RunError(f"{self.where}: upload failed: {detail}") from None

    def download(self, names: list[str], local_dir: Path) -> None:
        try:
            with self.client.open_sftp() as sftp:
                for name in names:
                    sftp.get(f"{self.remote_dir}/{name}", str(local_dir / name))
        except (OSError, paramiko.SSHException) as err:
            raise RunError(f"{self.where}: cannot fetch {name}: {err}") from None

    def close(self) -> None:
        """Remove the remote directory (if made) and disconnect; never raises."""
        try:
            if self.remote_dir:
                self.run(f"rm -rf -- {shlex.quote(self.remote_dir)}", 30)
        except Exception:   # the connection may already be gone
            pass
        self.client.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _RecordNewKey(paramiko.MissingHostKeyPolicy):
    """Accept an unknown host key and record it in the board's known_hosts file (--accept-new-host-key)."""

    def __init__(self, path: str):
        self.path = path

    def missing_host_key(self, client, hostname, key) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        client.save_host_keys(self.path)
