"""Our QEMU TCG plugin (tools/plugin/insnclass.c), built with the host's C
compiler into the cache, once per version of its source, and the QEMU
option that loads it."""

from __future__ import annotations

from pathlib import Path

from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import cached_host_build

PLUGIN_DIR = REPO / "tools" / "plugin"
SOURCES = [PLUGIN_DIR / "insnclass.c", PLUGIN_DIR / "insnclass.h", PLUGIN_DIR / "qemu-plugin-api.h"]
# -fvisibility=hidden: only qemu_plugin_install and qemu_plugin_version are
# exported; QEMU's API functions are resolved when QEMU loads the plugin.
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread"]
# A decoder alone (no QEMU symbols), loadable with ctypes by the unit tests
DECODER_FLAGS = ["-DINSNCLASS_DECODER_ONLY", "-fvisibility=default"]


def build(decoder_only: bool = False) -> Path:
    """The plugin's shared object in the cache (built if its sources or
    flags changed): plugins/insnclass-HASH.so, or the decoder alone."""
    flags = CFLAGS + (DECODER_FLAGS if decoder_only else [])
    return cached_host_build(cache_dir() / "plugins", "insnclass-decoder" if decoder_only else "insnclass", ".so",
                             SOURCES, flags, "the QEMU plugin", "tools/plugin/ belongs to the ukl checkout",
                             "fix the source, or install the host compiler (`apt-get install gcc`)")


def option(so: Path, report: Path, profile: bool = False) -> str:
    """The -plugin argument for QEMU (vm.RunSpec.plugins): insnclass writing
    its report to REPORT (a comma in a QEMU option value is written twice);
    PROFILE: with each region's executed blocks (insnprofile)."""
    def esc(p: Path) -> str:
        return str(p).replace(",", ",,")
    return f"file={esc(so)},out={esc(report)}" + (",profile=on" if profile else "")
