"""Start JupyterLab on the course with the course kernel, and print the one URL to open."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from course import UserError, settings

KERNEL_NAME = "ddl-hpc"
FIRST_NOTEBOOK = "notebooks/00_environment_and_cluster.ipynb"


def free_port(ip: str, first: int, tries: int = 50) -> int:
    """The first port from `first` on which `ip` can listen."""
    for port in range(first, first + tries):
        with socket.socket() as probe:
            try:
                probe.bind((ip, port))
                return port
            except OSError:
                continue
    raise UserError(f"no free port in {first}-{first + tries - 1} on {ip}; pass --port")


def command(root: Path, ip: str, port: int, token: str) -> list[str]:
    """The `jupyter lab` command line: no browser, a known token, the course kernel by default."""
    cmd = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        f"--MappingKernelManager.default_kernel_name={KERNEL_NAME}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def serve(ip: str = "127.0.0.1", port: int = 8888, root: str | os.PathLike = ".") -> int:
    """Run JupyterLab in the foreground until Ctrl-C; returns its exit status."""
    root_path = Path(root).resolve()
    if not root_path.is_dir():
        raise UserError(f"{root_path} is not a folder")
    port = free_port(ip, port)
    token = settings.get("COURSE_LAB_TOKEN") or secrets.token_hex(16)
    start = FIRST_NOTEBOOK if (root_path / FIRST_NOTEBOOK).exists() else ""
    host = "127.0.0.1" if ip in ("0.0.0.0", "") else ip
    print(
        f"Starting JupyterLab on {root_path} with the '{KERNEL_NAME}' kernel; notebooks start a local engine cluster "
        f"with course.cluster.start() (no configuration needed)."
    )
    print(f"Open this URL: http://{host}:{port}/lab/tree/{start}?token={token}", flush=True)
    print("Stop with Ctrl-C.", flush=True)
    server = subprocess.Popen(command(root_path, ip, port, token), cwd=root_path)
    while True:
        try:
            return server.wait()
        except KeyboardInterrupt:  # Ctrl-C reached JupyterLab too: wait while it shuts its kernels down (or asks)
            continue
