"""Host tooling for UKL, Unikernel Linux: sources, kernel builds, images, QEMU runs."""

__version__ = "0.1.0"
