"""Our QEMU plugin (tools/plugin/insnclass.c): building it, reading its report, and the models on it."""
