import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
# tests import their helpers (oracle.py), the example model zoo and the conformance script by module name.
for path in (ROOT / "tests", ROOT / "examples", ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

SSHD = "/usr/sbin/sshd"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """An sshd on 127.0.0.1 with throwaway keys (host, user, stranger) in its directory, for the board tests."""
    if not os.path.exists(SSHD):
        if os.environ.get("CI"):
            pytest.fail("openssh-server is not installed")
        pytest.skip("openssh-server is not installed")
    d = tmp_path_factory.mktemp("sshd")
    for key in ("host", "user", "stranger"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "user.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {d / 'host'}
PidFile {d / 'sshd.pid'}
AuthorizedKeysFile {d / 'authorized_keys'}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
Subsystem sftp internal-sftp
""")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        line = proc.stderr.readline()
        if "Server listening" in line:
            break
        if proc.poll() is not None:
            pytest.fail(f"sshd did not start: {line}")
    host_key = (d / "host.pub").read_text().split()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    yield SimpleNamespace(dir=d, port=port)
    proc.terminate()
    proc.wait(timeout=10)
