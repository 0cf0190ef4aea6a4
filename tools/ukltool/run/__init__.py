"""Booting an image: QEMU, networks, remote system calls, console logs, OCI packages."""
