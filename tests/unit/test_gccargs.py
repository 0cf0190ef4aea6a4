"""ukl-cc's model of gcc command lines, on command lines taken from real
builds (autoconf conftests, libtool, Redis, Nginx, jemalloc, Memcached)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ukltool.build import cc, gccargs
from ukltool.util.errors import UklError


def kinds(cmd: gccargs.Command) -> list[tuple[str, str]]:
    return [(i.kind, i.value) for i in cmd.inputs]


# (command line, mode, output, inputs in order)
MATRIX = [
    # autoconf: compiler works, object suffix, library checks, one-step links
    ("-o conftest -g -O2 conftest.c", "link", "conftest", [("source", "conftest.c")]),
    ("-c -g -O2 conftest.c", "assemble", None, [("source", "conftest.c")]),
    ("-o conftest -g -O2 conftest.c -levent", "link", "conftest",
     [("source", "conftest.c"), ("lib", "event")]),
    ("-o conftest -g -O2 -Wl,-z,relro conftest.c -lcrypt -lm", "link", "conftest",
     [("source", "conftest.c"), ("lib", "crypt"), ("lib", "m")]),
    ("-E conftest.c", "preprocess", None, [("source", "conftest.c")]),
    ("-V", "link", None, []),
    ("-qversion", "link", None, []),
    ("--version", "query", None, []),
    ("-v", "query", None, []),
    ("-dumpversion", "query", None, []),
    ("-print-multi-os-directory", "query", None, []),
    ("-print-file-name=libgcc.a", "query", None, []),
    ("-print-search-dirs", "query", None, []),
    # jemalloc: -pipe, dependency files, archives by path
    ("-std=gnu11 -Wall -pipe -g3 -fvisibility=hidden -O3 -funroll-loops -c -D_GNU_SOURCE -D_REENTRANT "
     "-Iinclude -o src/jemalloc.o src/jemalloc.c", "assemble", "src/jemalloc.o", [("source", "src/jemalloc.c")]),
    ("-MM -MT src/arena.sym.o -o src/arena.d src/arena.c", "preprocess", "src/arena.d",
     [("source", "src/arena.c")]),
    ("-pipe -o conftest conftest.c", "link", "conftest", [("source", "conftest.c")]),
    # Redis: objects, then archives by path, then libraries
    ("-g -ggdb -rdynamic -o redis-server adlist.o quicklist.o ../deps/hiredis/libhiredis.a "
     "../deps/lua/src/liblua.a ../deps/jemalloc/lib/libjemalloc.a -lm -ldl -pthread -lrt", "link", "redis-server",
     [("object", "adlist.o"), ("object", "quicklist.o"), ("archive", "../deps/hiredis/libhiredis.a"),
      ("archive", "../deps/lua/src/liblua.a"), ("archive", "../deps/jemalloc/lib/libjemalloc.a"),
      ("lib", "m"), ("lib", "dl"), ("lib", "rt")]),
    ("-MMD -O2 -g -c server.c -o server.o -I../deps/hiredis", "assemble", "server.o", [("source", "server.c")]),
    # Nginx: objs/ paths, -Wl options, libraries last
    ("-o objs/nginx objs/src/core/nginx.o objs/ngx_modules.o -Wl,-E -lcrypt -lpcre2-8 -lz", "link", "objs/nginx",
     [("object", "objs/src/core/nginx.o"), ("object", "objs/ngx_modules.o"), ("lib", "crypt"),
      ("lib", "pcre2-8"), ("lib", "z")]),
    # libtool and memcached: -x, assembler, joined -l/-L, .lo objects
    ("-x c -c conf.in -o conf.o", "assemble", "conf.o", [("source", "conf.in")]),
    ("-x assembler-with-cpp -c start.S -x none helper.c", "assemble", None,
     [("source", "start.S"), ("source", "helper.c")]),
    ("-o memcached memcached-memcached.o -L/opt/ev/lib -levent", "link", "memcached",
     [("object", "memcached-memcached.o"), ("lib", "event")]),
    ("-shared -fPIC -o libfoo.so foo.lo", "shared", "libfoo.so", [("object", "foo.lo")]),
    ("-r -o all.o a.o b.o", "relocatable", "all.o", [("object", "a.o"), ("object", "b.o")]),
    ("-S -o - x.c", "compile", "-", [("source", "x.c")]),
    ("-fsyntax-only x.c", "compile", None, [("source", "x.c")]),
    ("-undef -E x.c", "preprocess", None, [("source", "x.c")]),
    ("prog.cpp -o prog -lstdc++", "link", "prog", [("source", "prog.cpp"), ("lib", "stdc++")]),
    ("main.o /usr/lib/x86_64-linux-gnu/libevent.so.2.1.7", "link", None,
     [("object", "main.o"), ("shared", "/usr/lib/x86_64-linux-gnu/libevent.so.2.1.7")]),
]


@pytest.mark.parametrize("line,mode,output,inputs", MATRIX, ids=[m[0][:40] for m in MATRIX])
def test_gcc_command_lines_from_real_builds(line, mode, output, inputs):
    cmd = gccargs.parse(line.split())
    assert (cmd.mode, cmd.output, kinds(cmd)) == (mode, output, inputs)


def test_languages_follow_suffixes_and_x():
    cmd = gccargs.parse("a.c b.S c.s d.i e.cc -x c f.txt g -x none h.cpp".split())
    assert [(i.value, i.lang) for i in cmd.sources] == [
        ("a.c", "c"), ("b.S", "assembler-with-cpp"), ("c.s", "assembler"), ("d.i", "cpp-output"),
        ("e.cc", "c++"), ("f.txt", "c"), ("g", "c"), ("h.cpp", "c++")]


def test_compile_options_exclude_inputs_outputs_and_link_options():
    cmd = gccargs.parse("-O2 -o prog main.c -Iinc -DX=1 -L lib -lfoo -Wl,--as-needed -pthread -static "
                        "-MD -MF main.d -x c -T script.ld -u sym".split())
    assert cmd.compile_options == ["-O2", "-Iinc", "-DX=1", "-pthread", "-MD", "-MF", "main.d"]
    assert cmd.libdirs == ["lib"]


def test_the_link_keeps_gcc_order_with_sources_replaced_in_place():
    """Autoconf's `cc conftest.c -lfoo`: the object must come before -lfoo."""
    cmd = gccargs.parse("-g -o conftest conftest.c -levent -x c other.c".split())
    objs = {s.index: f"/tmp/{s.value}.o" for s in cmd.sources}
    assert cmd.link_args(objs) == ["-g", "/tmp/conftest.c.o", "-levent", "/tmp/other.c.o"]


def test_response_files_are_expanded(tmp_path: Path):
    inner = tmp_path / "inner.rsp"
    inner.write_text("-lm\n")
    outer = tmp_path / "outer.rsp"
    outer.write_text(f'-o "my prog" a\\ b.o \'c.o\' @{inner}\n')
    cmd = gccargs.parse([f"@{outer}", "@/nonexistent.rsp"])
    assert cmd.output == "my prog"
    assert kinds(cmd) == [("object", "a b.o"), ("object", "c.o"), ("lib", "m"), ("object", "@/nonexistent.rsp")]
    loop = tmp_path / "loop.rsp"
    loop.write_text(f"@{loop}\n")
    with pytest.raises(UklError, match="includes itself"):
        gccargs.parse([f"@{loop}"])


def test_a_missing_option_value_is_a_clear_error():
    with pytest.raises(UklError, match="missing argument to '-o'"):
        gccargs.parse(["a.c", "-o"])


@pytest.mark.parametrize("line,message", [
    ("-c prog.f90", "prog.f90: 'f95' is not supported"),
    ("-c prog.m", "prog.m: 'objective-c' is not supported"),
    ("-shared -o libx.so x.c", "shared libraries cannot be linked"),
    ("-o p main.o /usr/lib/libz.so", "/usr/lib/libz.so: a shared library cannot be linked"),
])
def test_refusals_name_the_input_and_the_reason(line, message):
    bad = cc.refusal(gccargs.parse(line.split()))
    assert bad is not None and message in bad.message and bad.hint


def test_c_cxx_and_assembly_are_not_refused():
    for line in ("-c x.c", "-c y.S", "-o p x.c y.s z.o liba.a -lm", "-E x.c", "-r -o all.o a.o",
                 "-c x.cpp", "-x c++ -c x.c", "-o p a.cc b.o -lstdc++"):
        assert cc.refusal(gccargs.parse(line.split())) is None
