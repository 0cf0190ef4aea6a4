"""An application compiled and linked into a kernel, and the image that boots it."""
