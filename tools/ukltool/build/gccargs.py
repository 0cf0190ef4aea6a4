"""What a gcc command line asks for: its mode, its inputs in order, its
output, and which options are for compiling and which for linking.

A model of gcc's driver that reads nothing but response files (@FILE), so
that ukl-cc can split one command into the steps of a UKL build and tests
can check it against command lines taken from real builds."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.util.errors import UklError

# gcc's language for an input file, by suffix (gcc(1), "-x language")
LANG_BY_SUFFIX = {
    ".c": "c", ".i": "cpp-output", ".h": "c-header",
    ".s": "assembler", ".S": "assembler-with-cpp", ".sx": "assembler-with-cpp",
    ".cc": "c++", ".cp": "c++", ".cxx": "c++", ".cpp": "c++", ".CPP": "c++", ".c++": "c++", ".C": "c++",
    ".ii": "c++-cpp-output", ".hh": "c++-header", ".hpp": "c++-header", ".hxx": "c++-header",
    ".H": "c++-header", ".tcc": "c++-header",
    ".m": "objective-c", ".mi": "objective-c-cpp-output", ".mm": "objective-c++", ".M": "objective-c++",
    ".f": "f77", ".for": "f77", ".f90": "f95", ".f95": "f95", ".go": "go", ".d": "d",
    ".ads": "ada", ".adb": "ada",
}
C_LANGS = ("c", "cpp-output", "c-header", "assembler", "assembler-with-cpp")
CXX_LANGS = ("c++", "c++-cpp-output", "c++-header")

# Options whose value is the next argument when given alone
SEPARATE = {
    "-o", "-x", "-I", "-D", "-U", "-include", "-imacros", "-isystem", "-iquote", "-idirafter", "-iprefix",
    "-iwithprefix", "-iwithprefixbefore", "-isysroot", "-imultilib", "-MF", "-MT", "-MQ", "-L", "-l",
    "-Xlinker", "-Xassembler", "-Xpreprocessor", "-u", "-T", "-z", "-e", "--param", "-aux-info", "-B",
    "-wrapper", "--sysroot", "-dumpbase", "-dumpdir", "-dumpbase-ext", "--entry",
}
# Options that only the link step reads (with or without a value)
LINK_ONLY = {
    "-static", "-static-pie", "-pie", "-no-pie", "-rdynamic", "-s", "-nostartfiles", "-nodefaultlibs",
    "-nostdlib", "-nolibc", "-static-libgcc", "-shared-libgcc", "-static-libstdc++", "-symbolic",
    "-Xlinker", "-u", "-T", "-z", "-e", "--entry", "-shared", "-r",
}
# Options that ask gcc about itself instead of building anything
QUERY = {"--version", "-dumpversion", "-dumpfullversion", "-dumpmachine", "-dumpspecs", "--help",
         "--target-help", "-###"}
QUERY_PREFIXES = ("-print-", "--print-", "--help=")

MODES = ("query", "preprocess", "compile", "assemble", "relocatable", "shared", "link")


@dataclass(frozen=True)
class Input:
    """One input in command-line order: a file, or a library by -l name."""
    kind: str        # "source", "object", "archive", "shared" or "lib"
    value: str       # the path as given, or NAME of -lNAME
    index: int       # its position in Command.args
    lang: str = ""   # a source's language (gcc's -x names)


@dataclass
class Command:
    args: list[str]                     # the command line with response files expanded
    mode: str = "link"                  # one of MODES
    inputs: list[Input] = field(default_factory=list)
    output: str | None = None
    libdirs: list[str] = field(default_factory=list)
    compile_options: list[str] = field(default_factory=list)  # what compiling each source needs
    dropped: set[int] = field(default_factory=set)  # indices of -o, -x and their values

    @property
    def sources(self) -> list[Input]:
        return [i for i in self.inputs if i.kind == "source"]

    def link_args(self, objects: dict[int, str]) -> list[str]:
        """The command line with each source replaced, in place, by its
        object (OBJECTS by source index), without -o or -x."""
        out = []
        for n, a in enumerate(self.args):
            if n in objects:
                out.append(objects[n])
            elif n not in self.dropped:
                out.append(a)
        return out


def expand_response_files(args: list[str], depth: int = 0) -> list[str]:
    """gcc's @FILE: the file's whitespace-separated, quoted words in place
    (an unreadable file stays a literal argument, as in gcc)."""
    out: list[str] = []
    for a in args:
        if a.startswith("@") and len(a) > 1:
            path = Path(a[1:])
            try:
                text = path.read_text()
            except OSError:
                out.append(a)
                continue
            if depth > 10:
                raise UklError(f"response file {path} includes itself", "break the @FILE cycle")
            try:
                words = shlex.split(text, comments=False, posix=True)
            except ValueError as e:
                raise UklError(f"response file {path} cannot be read: {e}", "check its quoting") from None
            out += expand_response_files(words, depth + 1)
        else:
            out.append(a)
    return out


def input_kind(path: str) -> tuple[str, str]:
    """(kind, lang) of a file input by its name, as gcc decides it."""
    suffix = Path(path).suffix
    if suffix in LANG_BY_SUFFIX:
        return "source", LANG_BY_SUFFIX[suffix]
    name = Path(path).name
    if suffix == ".a":
        return "archive", ""
    if ".so" in name and (name.endswith(".so") or ".so." in name):
        return "shared", ""
    return "object", ""


# Options whose value may also be joined to them (-lm, -I/usr/include)
JOINED = ("-o", "-x", "-I", "-D", "-U", "-L", "-l", "-MF", "-MT", "-MQ", "-B", "-T", "-u", "-z", "-e")
NOT_JOINED = {"-undef"}


def _split(a: str, nxt: str | None) -> tuple[str, str | None, bool]:
    """(option, value, uses the next argument) for one argument."""
    if a in SEPARATE:
        return a, nxt, True
    if a not in NOT_JOINED:
        for opt in JOINED:
            if a.startswith(opt) and len(a) > len(opt):
                return opt, a[len(opt):], False
    return a, None, False


def parse(argv: list[str]) -> Command:
    """Parse a gcc command line (see Command)."""
    args = expand_response_files(argv)
    cmd = Command(args=args)
    lang = ""
    flags: set[str] = set()
    query = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "":
            raise UklError("an empty argument is not an input file", "check the command line's quoting")
        if a == "-" or not a.startswith("-"):
            kind, guessed = ("source", lang) if lang or a == "-" else input_kind(a)
            cmd.inputs.append(Input(kind, a, i, guessed))
            i += 1
            continue
        nxt = args[i + 1] if i + 1 < len(args) else None
        opt, val, takes_next = _split(a, nxt)
        if takes_next and nxt is None:
            raise UklError(f"missing argument to '{a}'", "gcc expects a value after it")
        width = 2 if takes_next else 1
        if opt == "-o":
            cmd.output = val
            cmd.dropped.update(range(i, i + width))
        elif opt == "-x":
            lang = "" if val == "none" else (val or "")
            cmd.dropped.update(range(i, i + width))
        elif opt == "-l":
            cmd.inputs.append(Input("lib", val or "", i))
        elif opt == "-L":
            cmd.libdirs.append(val or "")
        elif a.startswith("-Wl,") or opt in LINK_ONLY:
            flags.add(opt)
        elif a in QUERY or a.startswith(QUERY_PREFIXES):
            query = True
        else:
            flags.add(opt)
            cmd.compile_options += args[i:i + width]
        i += width
    if "-E" in flags or "-M" in flags or "-MM" in flags:
        cmd.mode = "preprocess"
    elif "-S" in flags or "-fsyntax-only" in flags:
        cmd.mode = "compile"
    elif "-c" in flags:
        cmd.mode = "assemble"
    elif query or ("-v" in flags and not cmd.inputs):
        cmd.mode = "query"
    elif "-r" in flags:
        cmd.mode = "relocatable"
    elif "-shared" in flags:
        cmd.mode = "shared"
    if query and cmd.mode != "preprocess":
        cmd.mode = "query"
    return cmd
