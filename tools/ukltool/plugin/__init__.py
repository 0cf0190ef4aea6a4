"""Our QEMU plugin (tools/qemu-plugin/insnclass.c): building it, reading its report, and the models on it."""
