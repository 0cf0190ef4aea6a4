"""Our QEMU TCG plugin (tools/plugin/insnclass.c), built with the host's C
compiler into the cache, once per version of its source, and the QEMU
option that loads it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ukltool.errors import UklError
from ukltool.paths import REPO, cache_dir
from ukltool.proc import capture, host_cc

PLUGIN_DIR = REPO / "tools" / "plugin"
SOURCES = [PLUGIN_DIR / "insnclass.c", PLUGIN_DIR / "insnclass.h", PLUGIN_DIR / "qemu-plugin-api.h"]
# -fvisibility=hidden: only qemu_plugin_install and qemu_plugin_version are
# exported; QEMU's API functions are resolved when QEMU loads the plugin.
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread"]
# A decoder alone (no QEMU symbols), loadable with ctypes by the unit tests
DECODER_FLAGS = ["-DINSNCLASS_DECODER_ONLY", "-fvisibility=default"]


def _digest(flags: list[str]) -> str:
    h = hashlib.sha256(" ".join(flags).encode())
    for src in SOURCES:
        try:
            h.update(src.name.encode() + b"\0" + src.read_bytes())
        except OSError as e:
            raise UklError(f"cannot read the plugin source {src}: {e.strerror}",
                           "tools/plugin/ belongs to the ukl checkout") from None
    return h.hexdigest()[:16]


def build(decoder_only: bool = False) -> Path:
    """The plugin's shared object in the cache (built if its sources or
    flags changed): plugins/insnclass-HASH.so, or the decoder alone."""
    flags = CFLAGS + (DECODER_FLAGS if decoder_only else [])
    name = f"insnclass{'-decoder' if decoder_only else ''}-{_digest(flags)}.so"
    out = cache_dir() / "plugins" / name
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    cc = host_cc()
    res = capture([cc, *flags, "-o", tmp, PLUGIN_DIR / "insnclass.c"])
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = (res.stdout + res.stderr).strip().splitlines()[-20:]
        raise UklError(f"building the QEMU plugin {PLUGIN_DIR / 'insnclass.c'} with {cc} failed "
                       f"(exit {res.returncode}):\n  " + "\n  ".join(tail),
                       "fix the source, or install the host compiler (`apt-get install gcc`)")
    tmp.replace(out)
    return out


def option(so: Path, report: Path) -> str:
    """The -plugin argument for QEMU (vm.RunSpec.plugins): insnclass writing
    its report to REPORT (a comma in a QEMU option value is written twice)."""
    def esc(p: Path) -> str:
        return str(p).replace(",", ",,")
    return f"file={esc(so)},out={esc(report)}"
