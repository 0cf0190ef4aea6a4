"""The numbers the application's header (runtime/ukl.h, installed by
ukl-cc) shares with the kernel patch series: system call numbers, option
bits, remote-call operations and the remote descriptor base; and the
option names the tool passes in ukl.opts= (kernel/options.toml) against
the ones the kernel parses. Read from the patches, no kernel tree needed."""

from __future__ import annotations

import re
from collections import Counter

from ukltool.linux import profiles
from ukltool.util.paths import PATCH_DIR, REPO

RUNTIME = REPO / "runtime" / "ukl.h"


def series_lines(path: str) -> list[str]:
    """The lines the series leaves in PATH that it added: '+' lines of the
    patches, in series order, less the ones a later patch takes out."""
    kept: Counter[str] = Counter()
    order: list[str] = []
    for name in (PATCH_DIR / "series").read_text().split():
        current = None
        for line in (PATCH_DIR / name).read_text().splitlines():
            if line.startswith("+++ "):
                current = line[6:] if line.startswith("+++ b/") else None
            elif current == path and line.startswith("+") and not line.startswith("+++"):
                kept[line[1:]] += 1
                order.append(line[1:])
            elif current == path and line.startswith("-") and not line.startswith("---") and kept[line[1:]]:
                kept[line[1:]] -= 1
    out = []
    for line in order:
        if kept[line]:
            kept[line] -= 1
            out.append(line)
    return out


def defines(lines: list[str]) -> dict[str, int]:
    out = {}
    for line in lines:
        m = re.match(r"#define\s+(UKL_\w+)\s+(0x[0-9a-fA-F]+|\d+)\b", line)
        if m:
            out[m[1]] = int(m[2], 0)
    return out


def test_runtime_header_numbers_are_the_kernels():
    kernel = defines(series_lines("arch/x86/include/asm/ukl.h"))
    uapi = defines(series_lines("arch/x86/include/uapi/asm/ukl_ring.h"))
    text = RUNTIME.read_text()
    runtime = defines(text.splitlines())
    # the same names on both sides
    for name in ("UKL_NR_CALL", "UKL_NR_OPTS", "UKL_NR_RTC", "UKL_NR_REMOTE", "UKL_OPT_BYP", "UKL_OPT_RET",
                 "UKL_OPT_SHORTCUT"):
        assert runtime[name] == kernel[name], name
    # the TCP shortcuts are UKL_NR_TCP_* for applications
    for call in ("READ", "WRITE", "RECV", "SEND"):
        assert runtime[f"UKL_NR_TCP_{call}"] == kernel[f"UKL_NR_{call}"], call
    assert runtime["UKL_REMOTE_FD_BASE"] == uapi["UKL_RFD_BASE"]
    # the kernel's option bits are distinct single bits (runtime's are a subset, checked above)
    bits = [v for k, v in kernel.items() if k.startswith("UKL_OPT_") and k != "UKL_OPTS_ALL"]
    assert len(bits) >= 4 and all(b and not b & (b - 1) for b in bits) and len(set(bits)) == len(bits), bits
    # ukl_remote_enable() ... ukl_remote_irq() pass the kernel's operations
    ops = dict(re.findall(r"ukl_remote_(\w+)\(void\) \{ return \(int\)ukl_remote_\((\d+)\); \}", text))
    assert len(ops) == 7, ops
    for op, value in ops.items():
        assert int(value) == kernel[f"UKL_REMOTE_{op.upper()}"], op


def test_the_option_names_are_the_ones_the_kernel_parses():
    code = "\n".join(series_lines("arch/x86/kernel/ukl.c"))
    switches = set(re.findall(r'\{ "([a-z-]+)", UKL_OPT_\w+ \}', code))
    params = set(re.findall(r'(?:str_has_prefix|strncmp)\(name, "([a-z-]+)="', code))
    opts = profiles.options()
    assert switches == {n for n, o in opts.items() if not o.param}, (switches, opts)
    assert params == {n for n, o in opts.items() if o.param}, (params, opts)
    # rtc-max-us's limit is the kernel's
    assert "#define UKL_RTC_MAX_US_LIMIT USEC_PER_SEC" in code and opts["rtc-max-us"].maximum == 1_000_000


def test_the_series_reader_follows_later_patches():
    """0033 defines the ring's version 1; 0035 and 0036 raise it (3 now):
    the reader must end at the last patch's value."""
    assert defines(series_lines("arch/x86/include/uapi/asm/ukl_ring.h"))["UKL_RING_VERSION"] == 3
