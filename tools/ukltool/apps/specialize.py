"""`ukl build APP --config base --specialize`: a kernel configuration made
for one application.

1. Record: the application is built for `linux` (the same program as an
   ordinary process, making the same system calls) into an image that
   also holds Debian's strace, and booted on the general kernel running
   its smoke test (the recipe's [smoke]; a file or directory: the program
   with its default arguments or --record-args) under `strace -f`, with
   the vDSO off (vdso=0): in ring 0 UKL's C library makes as system calls
   what the vDSO answers in ring 3 (clock_getres, CLOCK_MONOTONIC_RAW,
   ...), so the trace shows them. The trace leaves the guest on the
   console, compressed and base64-encoded between markers.
2. Map: the system calls, socket families, paths, mounted file systems,
   ioctls and flags in the trace are looked up in kernel/specialize/
   table.toml; each entry names the Kconfig options that build what was
   used. So are the system calls the program's code can make, whether the
   run made them or not (binsyscalls: its `syscall` sites, and the clock
   ids and socket families at its calls of the C library), so that what
   the run did not happen to execute still works.
   kernel/specialize/core.config (what UKL, `ukl run` and init need)
   plus the configuration's own fragments (base.config) plus those options
   plus the recipe's [specialize] options (--kconfig for a file or
   directory) make the fragment, named by its content (special-HASH) and
   kept in the cache: applications with the same needs share one kernel
   build.
3. Build the image for special-HASH, boot it once running the same smoke
   test (re-verification), and write OUT/specialize.md and .json: every
   option and why.

A system call that the specialized kernel lacks returns ENOSYS, as Linux
does for any call compiled out."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
import re
import shlex
import shutil
import tempfile
import time
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ukltool.apps import recipes
from ukltool.apps.target import AppTarget
from ukltool.build import image, initramfs
from ukltool.linux import binsyscalls, kernel, profiles
from ukltool.run import vm
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import KERNEL_DIR, cache_dir

SPEC_DIR = KERNEL_DIR / "specialize"
TABLE_FILE = SPEC_DIR / "table.toml"
CORE_FILE = SPEC_DIR / "core.config"
PC_FILE = SPEC_DIR / "pc.config"
MACHINES = ("microvm",)           # what --machine may name; the default is any of vm.MACHINES
PREFIX = kernel.SPECIAL_PREFIX
STRACE = Path("/usr/bin/strace")
TRACE_BEGIN, TRACE_END = "ukl-specialize: trace begin", "ukl-specialize: trace end"
SMOKE_STATUS = re.compile(r"^ukl-specialize: smoke status (\d+)\s*$", re.M)
SMOKE_FILE = "/etc/ukl/specialize-smoke.sh"
GUEST_TRACE = "/tmp/ukl-specialize.trace"
OPTION_NAME = re.compile(r"CONFIG_[A-Z0-9_]+")
SECTIONS = ("syscalls", "families", "paths", "filesystems", "ioctls", "arguments")


# ---- the table ----

@dataclass(frozen=True)
class Entry:
    key: str
    options: tuple[str, ...]
    where: str                    # what in the kernel it is (the table's `in`)
    ukl: bool = False             # a UKL call: ENOSYS on `linux` by design
    unknown: bool = False         # a catch-all: the table has nothing more precise
    calls: tuple[str, ...] = ()   # [arguments]: the calls whose arguments are searched


@dataclass
class Table:
    sections: dict[str, dict[str, Entry]]
    nic: Entry
    drop: dict[str, str]          # options of the configuration's fragments left to the application -> why
    vm_base_only: dict[str, str]  # options of vm-base.config no specialized kernel gets -> why
    nic_pc: tuple[str, ...] = ()  # [nic] options only -M pc's network device needs

    def nic_options(self, machine: str | None) -> tuple[str, ...]:
        """The network device's options for a kernel for MACHINE (None: any)."""
        if machine is None:
            return self.nic.options
        return tuple(o for o in self.nic.options if o not in self.nic_pc)

    def all_options(self) -> set[str]:
        """Every option an entry can add."""
        return {o for sec in self.sections.values() for e in sec.values() for o in e.options} | set(self.nic.options)


def _options(v: Any, where: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(o, str) and OPTION_NAME.fullmatch(o) for o in v):
        raise UklError(f"{where}: options must be a list of CONFIG_NAME strings", f"fix {TABLE_FILE}")
    return tuple(v)


def load_table(path: Path = TABLE_FILE) -> Table:
    """The table, checked: a broken file is an error that names the entry."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read {path}: {e}", "fix the file (TOML)") from None
    sections: dict[str, dict[str, Entry]] = {}
    for sec in SECTIONS:
        raw = data.get(sec, {})
        if not isinstance(raw, dict):
            raise UklError(f"{path}: [{sec}] must be a table", "see the file's header")
        out = {}
        for key, v in raw.items():
            where = f"{path.name} [{sec}] {key}"
            if not isinstance(v, dict) or not isinstance(v.get("in"), str):
                raise UklError(f"{where}: needs {{ options = [...], in = \"...\" }}", f"fix {path}")
            unknown_keys = set(v) - {"options", "in", "ukl", "unknown", "calls"}
            if unknown_keys:
                raise UklError(f"{where}: unknown key(s) {', '.join(sorted(unknown_keys))}", f"fix {path}")
            calls = v.get("calls", [])
            if sec == "arguments" and (not calls or not all(isinstance(c, str) for c in calls)):
                raise UklError(f"{where}: an [arguments] entry names its calls (calls = [\"fcntl\"])", f"fix {path}")
            out[key] = Entry(key, _options(v.get("options"), where), v["in"], bool(v.get("ukl", False)),
                             bool(v.get("unknown", False)), tuple(calls))
        sections[sec] = out
    nic = data.get("nic")
    if not isinstance(nic, dict) or not isinstance(nic.get("in"), str):
        raise UklError(f"{path}: [nic] needs options and in", f"fix {path}")
    reasons = {}
    for sec in ("drop", "vm_base_only"):
        raw = data.get(sec, {})
        if not isinstance(raw, dict) or not all(OPTION_NAME.fullmatch(k) and isinstance(v, str) and v.strip()
                                                for k, v in raw.items()):
            raise UklError(f"{path}: [{sec}] maps CONFIG_NAME to a reason", f"fix {path}")
        reasons[sec] = raw
    unknown = set(data) - {*SECTIONS, "nic", "drop", "vm_base_only"}
    if unknown:
        raise UklError(f"{path}: unknown section(s) {', '.join(sorted(unknown))}", "see the file's header")
    entry = Entry("nic", _options(nic.get("options"), f"{path.name} [nic]"), nic["in"])
    pc_only = _options(nic.get("pc", []), f"{path.name} [nic] pc")
    if not set(pc_only) <= set(entry.options):
        raise UklError(f"{path}: [nic] pc names options that are not among its options", f"fix {path}")
    return Table(sections, entry, reasons["drop"], reasons["vm_base_only"], pc_only)


# ---- the trace ----

@dataclass
class Use:
    count: int = 0
    programs: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)   # errno name -> calls that failed with it

    def add(self, program: str, errno: str | None) -> None:
        self.count += 1
        self.programs.add(program)
        if errno:
            self.errors[errno] += 1

    def only_failed_with(self, *errnos: str) -> bool:
        return self.count > 0 and sum(self.errors[e] for e in errnos) == self.count


@dataclass
class Usage:
    """What a trace shows the programs used, each with who and how often."""
    syscalls: dict[str, Use] = field(default_factory=dict)
    families: dict[str, Use] = field(default_factory=dict)
    paths: dict[str, Use] = field(default_factory=dict)
    filesystems: dict[str, Use] = field(default_factory=dict)
    ioctls: dict[str, Use] = field(default_factory=dict)
    arguments: dict[str, Use] = field(default_factory=dict)   # "call WORD"
    addresses: dict[str, Use] = field(default_factory=dict)   # non-loopback addresses connected or sent to
    lines: int = 0

    def note(self, what: dict[str, Use], key: str, program: str, errno: str | None) -> None:
        what.setdefault(key, Use()).add(program, errno)


LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<rest>.*)$")
RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<args>.*)$")
CALL = re.compile(r"^(?P<name>\w+)\((?P<args>.*)$")
RESULT = re.compile(r"^(?P<args>.*)\)\s+=\s+(?P<ret>\S+)(?P<tail>.*)$")
ERRNO = re.compile(r"^\s+(E[A-Z0-9]+)\b")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
PATH_CALLS = frozenset("""open openat openat2 creat stat lstat newfstatat statx access faccessat faccessat2 readlink
    readlinkat execve execveat mkdir mkdirat rmdir unlink unlinkat rename renameat renameat2 link linkat symlink
    symlinkat chdir chroot chmod fchmodat chown lchown fchownat truncate utime utimes utimensat futimesat statfs
    mknod mknodat inotify_add_watch getxattr lgetxattr setxattr lsetxattr listxattr llistxattr removexattr
    lremovexattr umount2 pivot_root name_to_handle_at uselib swapon swapoff acct""".split())
FORKS = frozenset(("clone", "clone3", "fork", "vfork"))
LOOPBACK = re.compile(r"^(127\.|0\.0\.0\.0$|::1?$|::ffff:127\.)")


def split_args(text: str) -> list[str]:
    """strace's argument list split at the top level's commas."""
    out, depth, cur, quoted, escaped = [], 0, [], False, False
    for ch in text:
        if quoted:
            cur.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
            continue
        if ch == '"':
            quoted = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return out


def _unquote(s: str) -> str:
    try:
        return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return s


def parse_trace(text: str, first_program: str = "sh") -> Usage:
    """The usage in an `strace -f` output (pid-prefixed lines). Unfinished
    calls are joined with their resumption; a process is named after the
    file it last executed (its parent's name until then)."""
    usage = Usage()
    program: dict[str, str] = {}
    pending: dict[str, tuple[str, str]] = {}
    for raw in text.splitlines():
        m = LINE.match(raw.strip())
        if not m:
            continue
        pid, rest = m.group("pid"), m.group("rest")
        if rest.startswith(("---", "+++")):
            continue       # signals, exits
        if pid not in program:
            program[pid] = first_program if not program else "?"   # named when its parent's clone returns
        r = RESUMED.match(rest)
        if r:
            if pid not in pending:
                continue
            name, args = pending.pop(pid)
            rest = f"{name}({args}{r.group('args')}"
        c = CALL.match(rest)
        if not c:
            continue
        name, tail = c.group("name"), c.group("args")
        if tail.endswith("<unfinished ...>"):
            pending[pid] = (name, tail[: -len("<unfinished ...>")].rstrip())
            continue
        res = RESULT.match(tail)
        if res:
            args, ret, e = res.group("args"), res.group("ret"), ERRNO.match(res.group("tail"))
            errno = e.group(1) if e else None
        elif name in ("exit", "exit_group"):
            args, ret, errno = tail.rstrip(") ?="), "?", None
        else:
            continue
        usage.lines += 1
        _record(usage, program, pid, name, args, ret, errno)
    return usage


def _record(usage: Usage, program: dict[str, str], pid: str, name: str, args: str, ret: str,
            errno: str | None) -> None:
    who = program[pid]
    usage.note(usage.syscalls, name, who, errno)
    parts = split_args(args)
    if name in FORKS and ret.isdigit() and program.get(ret, "?") == "?":
        program[ret] = who
    if name in ("execve", "execveat") and ret == "0":
        strings = STRING.findall(args)
        # busybox runs some applets by exec'ing itself: keep the name
        if strings and not _unquote(strings[0]).startswith("/proc/self/"):
            program[pid] = Path(_unquote(strings[0])).name or who
    if name in PATH_CALLS:
        for s in STRING.findall(args):
            path = _unquote(s)
            if path.startswith("/"):
                usage.note(usage.paths, path, who, errno)
    if name in ("socket", "socketpair") and parts:
        usage.note(usage.families, parts[0], who, errno)
    if name == "mount" and len(parts) >= 3:
        fstype = STRING.fullmatch(parts[2])
        if fstype:
            usage.note(usage.filesystems, _unquote(fstype.group(1)), who, errno)
    if name == "ioctl" and len(parts) >= 2:
        usage.note(usage.ioctls, re.split(r"[\s(]", parts[1])[0], who, errno)
    if name in ("connect", "sendto", "sendmsg"):
        for addr in re.findall(r'inet_(?:addr|pton)\((?:AF_INET6?, )?"([^"]+)"', args):
            if not LOOPBACK.match(addr):
                usage.note(usage.addresses, addr, who, errno)
    for word in set(re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", args)):
        usage.note(usage.arguments, f"{name} {word}", who, errno)


# ---- the choice ----

@dataclass
class Choice:
    option: str
    reasons: list[str] = field(default_factory=list)


@dataclass
class Selection:
    options: dict[str, Choice] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)    # seen, but nothing added: why
    unknown: list[str] = field(default_factory=list)     # seen, without a precise table entry

    def add(self, options: tuple[str, ...] | list[str], reason: str) -> None:
        for o in options:
            self.options.setdefault(o, Choice(o)).reasons.append(reason)


def _who(use: Use) -> str:
    progs = sorted(use.programs)
    shown = ", ".join(progs[:4]) + (f" and {len(progs) - 4} more" if len(progs) > 4 else "")
    return f"{shown}; {use.count} time{'s' if use.count != 1 else ''}"


def _path_entry(path: str, entries: dict[str, Entry]) -> Entry | None:
    """The entry with the longest key that PATH starts with; a key ending
    in '/' also matches the directory itself."""
    best: Entry | None = None
    for key, e in entries.items():
        if (path.startswith(key) or path + "/" == key) and (best is None or len(key) > len(best.key)):
            best = e
    return best


# The constants the program's code passes where binsyscalls looks: clock
# ids (first argument of the clock functions) and socket families
CLOCK_IDS = {0: "CLOCK_REALTIME", 1: "CLOCK_MONOTONIC", 2: "CLOCK_PROCESS_CPUTIME_ID", 3: "CLOCK_THREAD_CPUTIME_ID",
             4: "CLOCK_MONOTONIC_RAW", 5: "CLOCK_REALTIME_COARSE", 6: "CLOCK_MONOTONIC_COARSE", 7: "CLOCK_BOOTTIME",
             8: "CLOCK_REALTIME_ALARM", 9: "CLOCK_BOOTTIME_ALARM", 11: "CLOCK_TAI"}
FAMILIES = {1: "AF_UNIX", 2: "AF_INET", 10: "AF_INET6", 16: "AF_NETLINK", 17: "AF_PACKET", 40: "AF_VSOCK"}
CLOCK_FUNCTIONS = ("clock_gettime", "clock_getres", "clock_nanosleep", "timer_create")
SOCKET_FUNCTIONS = ("socket", "socketpair")
# fcntl's commands that select an option ([arguments] in the table), x86-64
FCNTL_COMMANDS = {5: "F_GETLK", 6: "F_SETLK", 7: "F_SETLKW", 36: "F_OFD_GETLK", 37: "F_OFD_SETLK", 38: "F_OFD_SETLKW",
                  1024: "F_SETLEASE", 1025: "F_GETLEASE", 1026: "F_NOTIFY", 1033: "F_ADD_SEALS"}
LISTENS = ("listen", "accept", "accept4")   # calls of a server: it is reached from outside
RUN, CODE = "the run", "the code"           # where a reason comes from


@dataclass
class Code:
    """What the program's code can do (binsyscalls), with the names of its calls."""
    use: binsyscalls.BinaryUse
    names: dict[int, str]

    def syscalls(self) -> dict[str, int]:
        return {binsyscalls.name_of(n, self.names): k for n, k in sorted(self.use.syscalls.items())}


def choose(usage: Usage, table: Table, general: dict[str, str] | None = None,
           manual: list[tuple[str, str]] | None = None, nic_reasons: list[str] | None = None,
           code: Code | None = None, machine: str | None = None) -> Selection:
    """The options USAGE needs, and those CODE (the program's system
    calls, read from its binary) can need. GENERAL: the general kernel's
    configuration (what the recording ran on); an option it lacks is left
    out, since the application ran without it. MANUAL: the recipe's (or
    --kconfig's) (option, reason) pairs; "nic" is the network device.
    NIC_REASONS: why the application is reached over the network.
    MACHINE: the one machine the kernel is for (None: any), which decides
    the network device's bus."""
    sel = Selection()

    def add(entry: Entry, what: str, use: Use | str, source: str = RUN) -> None:
        who = _who(use) if isinstance(use, Use) else use
        opts = entry.options
        if general is not None and not entry.ukl:
            missing = [o for o in opts if general.get(o, "n") == "n"]
            if missing:
                sel.left_out.append(f"{what}: {', '.join(missing)} is not in the general kernel either "
                                    f"({who}; {source})")
                opts = tuple(o for o in opts if o not in missing)
        sel.add(opts, f"{source}: {what}: {entry.where} ({who})")

    calls = table.sections["syscalls"]
    for name, use in sorted(usage.syscalls.items()):
        e = calls.get(name)
        if e is None:
            if name.startswith("syscall_"):
                sel.unknown.append(f"{name}(): a system call number strace does not know ({_who(use)})")
            continue
        if not e.ukl and use.only_failed_with("ENOSYS"):
            sel.left_out.append(f"{name}(): ENOSYS on the general kernel too ({_who(use)})")
            continue
        add(e, f"{name}()", use)
    families = table.sections["families"]
    for fam, use in sorted(usage.families.items()):
        e = families.get(fam)
        if e is None:
            sel.unknown.append(f"socket({fam}): no table entry ({_who(use)})")
        elif use.only_failed_with("EAFNOSUPPORT", "ENOSYS"):
            sel.left_out.append(f"socket({fam}): not supported by the general kernel either ({_who(use)})")
        else:
            add(e, f"socket({fam})", use)
    for path, use in sorted(usage.paths.items()):
        e = _path_entry(path, table.sections["paths"])
        if e is None:
            continue        # the initramfs's own files (rootfs)
        if e.unknown:
            sel.unknown.append(f"{path}: {e.where} ({_who(use)})")
        if e.options:
            add(e, path, use)
    for fs, use in sorted(usage.filesystems.items()):
        e = table.sections["filesystems"].get(fs)
        if e is None:
            sel.unknown.append(f"mount of a '{fs}' file system: no table entry ({_who(use)})")
        elif e.options:
            add(e, f"mount type {fs}", use)
    for req, use in sorted(usage.ioctls.items()):
        e = _prefix_entry(req, table.sections["ioctls"])
        if e is not None and e.options:
            add(e, f"ioctl {req}", use)
    for key, use in sorted(usage.arguments.items()):
        call, word = key.split(" ", 1)
        e = table.sections["arguments"].get(word)
        if e is not None and call in e.calls and e.options:
            add(e, f"{call}(... {word} ...)", use)
    nic = list(nic_reasons or [])
    nic += [f"{addr} reached ({_who(use)})" for addr, use in sorted(usage.addresses.items())]
    if code is not None:
        nic += _choose_code(code, table, add)
    for opt, reason in manual or []:
        if opt == "nic":
            nic.append(f"asked for: {reason}")
        else:
            sel.add((opt,), f"asked for: {reason}")
    if nic:
        sel.add(table.nic_options(machine), f"the network device: {table.nic.where}; " + "; ".join(nic))
    return sel


def _choose_code(code: Code, table: Table, add) -> list[str]:
    """Add what the program's code can call; return why it needs the
    network device, if it does (it can listen on an IP socket)."""
    calls = table.sections["syscalls"]
    seen = code.syscalls()
    for name, sites in seen.items():
        e = calls.get(name)
        if e is not None:
            add(e, f"{name}()", f"{sites} site{'s' if sites != 1 else ''} in the program", CODE)
    args = table.sections["arguments"]
    families = table.sections["families"]
    inet = False
    for func, consts in sorted(code.use.call_args.items()):
        for const, sites in sorted(consts.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            where = f"{sites} call{'s' if sites != 1 else ''} in the program"
            if func in CLOCK_FUNCTIONS:
                if const is None:  # a clock the code computes: any of them
                    for word, e in sorted(args.items()):
                        if word.startswith("CLOCK_") and func in e.calls:
                            add(e, f"{func}(a computed clock id, so {word})", where, CODE)
                elif const in CLOCK_IDS and CLOCK_IDS[const] in args and func in args[CLOCK_IDS[const]].calls:
                    add(args[CLOCK_IDS[const]], f"{func}({CLOCK_IDS[const]})", where, CODE)
            elif func == "fcntl":
                # a command the code computes: any the table has
                words = [w for w, e in sorted(args.items()) if func in e.calls] if const is None else \
                    [FCNTL_COMMANDS.get(const, "")]
                for word in words:
                    if word in args and func in args[word].calls:
                        what = f"fcntl({word})" if const is not None else f"fcntl(a computed command, so {word})"
                        add(args[word], what, where, CODE)
            elif func in SOCKET_FUNCTIONS:
                names = sorted(families) if const is None else [FAMILIES.get(const, "")]
                for fam in names:
                    if fam in families and fam != "AF_LOCAL":
                        what = f"{func}({fam})" if const is not None else f"{func}(a computed family, so {fam})"
                        add(families[fam], what, where, CODE)
                        inet = inet or fam in ("AF_INET", "AF_INET6")
    listens = [c for c in LISTENS if c in seen]
    if listens and inet:
        return [f"its code can serve on an IP port ({', '.join(f'{c}()' for c in listens)} and IP sockets)"]
    return []


def _prefix_entry(word: str, entries: dict[str, Entry]) -> Entry | None:
    best = None
    for key, e in entries.items():
        if word.startswith(key) and (best is None or len(key) > len(best.key)):
            best = e
    return best


# ---- the fragment ----

def config_lines(config: str, table: Table) -> tuple[str, list[str]]:
    """The fragments of CONFIG (a repository configuration) other than
    vm-base.config, as text without `ukl-extends` lines and without the
    options the table's [drop] leaves to the application; and the dropped
    options that were there."""
    text, dropped = [], []
    for frag in kernel.fragments(config):
        if frag.name == kernel.BASE_FRAGMENT:
            continue
        text.append(f"# from {frag.name}")
        for line in frag.read_text().splitlines():
            if re.match(r"#\s*ukl-extends:", line):
                continue
            sym = re.match(r"^(?:# )?(CONFIG_\w+)[= ]", line)
            if sym and sym.group(1) in table.drop:
                dropped.append(sym.group(1))
                continue
            text.append(line)
    return "\n".join(text) + "\n", dropped


def check_machine(machine: str | None) -> None:
    if machine is not None and machine not in MACHINES:
        raise UklError(f"--machine {machine}: a kernel is specialized for any machine (the default) or for "
                       f"{' or '.join(MACHINES)} alone", "leave --machine out, or name microvm")


def machine_lines(machine: str | None) -> str:
    """What the kernel needs for the machines it is for: pc.config unless
    it is for microvm alone, which then names the machine in a header (so
    in the configuration's name)."""
    check_machine(machine)
    if machine is None:
        return f"# from {PC_FILE.name}\n{PC_FILE.read_text()}"
    return f"# ukl-specialized-for: {machine}\n"


def fragment(config: str, sel: Selection, table: Table, machine: str | None = None) -> str:
    """The specialized configuration's fragment: the core, what the
    machines it is for need, CONFIG's own fragments, the chosen options. It
    names no application, so that applications with the same needs share
    it (and its kernel)."""
    own, _ = config_lines(config, table)
    chosen = "".join(f"{o}=y\n" for o in sorted(sel.options))
    return ("# A specialized configuration (`ukl build --specialize`): kernel/specialize/core.config,\n"
            f"# the fragments of '{config}', and the options an application was seen to need\n"
            "# (each image's specialize.md says why).\n"
            f"# ukl-specialized-from: {config}\n"
            f"{CORE_FILE.read_text()}\n{machine_lines(machine)}\n{own}\n# the application's options\n{chosen}")


def config_name(text: str) -> str:
    """special-HASH, HASH of what the fragment sets (and its `ukl-`
    headers), not of its comments: a reworded comment keeps the name, and
    so the build directory."""
    settings = sorted(f"{k}={v}" for k, v in kernel.parse_fragment(text).items())
    headers = sorted(l.strip() for l in text.splitlines() if re.match(r"#\s*ukl-", l))
    return PREFIX + hashlib.sha256("\n".join([*headers, *settings]).encode()).hexdigest()[:12]


def store(text: str) -> str:
    """Keep the fragment in the cache under its name; return the name."""
    name = config_name(text)
    path = kernel.special_fragment(name)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(text)
        tmp.replace(path)
    return name


def general_config() -> dict[str, str] | None:
    """The final .config of the `linux` kernel (the recording's), where built."""
    path = cache_dir() / "build" / "linux" / ".config"
    return kernel.parse_fragment(path.read_text()) if path.is_file() else None


# ---- recording ----

def strace_files() -> list[tuple[Path, str]]:
    """Debian's strace and the shared libraries it loads, for the image."""
    if not STRACE.is_file():
        raise UklError(f"{STRACE} is missing: --specialize records the application with it",
                       "apt-get install strace")
    files = [(STRACE, str(STRACE))]
    for lib in image._shared_libraries(STRACE):
        files.append((lib.resolve(), str(lib)))
    return files


@dataclass
class Request:
    """What the user asks of a file's or directory's specialization."""
    args: list[str] | None = None          # the recorded run's arguments (None: the image's own)
    statuses: list[int] = field(default_factory=lambda: [0])  # the statuses it may end with
    manual: list[tuple[str, str]] = field(default_factory=list)  # --kconfig (option or "nic", why)
    machine: str | None = None             # the one QEMU machine the kernel is for (None: any)


def smoke_for(recipe: recipes.Recipe | None, args: list[str]) -> tuple[str, list[str], float, str]:
    """The smoke test the recording and the re-verification run, the lines
    it must print, its timeout, and what strace runs: the recipe's [smoke]
    script under the shell (the shell and the tools it runs are part of
    the test, and they run on the specialized kernel too), else the
    application itself with ARGS (its image has no shell), which must exit
    with one of the statuses asked for (Request.statuses)."""
    if recipe is not None and recipe.smoke is not None:
        return recipe.smoke.sh, recipe.smoke.expect, recipe.smoke.timeout, f"/bin/sh {SMOKE_FILE}"
    return "", [], 120.0, " ".join(["$UKL_APP", *(shlex.quote(a) for a in args)])


def wrapper(traced: str) -> str:
    """The shell command line the recording boot runs instead of the
    application: TRACED under strace, then the trace on the console."""
    # -s 16: a string argument's first 16 bytes, so that mount()'s file
    # system type is in the trace (paths are printed whole whatever -s)
    return (f"strace -f -qq -s 16 -o {GUEST_TRACE} {traced}; s=$?; "
            "echo \"ukl-specialize: smoke status $s\"; "
            f"echo '{TRACE_BEGIN}'; gzip -c {GUEST_TRACE} | base64; echo '{TRACE_END}'; exit $s")


KEEP_STRINGS = PATH_CALLS | {"mount", "execve", "execveat"}
NAMED = re.compile(r"^\d+\s+(?:<\.\.\. )?(?P<name>\w+)[( ]")


def redact(trace: str) -> str:
    """TRACE without the data strace -s 16 shows of buffers (what a program
    reads, writes, sends: secrets, perhaps): only paths and mount()'s file
    system type keep their strings, in what is cached and written to
    OUTDIR/specialize-trace.gz."""
    out = []
    for line in trace.splitlines():
        m = NAMED.match(line.strip())
        if m is None or m.group("name") not in KEEP_STRINGS:
            line = STRING.sub('""', line)
        out.append(line)
    return "\n".join(out) + ("\n" if trace.endswith("\n") else "")


def extract_trace(console: str) -> str:
    """The trace between the markers on the console (base64 of gzip)."""
    begin, end = console.rfind(TRACE_BEGIN), console.rfind(TRACE_END)
    if begin < 0 or end < begin:
        raise UklError("the recording boot printed no trace", "see its console log")
    body = "".join(l.strip() for l in console[begin + len(TRACE_BEGIN):end].splitlines()
                   if re.fullmatch(r"[A-Za-z0-9+/=]+", l.strip()))
    try:
        return gzip.decompress(base64.b64decode(body)).decode(errors="replace")
    except (ValueError, OSError, EOFError) as e:
        raise UklError(f"the trace on the console is damaged: {e}", "see the recording's console log") from None


# The recording boot's kernel arguments: no vDSO, so that the clocks are
# read by system calls, as UKL's C library reads them in ring 0
RECORD_APPEND = ["vdso=0"]


def _boot(outdir: Path, sh: str, smoke: str, log: Path, timeout: float, args: list[str],
          append: list[str] | None = None, machine: str = "pc") -> tuple[vm.RunResult, str]:
    with tempfile.TemporaryDirectory(prefix="ukl-specialize-") as td:
        extra = initramfs.args_archive(args, Path(td), sh)
        script = Path(td) / "smoke.sh"
        script.write_text(smoke)
        smoke_cpio = Path(td) / "smoke.cpio"
        initramfs.write(initramfs.Spec().file(SMOKE_FILE, script, "0644"), smoke_cpio)
        initrds = image.boot_initrds(outdir, image.load(outdir), [extra, smoke_cpio], shell=True)
        res = vm.boot(vm.RunSpec(bzimage=outdir / "bzImage", initrds=initrds,
                                 log=log, timeout=timeout, show=False, append=list(append or []),
                                 machine=machine))
    return res, log.read_text(errors="replace")


def _smoke_ok(res: vm.RunResult, console: str, expect: list[str], status_from_console: bool,
             statuses: list[int] | None = None) -> str | None:
    """None if the smoke test passed, else why not."""
    if res.failures:
        return "the kernel failed: " + res.failures[0]
    if res.timed_out:
        return "it timed out"
    status = res.status
    if status_from_console:
        m = SMOKE_STATUS.findall(console)
        status = int(m[-1]) if m else None
    if status not in (statuses or [0]):
        return f"it exited with status {status}" + (f", not {', '.join(map(str, statuses))}" if statuses else "")
    missing = [e for e in expect if e not in console]
    return f"its output lacks: {', '.join(missing)}" if missing else None


@dataclass
class Recording:
    trace: str
    image_key: str
    seconds: float
    cached: bool


def record(spec: image.BuildSpec, smoke: str, expect: list[str], timeout: float, traced: str,
           workdir: Path, statuses: list[int] | None = None) -> Recording:
    """Build SPEC (for `linux`, with strace) and boot it running SMOKE under
    strace; the trace, cached by the image's and the script's content."""
    start = time.monotonic()
    with ui.step(f"building {spec.name or spec.sources[0].name} for 'linux' to record it"):
        image.build(spec)
    h = hashlib.sha256()
    for part in ("bzImage", "initramfs.cpio"):
        h.update(hashlib.sha256((spec.outdir / part).read_bytes()).digest())
    h.update(smoke.encode() + b"\0" + wrapper(traced).encode() + b"\0" + " ".join(RECORD_APPEND).encode())
    h.update(b"\0" + ",".join(map(str, statuses or [0])).encode())
    key = h.hexdigest()[:16]
    cached = cache_dir() / "specialize" / "traces" / f"{key}.trace.gz"
    if cached.is_file():
        return Recording(gzip.decompress(cached.read_bytes()).decode(errors="replace"), key,
                         time.monotonic() - start, True)
    log = workdir / "record-console.log"
    with ui.step("recording the smoke test under strace on the general kernel"):
        res, console = _boot(spec.outdir, wrapper(traced), smoke, log, timeout * 4, [], RECORD_APPEND)
    why = _smoke_ok(res, console, expect, status_from_console=True, statuses=statuses)
    if why:
        raise UklError(f"the smoke test failed on the general kernel while it was recorded: {why}",
                       f"see {log}; the application must pass its smoke test under `linux` first (a file or "
                       "directory: name the run with --record-args and its statuses with --record-status)")
    trace = redact(extract_trace(console))
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(gzip.compress(trace.encode()))
    return Recording(trace, key, time.monotonic() - start, False)


# ---- the whole build ----

@dataclass
class Result:
    config: str                        # special-HASH, with the profile's options
    origin: str                        # the configuration specialized
    app: str
    options: dict[str, list[str]]      # chosen option -> reasons
    core: list[str]                    # the core's options
    origin_options: list[str]          # those of the configuration's own fragments
    dropped: list[str]                 # of those, left to the application
    left_out: list[str]
    unknown: list[str]
    syscalls: dict[str, int]           # every call seen -> times
    trace_lines: int
    record_seconds: float
    record_cached: bool
    build_seconds: float
    verified: bool
    verify_log: str
    code_syscalls: dict[str, int] = field(default_factory=dict)  # calls the program's code can make -> sites
    code_unresolved: int = 0           # `syscall` sites whose number is not a constant nearby
    from_code: list[str] = field(default_factory=list)  # options only the program's code gave
    machine: str | None = None         # the one QEMU machine the kernel is for (None: any)
    machine_options: list[str] = field(default_factory=list)  # pc.config's, where the kernel is for any machine


def manual_options(r: recipes.Recipe | None) -> list[tuple[str, str]]:
    return [] if r is None else list(r.specialize)


def nic_reasons(r: recipes.Recipe | None) -> list[str]:
    if r is None:
        return []
    out = []
    if r.forwards:
        out.append("the recipe forwards port(s) " + ", ".join(f"{g}" for _, g in r.forwards) + " from the host")
    if r.tests is not None:
        out.append(f"its test suite (`ukl apptest`) reaches port {r.tests.port} from the host")
    if r.netbench is not None:
        out.append(f"host clients (`ukl bench --clients host`) reach port {r.netbench.port}")
    return out


def program_code(rec_image: Path) -> Code:
    """What the recorded program's code can call: the static executable
    in the recording image (/bin/NAME), read by binsyscalls."""
    man = image.load(rec_image)
    data = initramfs.read_member((rec_image / "initramfs.cpio").read_bytes(), f"bin/{man.app}")
    if data is None:
        raise UklError(f"the recording image {rec_image} has no bin/{man.app}", "rebuild with --specialize")
    with tempfile.TemporaryDirectory(prefix="ukl-specialize-") as td:
        exe = Path(td) / man.app
        exe.write_bytes(data)
        return Code(binsyscalls.of_program(exe), binsyscalls.syscall_names())


def build(app: AppTarget, config: str, outdir: Path, request: Request | None = None) -> Result:
    """APP's image for the kernel specialized from CONFIG to it, in OUTDIR.
    APP is recorded under `linux` and built for the result the same way.
    REQUEST: a file's or directory's run to record, its statuses, its
    options."""
    request = request or Request()
    check_machine(request.machine)
    spec = app.spec(config, outdir)
    recipe = app.recipe
    prof = profiles.parse(spec.config)
    if prof.config.startswith(PREFIX):
        raise UklError(f"'{spec.config}' is already specialized", "name the configuration to specialize, e.g. base")
    kernel.fragments(spec.config)
    table = load_table()
    work = cache_dir() / "specialize" / "record" / re.sub(r"[^A-Za-z0-9._+-]", "_", app.record_name)
    work.mkdir(parents=True, exist_ok=True)
    run_args = spec.args if request.args is None else request.args
    smoke, expect, timeout, traced = smoke_for(recipe, run_args)
    statuses = [0] if smoke else request.statuses
    # the recording is the same whatever the result's compression or its kernel's optimization
    rec_app = dataclasses.replace(app, userspace=True, compression=None, optimize=None)
    rec_spec = rec_app.spec("linux", work / "image", strace_files())
    # two specializations of one application at once take turns on its recording image
    with lock.held(f"specialize-record-{work.name}", f"the recording of {work.name}"):
        rec = record(rec_spec, smoke, expect, timeout, traced, work, statuses)
        code = program_code(rec_spec.outdir)
    usage = parse_trace(rec.trace, "sh" if smoke else spec.name or "app")
    if usage.lines == 0:
        raise UklError("the recorded trace holds no system calls", f"see {work / 'record-console.log'}")
    sel = choose(usage, table, general_config(), manual_options(recipe) + request.manual, nic_reasons(recipe), code,
                 request.machine)
    text = fragment(prof.config, sel, table, request.machine)
    name = store(text)
    full = "+".join((name, *prof.opts))
    start = time.monotonic()
    final = app.spec(full, spec.outdir)
    man = image.build(final)
    build_seconds = time.monotonic() - start
    (spec.outdir / "specialize.config").write_text(text)
    (spec.outdir / "specialize-trace.gz").write_bytes(gzip.compress(rec.trace.encode()))
    machine = request.machine or "pc"
    with ui.step(f"re-verifying: the smoke test on '{name}'" + (f" (-M {machine})" if request.machine else "")):
        log = spec.outdir / "specialize-verify.log"
        if recipe is not None and recipe.smoke is not None:
            res, console = _boot(spec.outdir, recipe.smoke.sh, smoke, log, timeout, [], machine=machine)
        else:
            res, console = _boot_plain(spec.outdir, run_args, log, timeout, machine)
        why = _smoke_ok(res, console, expect, status_from_console=False, statuses=statuses)
    _, dropped = config_lines(prof.config, table)
    core = sorted(kernel.parse_fragment(CORE_FILE.read_text()))
    own = sorted(o for f in kernel.fragments(prof.config) if f.name != kernel.BASE_FRAGMENT
                 for o in kernel.parse_fragment(f.read_text()) if o not in table.drop)
    result = Result(full, spec.config, man.app, {o: c.reasons for o, c in sorted(sel.options.items())}, core, own,
                    dropped, sel.left_out, sel.unknown, {k: v.count for k, v in sorted(usage.syscalls.items())},
                    usage.lines, rec.seconds, rec.cached, build_seconds, why is None, str(log),
                    code.syscalls(), code.use.unresolved,
                    sorted(o for o, c in sel.options.items() if all(r.startswith(CODE) for r in c.reasons)),
                    request.machine,
                    [] if request.machine else sorted(kernel.parse_fragment(PC_FILE.read_text())))
    write_reports(result, spec.outdir, table)
    if why:
        raise UklError(f"the smoke test fails on the specialized kernel '{name}': {why}",
                       f"see {log} and {spec.outdir / 'specialize.md'}; a recipe adds what the trace missed with "
                       "[specialize] options = [{name = \"CONFIG_X\", reason = \"...\"}]")
    return result


def _boot_plain(outdir: Path, args: list[str], log: Path, timeout: float,
                machine: str = "pc") -> tuple[vm.RunResult, str]:
    """The application with the recorded run's arguments (an image without a shell)."""
    with tempfile.TemporaryDirectory(prefix="ukl-specialize-") as td:
        extra = initramfs.args_archive(args, Path(td))
        res = vm.boot(vm.RunSpec(bzimage=outdir / "bzImage", initrds=[outdir / "initramfs.cpio", extra], log=log,
                                 timeout=timeout, show=False, machine=machine))
    return res, log.read_text(errors="replace")


# ---- reports ----

def write_reports(r: Result, outdir: Path, table: Table) -> None:
    (outdir / "specialize.json").write_text(json.dumps(asdict(r), indent=1) + "\n")
    (outdir / "specialize.md").write_text(markdown(r, table))


def markdown(r: Result, table: Table) -> str:
    lines = [f"# {r.app}: specialized kernel configuration `{r.config}`", "",
             f"Written by `ukl build --config {r.origin} --specialize`. The configuration is "
             "kernel/specialize/core.config, the fragments of "
             f"`{r.origin}`, and the {len(r.options)} options below, which the application's smoke test was seen to "
             f"need when it ran under strace on the general kernel ({r.trace_lines} system calls, "
             f"{len(r.syscalls)} distinct; the trace is specialize-trace.gz, the fragment specialize.config), "
             f"and that its code can need ({len(r.code_syscalls)} system calls its machine code can make, "
             f"{r.code_unresolved} `syscall` sites whose number it computes). Each reason says where it comes "
             f"from: *{RUN}* (the recorded run) or *{CODE}* (the program's code, whether the run executed it or "
             f"not). {len(r.from_code)} options come from the code alone: "
             + (", ".join(f"`{o}`" for o in r.from_code) or "none") + ".", "",
             f"Re-verified: the smoke test {'passes' if r.verified else '**fails**'} on this kernel "
             f"({Path(r.verify_log).name}).", "",
             "## Options chosen for the application", "", "| option | why |", "|---|---|"]
    groups: dict[tuple[str, ...], list[str]] = {}
    for opt, why in r.options.items():      # options added for the same reasons share a row
        groups.setdefault(tuple(why), []).append(opt)
    for why_all, opts in groups.items():
        lines.append(f"| {', '.join(opts)} | " + "<br>".join(_md(x) for x in why_all) + " |")
    if not r.options:
        lines.append("| (none) | the core sufficed |")
    lines += ["", "## The core (kernel/specialize/core.config)", "",
              "What UKL, the console, the status channel, init and its way out of the VM need, whatever the "
              "application: " + ", ".join(f"`{o}`" for o in r.core) + ".", ""]
    if r.machine:
        lines += [f"For `-M {r.machine}` alone (`--machine {r.machine}`): without kernel/specialize/pc.config, "
                  "and the network device without its PCI options; `ukl run` boots it there.", ""]
    else:
        lines += ["For `-M pc` and `-M microvm` (kernel/specialize/pc.config): "
                  + ", ".join(f"`{o}`" for o in r.machine_options) + ".", ""]
    if r.origin_options:
        lines += [f"From `{r.origin}`'s own fragments: " + ", ".join(f"`{o}`" for o in r.origin_options) + ".", ""]
    for o in r.dropped:
        lines += [f"Left to the application from `{r.origin}`: `{o}`: {table.drop.get(o, '')}.", ""]
    if r.left_out:
        lines += ["## Seen, but nothing added", "", *[f"* {_md(x)}" for x in r.left_out], ""]
    if r.unknown:
        lines += ["## Seen, without a precise table entry (check these by hand)", "",
                  *[f"* {_md(x)}" for x in r.unknown], ""]
    lines += ["## System calls seen", "", ", ".join(f"{k} ({v})" for k, v in r.syscalls.items()), ""]
    lines += ["## System calls the program's code can make (sites)", "",
              ", ".join(f"{k} ({v})" for k, v in r.code_syscalls.items()) or "(none found)", ""]
    return "\n".join(lines)


def _md(s: str) -> str:
    return s.replace("|", "\\|")


def copy_report(src: Path, dst: Path) -> None:
    for name in ("specialize.md", "specialize.json", "specialize.config"):
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
