"""Every JupyterLab server the hub starts from the shared environment (scripts/setup-hub.sh copies this file to its
etc/jupyter/): its terminals and its kernels. Terminals: a server a spawner starts opens login shells, whose
/etc/profile resets PATH (Debian's drops the environment's bin, and `course`, `nbgrader`, `horovodrun` with it). The
login shell still runs, so a site's module system keeps working; the environment's bin then goes first, and the
user's own shell takes over."""

import sys

c = get_config()  # noqa: F821  (provided by Jupyter Server)
SHELL = f'export PATH="{sys.prefix}/bin:$PATH"; exec "${{SHELL:-/bin/bash}}" -i'
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l", "-c", SHELL]}

# One kernel for the course: "Python (DDL on HPC)" is the default and the only one listed. ipykernel's own "Python 3
# (ipykernel)" runs the same environment under another name, a choice learners would only have to get right.
c.MultiKernelManager.default_kernel_name = "ddl-hpc"
c.KernelSpecManager.allowed_kernelspecs = {"ddl-hpc"}
