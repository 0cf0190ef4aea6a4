"""Host tooling for UKL, Unikernel Linux: sources, kernel builds, images, QEMU runs."""
