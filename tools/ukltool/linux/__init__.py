"""The kernel: configurations and profiles, the patched tree and its builds, specialization."""
