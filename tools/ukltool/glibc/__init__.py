"""The C library: glibc built with our port, and glibc's own tests."""
