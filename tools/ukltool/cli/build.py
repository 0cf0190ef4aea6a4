"""`ukl build` and `ukl kernel build`'s input kinds: an application into a bootable directory."""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from pathlib import Path

from ukltool.apps import recipes, specialize, target
from ukltool.build import image, project
from ukltool.cli.common import add_command, cflags_arg, file_spec_arg, kconfig_arg, safe_list, statuses_arg, words_arg
from ukltool.linux import kernel
from ukltool.util import ui
from ukltool.util.errors import UklError


def build_parser(sub: argparse._SubParsersAction) -> None:
    b = add_command(sub, "build", "build an application and a kernel into a bootable directory",
                    "INPUT is one of three kinds, and `ukl build` says which it took: C source files (one program); "
                    "one project directory (CMakeLists.txt, a configure script or a Makefile, built with the UKL "
                    "compilers); or the NAME of a recipe in apps/ (Debian's source package, pinned, built as the "
                    "recipe says). An option that does not apply to the kind of input is refused. The result in "
                    "OUTDIR is bootable with `ukl run` (bzImage, initramfs, manifest). --config linux builds an "
                    "ordinary static binary on stock Linux (the baseline).",
                    ("ukl build examples/hello/hello.c --config base -o out/hello",
                     "ukl build path/to/project --config base --make-args 'NO_TLS=1' -o out/prog",
                     "ukl build redis --config base --specialize -o out/redis",
                     "ukl build examples/hello/hello.c --config base --perf -o out/hello-perf"), listed=False)
    b.add_argument("sources", nargs="+", type=Path, metavar="INPUT",
                   help="C source files, a project directory, or the NAME of a recipe in apps/ "
                   f"({safe_list(recipes.names)})")
    b.add_argument("--config", default="linux", metavar="NAME",
                   help=f"kernel configuration (one of: {safe_list(kernel.config_names)}; default linux)")
    b.add_argument("-o", "--output", type=Path, default=Path("out"), metavar="OUTDIR",
                   help="output directory (default: out)")
    b.add_argument("--userspace", action="store_true",
                   help="ship a small Linux userspace (busybox: sh, ps, kill, top, ...) in the image beside the "
                   "application (`ukl run --sh` and --shell work without it: they load a test layer for that "
                   "boot alone)")
    b.add_argument("--perf", action="store_true",
                   help="add Debian's perf with its shared libraries (about 33 MB) to the userspace; "
                   "implies --userspace")
    b.add_argument("--compression", metavar="NAME",
                   help="compress the kernel with NAME instead of the configuration's LZ4 (one of: "
                   f"{safe_list(kernel.compressions)}; xz: the smallest image, the slowest decompression; "
                   "docs/results/results-boot-compression.md)")
    b.add_argument("--optimize", metavar="NAME",
                   help="compile the kernel for NAME instead of the configurations' -O2 (one of: "
                   f"{safe_list(kernel.optimizations)}: -Os; its own build directory; "
                   "docs/results/results-boot-optimize.md)")
    b.add_argument("--file", action="append", type=file_spec_arg, default=[], metavar="SRC:DEST",
                   help="add the host file SRC to the image as DEST (an absolute path; parents are created; "
                   "replaces what the image has there, e.g. /etc/passwd)")
    b.add_argument("--overlay", action="append", type=Path, default=[], metavar="DIR",
                   help="add the tree under DIR to the image at / (files, directories, symbolic links, "
                   "with their modes)")
    b.add_argument("--specialize", action="store_true",
                   help="a kernel cut to this application: record its smoke test (a file or directory: its default "
                   "run) under strace on the general kernel, keep only the kernel options what it used needs "
                   "(kernel/specialize/), build for that configuration (special-HASH, shared by applications with "
                   "the same needs), re-run the smoke test on it, and say why each option is there in "
                   "OUTDIR/specialize.md")
    b.add_argument("--machine", choices=specialize.MACHINES, default=None,
                   help="--specialize: the one QEMU machine the kernel is for (default: pc and microvm). microvm "
                   "leaves PCI out where no device of the application's needs it: a smaller kernel that -M pc's "
                   "ACPI tables do not suit, so `ukl run` boots it under -M microvm")
    g = b.add_argument_group("C files and project directories (not recipes)")
    g.add_argument("--name", help="application name (default: the first file's stem, or the project's program)")
    g.add_argument("--record-args", type=shlex.split, default=None, metavar="ARGS",
                   help="--specialize: the arguments of the run to record (one string, split as a shell does; "
                   "default: the image's own arguments)")
    g.add_argument("--record-status", type=statuses_arg, default=None, metavar="N[,N...]",
                   help="--specialize: the exit statuses the recorded run may end with (128+SIG for a signal; "
                   "default 0)")
    g.add_argument("--kconfig", action="append", type=kconfig_arg, default=[], metavar="OPTION[,OPTION...]:WHY",
                   help="--specialize: kernel options to add whatever the recording shows, and why "
                   "(`nic` for the network device), as a recipe's [specialize] does")
    g = b.add_argument_group("C files only")
    g.add_argument("--freestanding", action="store_true",
                   help="no C library: the program brings its own _start and system call shim")
    g.add_argument("--cflags", type=cflags_arg, default=[], metavar="FLAGS",
                   help="extra compiler flags for C files, the same for every configuration "
                   "(for example --cflags=-fno-omit-frame-pointer for perf call chains)")
    g = b.add_argument_group("project directories and recipes (not C files)")
    g.add_argument("--configure-args", type=words_arg, default=[], metavar="ARGS",
                   help="arguments for the project's configure step (./configure, or cmake), shell-quoted")
    g.add_argument("--make-args", type=words_arg, default=[], metavar="ARGS",
                   help="variables and targets for make (e.g. 'MALLOC=jemalloc BUILD_TLS=no'), shell-quoted")
    g = b.add_argument_group("project directories only")
    g.add_argument("--build-system", choices=project.SYSTEMS, default="auto",
                   help="how to build a directory (default auto: CMakeLists.txt, an autoconf or other "
                   "configure script, or a Makefile)")
    b.set_defaults(func=cmd_build)


# The options of `ukl build` that apply to some kinds of input only.
BUILD_KINDS = {"files": "C files", "directory": "a project directory", "recipe": "a recipe"}


BUILD_APPLIES = {
    "--name": ("files", "directory"),
    "--freestanding": ("files",),
    "--cflags": ("files",),
    "--configure-args": ("directory", "recipe"),
    "--make-args": ("directory", "recipe"),
    "--build-system": ("directory",),
    "--record-args": ("files", "directory"),
    "--record-status": ("files", "directory"),
    "--kconfig": ("files", "directory"),
}


def build_input(srcs: list[Path]) -> tuple[str, str | None]:
    """The kind of `ukl build`'s INPUT ("files", "directory" or "recipe"),
    and the recipe's name."""
    recipe = _recipe_name(srcs)
    if recipe is not None:
        return "recipe", recipe
    dirs = [s for s in srcs if s.is_dir()]
    if dirs and len(srcs) > 1:
        raise UklError(f"{dirs[0]} is a directory: a project directory is built on its own, not with other inputs",
                       "name one project directory, or C files")
    return ("directory" if dirs else "files"), None


def check_build_options(a: argparse.Namespace, kind: str) -> None:
    """Refuse the options that do not apply to KIND of input."""
    given = {"--name": a.name is not None, "--freestanding": a.freestanding, "--cflags": bool(a.cflags),
             "--configure-args": bool(a.configure_args), "--make-args": bool(a.make_args),
             "--build-system": a.build_system != "auto", "--record-args": a.record_args is not None,
             "--record-status": a.record_status is not None, "--kconfig": bool(a.kconfig)}
    bad = [o for o, g in given.items() if g and kind not in BUILD_APPLIES[o]]
    if not bad:
        return
    where = "; ".join(f"{o} applies to " + " and ".join(BUILD_KINDS[k] for k in BUILD_APPLIES[o]) for o in bad)
    hint = {"recipe": "a recipe's build and name are in apps/NAME/recipe.toml; --configure-args and --make-args "
                      "add to its build",
            "directory": "pass flags to the project's own build, e.g. --make-args 'CFLAGS=-O1'",
            "files": "name a project directory to build it with its configure script, CMake or Makefile"}[kind]
    raise UklError(f"{' and '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to "
                   f"{BUILD_KINDS[kind]} ({where})", hint)


def cmd_build(a: argparse.Namespace) -> int:
    kind, recipe = build_input(a.sources)
    check_build_options(a, kind)
    image.check_app_name(a.name)
    given = [o for o, v in (("--record-args", a.record_args is not None),
                            ("--record-status", a.record_status is not None), ("--kconfig", bool(a.kconfig)),
                            ("--machine", a.machine is not None)) if v]
    if given and not a.specialize:
        verb = "apply" if len(given) > 1 else "applies"
        raise UklError(f"{' and '.join(given)} {verb} to --specialize", "add --specialize, or leave them out")
    if a.compression is not None:
        kernel.compression_fragment(a.compression)  # before any work
    if a.optimize is not None:
        kernel.optimize_fragment(a.optimize)
    kernel.fragments(a.config)  # validates the name before any work
    common = {"userspace": a.userspace, "perf": a.perf, "files": list(a.file), "overlays": list(a.overlay),
              "configure_args": list(a.configure_args), "make_args": list(a.make_args),
              "compression": a.compression, "optimize": a.optimize}
    if recipe is not None:
        app = dataclasses.replace(target.recipe_target(recipe), **common)
        ui.info(f"building the recipe '{recipe}' (apps/{recipe}/recipe.toml) for '{a.config}'")
    else:
        app = target.AppTarget(str(a.sources[0]), sources=list(a.sources), name=a.name, freestanding=a.freestanding,
                               cflags=list(a.cflags), build_system=a.build_system, **common)
        ui.info(f"building the project directory {a.sources[0]}" if kind == "directory" else
                f"building {len(a.sources)} C file{'s' if len(a.sources) > 1 else ''}: "
                + ", ".join(str(s) for s in a.sources))
    if a.specialize:
        res = specialize.build(app, a.config, a.output,
                               specialize.Request(a.record_args, a.record_status or [0],
                                                  [(o, why) for opts, why in a.kconfig for o in opts], a.machine))
        ui.info(f"built '{res.app}' for the specialized configuration '{res.config}' ({len(res.options)} options "
                f"for the application beside the core; why: {a.output / 'specialize.md'}) in {a.output}")
        return 0
    man = image.build(app.spec(a.config, a.output))
    ui.info(f"built '{man.app}' for configuration '{man.config}' (kernel {man.kernel_release}) in {a.output}")
    return 0


def _recipe_name(srcs: list[Path]) -> str | None:
    """`ukl build NAME` for apps/NAME/recipe.toml (a path that exists wins)."""
    if len(srcs) != 1 or srcs[0].exists() or "/" in str(srcs[0]) or srcs[0].suffix:
        return None
    name = str(srcs[0])
    if name not in recipes.names():
        raise UklError(f"{name} is neither a file, a directory nor a recipe",
                       "recipes (apps/): " + ", ".join(recipes.names()))
    return name
