"""`ukl build --specialize` without a VM: the strace parser, the table
(kernel/specialize/table.toml) and the choice of options, the fragment and
its name, and the recipe key [specialize]."""

from __future__ import annotations

import base64
import gzip
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ukltool.apps import recipes, specialize
from ukltool.build import initramfs
from ukltool.linux import binsyscalls, kernel
from ukltool.util.errors import UklError
from ukltool.util.paths import CONFIG_DIR

# strace -f -qq -s 16 output as the recording boot writes it: a shell that
# runs the application (exec), a child of a clone whose result comes after
# the child's first line, calls interrupted and resumed, failures.
TRACE = """\
40    execve("/bin/sh", [...], 0x7ffd /* 7 vars */) = 0
40    set_robust_list(0x1ff576a0, 24)   = 0
40    readlink("/proc/self/exe", "/bin/busybox", 4096) = 12
40    clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD <unfinished ...>
41    execve("/bin/redis-server", [...], 0x1ff58b28 /* 7 vars */ <unfinished ...>
40    <... clone resumed>, child_tidptr=0x1ff57690) = 41
41    <... execve resumed>)             = 0
40    wait4(-1,  <unfinished ...>
41    socket(AF_INET6, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) = -1 EAFNOSUPPORT (Address family not supported)
41    socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) = 5
41    epoll_create(1024)                = 6
41    io_uring_setup(8, 0x7ffd)         = -1 ENOSYS (Function not implemented)
41    syscall_0x10003(0, 0, 0, 0, 0, 0) = -1 ENOSYS (Function not implemented)
41    openat(AT_FDCWD, "/sys/devices/system/cpu/online", O_RDONLY|O_CLOEXEC) = 7
41    openat(AT_FDCWD, "/proc/sys/net/core/somaxconn", O_RDONLY) = 8
41    openat(AT_FDCWD, "/etc/passwd", O_RDONLY|O_CLOEXEC) = 9
41    openat(AT_FDCWD, "/dev/null", O_RDWR) = 10
41    openat(AT_FDCWD, "/dev/weird0", O_RDWR) = -1 ENOENT (No such file or directory)
41    fcntl(9, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=0, l_len=0}) = 0
41    ioctl(5, SIOCGIFCONF, {ifc_len=0, ifc_buf=NULL}) = 0
41    mount("none", "/mnt", "tmpfs", 0, NULL) = 0
41    connect(5, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("10.0.2.2")}, 16) = 0
41    connect(5, {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")}, 16) = 0
41    write(1, "hello world\\n", 12)               = 12
41    --- SIGTERM {si_signo=SIGTERM, si_code=SI_USER, si_pid=40, si_uid=0} ---
41    exit_group(0)                     = ?
40    <... wait4 resumed>[{WIFEXITED(s) && WEXITSTATUS(s) == 0}], 0, NULL) = 41
"""


@pytest.fixture(scope="module")
def table():
    return specialize.load_table()


def test_the_parser_joins_resumed_calls_and_names_each_process():
    u = specialize.parse_trace(TRACE)
    assert u.syscalls["clone"].count == 1 and u.syscalls["wait4"].count == 1 and u.syscalls["execve"].count == 2
    assert u.syscalls["epoll_create"].programs == {"redis-server"}
    assert u.syscalls["set_robust_list"].programs == {"sh"}
    assert u.families["AF_INET6"].only_failed_with("EAFNOSUPPORT")
    assert not u.families["AF_INET"].errors
    assert u.syscalls["io_uring_setup"].only_failed_with("ENOSYS")
    assert {"/proc/self/exe", "/sys/devices/system/cpu/online", "/dev/null", "/etc/passwd"} <= set(u.paths)
    assert set(u.filesystems) == {"tmpfs"} and set(u.ioctls) == {"SIOCGIFCONF"}
    assert set(u.addresses) == {"10.0.2.2"}      # loopback is not the network device's
    assert "fcntl F_SETLK" in u.arguments
    assert u.lines == 23


def test_arguments_are_split_at_the_top_level_only():
    assert specialize.split_args('3, {a=1, b=[2, 3]}, "x, y", f(1, 2)') == ["3", "{a=1, b=[2, 3]}", '"x, y"', "f(1, 2)"]


def test_lines_that_are_not_calls_are_ignored():
    u = specialize.parse_trace("garbage\n\n12 +++ exited with 0 +++\n12 <... read resumed>) = 1\nnot 12 a line\n")
    assert u.lines == 0 and not u.syscalls


def test_choice_names_the_call_and_the_program_and_leaves_out_what_linux_lacked_too(table):
    sel = specialize.choose(specialize.parse_trace(TRACE), table)
    opts = sel.options
    assert "CONFIG_EPOLL" in opts and "epoll_create()" in opts["CONFIG_EPOLL"].reasons[0]
    assert "redis-server" in opts["CONFIG_EPOLL"].reasons[0]
    assert {"CONFIG_NET", "CONFIG_INET", "CONFIG_SYSFS", "CONFIG_PROC_FS", "CONFIG_PROC_SYSCTL", "CONFIG_FUTEX",
            "CONFIG_FILE_LOCKING", "CONFIG_TMPFS", "CONFIG_SHMEM"} <= set(opts)
    # io_uring and IPv6 failed on the general kernel: nothing added
    assert "CONFIG_IO_URING" not in opts and "CONFIG_IPV6" not in opts
    assert any("io_uring_setup" in x for x in sel.left_out) and any("AF_INET6" in x for x in sel.left_out)
    # UKL's remote call fails with ENOSYS on linux by design: still needed
    assert {"CONFIG_UKL_REMOTE", "CONFIG_PCI"} <= set(opts)
    # a connection to a non-loopback address needs the network device
    assert "CONFIG_VIRTIO_NET" in opts and "10.0.2.2" in opts["CONFIG_VIRTIO_NET"].reasons[0]
    # /dev/null is always there; an unknown device is listed for a person to check
    assert any("/dev/weird0" in x for x in sel.unknown)


def test_the_general_configuration_bounds_the_choice(table):
    general = {"CONFIG_NET": "y", "CONFIG_INET": "y", "CONFIG_EPOLL": "y"}
    sel = specialize.choose(specialize.parse_trace(TRACE), table, general)
    assert "CONFIG_SYSFS" not in sel.options and "CONFIG_EPOLL" in sel.options
    assert any("CONFIG_SYSFS is not in the general kernel" in x for x in sel.left_out)
    assert "CONFIG_UKL_REMOTE" in sel.options   # UKL's calls: what the linux recording cannot have


def test_recipe_and_network_reasons_add_options(table):
    sel = specialize.choose(specialize.Usage(), table, {}, [("CONFIG_IPV6", "clients over IPv6")],
                            ["the recipe forwards port(s) 6379 from the host"])
    assert sel.options["CONFIG_IPV6"].reasons == ["asked for: clients over IPv6"]
    assert set(table.nic.options) <= set(sel.options)
    assert not specialize.choose(specialize.Usage(), table).options


def test_the_fragment_names_no_application_and_its_name_is_its_content(table):
    sel = specialize.choose(specialize.parse_trace(TRACE), table)
    text = specialize.fragment("base", sel, table)
    again = specialize.fragment("base", specialize.choose(specialize.parse_trace(TRACE), table), table)
    assert text == again and specialize.config_name(text) == specialize.config_name(again)
    assert specialize.config_name(text).startswith(kernel.SPECIAL_PREFIX)
    assert "redis" not in text and "ukl-extends" not in text
    wanted = kernel.parse_fragment(text)
    assert wanted["CONFIG_UNIKERNEL_LINUX"] == "y" and wanted["CONFIG_EXPERT"] == "y"
    assert wanted["CONFIG_EPOLL"] == "y" and "CONFIG_MAGIC_SYSRQ" not in wanted
    # base.config's remote calls need PCI: left to the application, here added back by its call
    assert wanted["CONFIG_UKL_REMOTE"] == "y"
    plain = specialize.fragment("base", specialize.Selection(), table)
    assert "CONFIG_UKL_REMOTE" not in kernel.parse_fragment(plain)
    assert specialize.config_name(plain) != specialize.config_name(text)


def test_a_kernel_for_microvm_alone_leaves_pci_to_the_devices_on_it(table):
    any_machine = specialize.fragment("base", specialize.Selection(), table)
    microvm = specialize.fragment("base", specialize.Selection(), table, "microvm")
    assert kernel.parse_fragment(any_machine)["CONFIG_PCI"] == "y"
    assert "CONFIG_PCI" not in kernel.parse_fragment(microvm)
    assert kernel.parse_fragment(microvm)["CONFIG_SERIAL_8250_PNP"] == "y"  # the console's interrupts
    assert specialize.config_name(any_machine) != specialize.config_name(microvm)
    # a device on PCI brings it back (the remote-call ring here)
    sel = specialize.choose(specialize.parse_trace(TRACE), table)
    assert kernel.parse_fragment(specialize.fragment("base", sel, table, "microvm"))["CONFIG_PCI"] == "y"
    with pytest.raises(UklError, match="--machine pc"):
        specialize.fragment("base", specialize.Selection(), table, "pc")
    # the network device: virtio-mmio alone under microvm, PCI too for any machine
    served = specialize.Usage()
    mv = specialize.choose(served, table, None, [("nic", "a server")], machine="microvm")
    assert {"CONFIG_VIRTIO_MMIO", "CONFIG_VIRTIO_NET", "CONFIG_IP_PNP"} <= set(mv.options)
    assert not {"CONFIG_PCI", "CONFIG_PCI_MSI", "CONFIG_VIRTIO_PCI"} & set(mv.options)
    anywhere = specialize.choose(served, table, None, [("nic", "a server")])
    assert {"CONFIG_PCI", "CONFIG_VIRTIO_PCI"} <= set(anywhere.options)


def test_every_option_of_the_general_base_is_core_an_entry_or_explained(table):
    core = set(kernel.parse_fragment(specialize.CORE_FILE.read_text()))
    core |= set(kernel.parse_fragment(specialize.PC_FILE.read_text()))
    known = core | table.all_options() | set(table.vm_base_only)
    missing = sorted(set(kernel.parse_fragment((CONFIG_DIR / kernel.BASE_FRAGMENT).read_text())) - known)
    assert not missing, f"classify these in kernel/specialize/ (core.config, table.toml or [vm_base_only]): {missing}"


def test_the_table_maps_every_x86_64_call_linux_can_compile_out(table):
    # COND_SYSCALL (kernel/sys_ni.c) and SYS_NI (posix-stubs.c) of Linux
    # 6.1 that are x86-64 system calls and built by an option
    conditional = """accept accept4 acct add_key bind bpf capget capset connect epoll_create epoll_create1
        epoll_ctl epoll_pwait epoll_pwait2 epoll_wait eventfd eventfd2 fadvise64 fanotify_init fanotify_mark flock
        futex futex_waitv get_mempolicy get_robust_list getgroups getpeername getresgid getresuid getsockname
        getsockopt inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents
        io_pgetevents io_setup io_submit io_uring_enter io_uring_register io_uring_setup ioprio_get ioprio_set kcmp
        kexec_file_load kexec_load keyctl landlock_add_rule landlock_create_ruleset landlock_restrict_self listen
        madvise mbind membarrier memfd_create memfd_secret migrate_pages modify_ldt move_pages mq_getsetattr
        mq_notify mq_open mq_timedreceive mq_timedsend mq_unlink msgctl msgget msgrcv msgsnd name_to_handle_at
        open_by_handle_at perf_event_open process_madvise process_vm_readv process_vm_writev quotactl quotactl_fd
        recvfrom recvmmsg recvmsg request_key rseq seccomp semctl semget semop semtimedop sendmmsg sendmsg sendto
        set_mempolicy set_mempolicy_home_node set_robust_list setfsgid setfsuid setgid setgroups setregid setresgid
        setresuid setreuid setsockopt setuid shmat shmctl shmdt shmget shutdown signalfd signalfd4 socket socketpair
        swapoff swapon sysfs syslog timerfd_create timerfd_gettime timerfd_settime uselib userfaultfd
        timer_create timer_gettime timer_getoverrun timer_settime timer_delete clock_adjtime getitimer setitimer
        alarm""".split()
    assert not [c for c in conditional if c not in table.sections["syscalls"]]


def test_a_broken_table_is_an_error_that_names_the_entry(tmp_path):
    bad = tmp_path / "t.toml"
    bad.write_text('[syscalls]\nfutex = { options = ["FUTEX"], in = "kernel/futex/" }\n[nic]\noptions = []\nin = "x"\n')
    with pytest.raises(UklError, match=r"\[syscalls\] futex: options must be"):
        specialize.load_table(bad)
    bad.write_text('[syscalls]\nfutex = { options = [], in = "k", colour = 1 }\n[nic]\noptions = []\nin = "x"\n')
    with pytest.raises(UklError, match="unknown key"):
        specialize.load_table(bad)
    bad.write_text("[nic]\noptions = []\nin = 'x'\n[extra]\n")
    with pytest.raises(UklError, match="unknown section"):
        specialize.load_table(bad)
    bad.write_text("not toml [")
    with pytest.raises(UklError, match="cannot read"):
        specialize.load_table(bad)


def test_the_trace_comes_back_from_the_console():
    body = base64.encodebytes(gzip.compress(TRACE.encode())).decode()
    console = ("noise\r\n" + specialize.TRACE_BEGIN + "\r\n" + body.replace("\n", "\r\n")
               + "[    1.234567] a kernel line\r\n" + specialize.TRACE_END + "\r\n")
    assert specialize.extract_trace(console) == TRACE
    with pytest.raises(UklError, match="no trace"):
        specialize.extract_trace("nothing here")
    with pytest.raises(UklError, match="damaged"):
        specialize.extract_trace(f"{specialize.TRACE_BEGIN}\nAAAA\n{specialize.TRACE_END}\n")


def test_a_specialized_name_must_exist_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("UKL_CACHE", str(tmp_path))
    with pytest.raises(UklError, match="no specialized configuration 'special-0123456789ab'"):
        kernel.fragments("special-0123456789ab")
    with pytest.raises(UklError, match="no specialized configuration"):
        kernel.fragments("special-../../x")
    name = specialize.store("CONFIG_EXPERT=y\n")
    assert kernel.fragments(name) == [kernel.special_fragment(name)] and not kernel.is_ukl(name)


def test_recipe_specialize_options_are_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    (tmp_path / "x").mkdir()
    head = ('schema = 1\ndescription = "x"\n[source]\npackage = "x"\nversion = "1"\ndsc_sha256 = "0"\n'
            '[build]\nprogram = "x"\n')
    (tmp_path / "x" / "recipe.toml").write_text(
        head + '[specialize]\noptions = [{ name = "CONFIG_IPV6", reason = "clients over IPv6" }]\n')
    assert recipes.load("x").specialize == [("CONFIG_IPV6", "clients over IPv6")]
    for body, msg in (('options = [{ name = "IPV6", reason = "r" }]', "not a kernel option name"),
                      ('options = [{ name = "CONFIG_IPV6", reason = " " }]', "needs a reason"),
                      ('options = [{ name = "CONFIG_IPV6" }]', "lacks 'reason'"),
                      ('options = ["CONFIG_IPV6"]', "must be a table"),
                      ('options = []\ncolour = 1', "unknown key")):
        (tmp_path / "x" / "recipe.toml").write_text(head + "[specialize]\n" + body + "\n")
        with pytest.raises(UklError, match=msg):
            recipes.load("x")


def test_the_report_says_why_each_option_is_there(table, tmp_path):
    sel = specialize.choose(specialize.parse_trace(TRACE), table, None, [("CONFIG_IPV6", "clients over IPv6")],
                            ["the recipe forwards port(s) 6379 from the host"])
    r = specialize.Result("special-0123456789ab", "base", "redis-server",
                          {o: c.reasons for o, c in sorted(sel.options.items())}, ["CONFIG_EXPERT"],
                          ["CONFIG_UNIKERNEL_LINUX"], ["CONFIG_UKL_REMOTE"], sel.left_out, sel.unknown,
                          {"epoll_create": 1}, 23, 3.0, False, 140.0, True, str(tmp_path / "verify.log"))
    specialize.write_reports(r, tmp_path, table)
    md = (tmp_path / "specialize.md").read_text()
    assert "`special-0123456789ab`" in md and "passes on this kernel" in md
    assert "| CONFIG_EPOLL | the run: epoll_create(): fs/eventpoll.c (redis-server; 1 time) |" in md
    assert "| CONFIG_IPV6 | asked for: clients over IPv6 |" in md
    # the network device's options share one row
    assert "CONFIG_VIRTIO_MENU, CONFIG_VIRTIO_MMIO" in md and "the recipe forwards port(s) 6379" in md
    assert "/dev/weird0" in md and "io_uring_setup(): ENOSYS on the general kernel too" in md
    import json
    assert json.loads((tmp_path / "specialize.json").read_text())["options"]["CONFIG_IPV6"] == [
        "asked for: clients over IPv6"]


def test_comments_do_not_change_the_name():
    a = "# one\nCONFIG_A=y\n# CONFIG_B is not set\n"
    assert specialize.config_name(a) == specialize.config_name("# two\n# CONFIG_B is not set\nCONFIG_A=y\n")
    assert specialize.config_name(a) != specialize.config_name(a + "CONFIG_C=y\n")
    assert specialize.config_name(a) != specialize.config_name("# ukl-tcg-cpu: Skylake\n" + a)


# A program whose one run uses nothing but printf, and whose code can use
# what a recorded run often misses (issue 44)
SOMETIMES = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
int main(int argc, char **argv)
{
	struct timespec ts;
	if (argc > 1 && !strcmp(argv[1], "all")) {
		int s[2];
		sigset_t m;
		timer_t t;
		sigemptyset(&m);
		eventfd(0, 0); epoll_create1(0); timerfd_create(CLOCK_MONOTONIC, 0); signalfd(-1, &m, 0);
		flock(0, LOCK_SH); timer_create(CLOCK_MONOTONIC, NULL, &t); socketpair(AF_UNIX, SOCK_STREAM, 0, s);
		clock_gettime(CLOCK_MONOTONIC_RAW, &ts); clock_getres(CLOCK_TAI, &ts);
	}
	if (argc > 2) {
		struct flock fl = { .l_type = F_WRLCK };
		fcntl(1, F_OFD_SETLK, &fl);
	}
	printf("hi\n");
	return 0;
}
"""


@pytest.fixture(scope="module")
def sometimes(tmp_path_factory):
    d = tmp_path_factory.mktemp("code")
    (d / "p.c").write_text(SOMETIMES)
    subprocess.run(["gcc", "-O2", "-static", "-o", str(d / "p"), str(d / "p.c")], check=True)
    return d / "p"


def test_the_code_shows_every_call_the_program_can_make(sometimes):
    code = specialize.Code(binsyscalls.of_program(sometimes), binsyscalls.syscall_names())
    calls = code.syscalls()
    for name in ("eventfd2", "epoll_create1", "timerfd_create", "signalfd4", "flock", "timer_create", "socketpair",
                 "write", "exit_group"):
        assert name in calls, sorted(calls)
    assert code.use.call_args["clock_gettime"][4] >= 1 and code.use.call_args["clock_getres"][11] == 1
    assert code.use.call_args["socketpair"][1] == 1
    assert code.use.call_args["fcntl"][37] == 1  # F_OFD_SETLK, the second argument


def test_options_for_what_the_code_can_call_and_where_they_come_from(table, sometimes):
    code = specialize.Code(binsyscalls.of_program(sometimes), binsyscalls.syscall_names())
    general = kernel.parse_fragment((CONFIG_DIR / "vm-base.config").read_text())
    run = specialize.parse_trace('50    write(1, "hi\\n", 3) = 3\n50    exit_group(0) = ?\n')
    assert not specialize.choose(run, table, general).options
    sel = specialize.choose(run, table, general, code=code)
    for opt in ("CONFIG_EVENTFD", "CONFIG_EPOLL", "CONFIG_TIMERFD", "CONFIG_SIGNALFD", "CONFIG_FILE_LOCKING",
                "CONFIG_POSIX_TIMERS", "CONFIG_UNIX", "CONFIG_FUTEX"):
        assert opt in sel.options and all(r.startswith("the code: ") for r in sel.options[opt].reasons), opt
    assert any("clock_gettime(CLOCK_MONOTONIC_RAW)" in r for r in sel.options["CONFIG_POSIX_TIMERS"].reasons)
    assert any("fcntl(F_OFD_SETLK)" in r for r in sel.options["CONFIG_FILE_LOCKING"].reasons)
    # it cannot listen on an IP port: no network device
    assert "CONFIG_VIRTIO_NET" not in sel.options


def test_a_stripped_program_s_arguments_count_as_computed(table, sometimes, tmp_path):
    stripped = tmp_path / "p"
    subprocess.run(["strip", "-o", str(stripped), str(sometimes)], check=True)
    use = binsyscalls.of_program(stripped)
    # its calls of clock_gettime() cannot be found, but its system call can
    assert use.call_args["clock_gettime"][None] >= 1 and 4 not in use.call_args["clock_gettime"]
    assert use.call_args["socketpair"][None] >= 1 and use.call_args["fcntl"][None] >= 1
    code = specialize.Code(use, binsyscalls.syscall_names())
    sel = specialize.choose(specialize.Usage(), table, None, code=code)
    assert any("clock_gettime(a computed clock id, so CLOCK_MONOTONIC_RAW)" in r
               for r in sel.options["CONFIG_POSIX_TIMERS"].reasons)
    assert "CONFIG_FILE_LOCKING" in sel.options and "CONFIG_UNIX" in sel.options


def test_a_server_s_code_gets_the_network_device(table):
    dis = """
0000000000401000 <main>:
  401000:	mov    $0x2,%edi
  401005:	call   402000 <socket>
  40100a:	mov    $0x32,%eax
  40100f:	syscall
  401011:	mov    $0x2b,%eax
  401016:	syscall
  401018:	mov    %r8d,%eax
  40101b:	syscall
  40101d:	mov    %ebx,%edi
  401020:	call   402000 <socket>
"""
    use = binsyscalls.analyze(dis, {0x402000: "socket"})
    assert use.unresolved == 1 and dict(use.call_args["socket"]) == {2: 1, None: 1}
    code = specialize.Code(use, {50: "listen", 43: "accept"})
    assert code.syscalls() == {"accept": 1, "listen": 1}
    sel = specialize.choose(specialize.Usage(), table, None, code=code)
    assert "CONFIG_VIRTIO_NET" in sel.options and "CONFIG_INET" in sel.options
    assert any("serve on an IP port" in r for r in sel.options["CONFIG_VIRTIO_NET"].reasons)
    # a computed family: every family the table knows
    assert "CONFIG_UNIX" in sel.options


def test_the_recording_keeps_mount_types_and_has_no_vdso():
    """Issue 44: with -s 0 mount()'s type never reached the trace; with the
    vDSO the clocks UKL reads by system calls never did."""
    assert " -s 0 " not in specialize.wrapper("x") and specialize.RECORD_APPEND == ["vdso=0"]
    flags = re.search(r"strace (.*?) -o ", specialize.wrapper("x"))
    assert flags is not None
    if os.geteuid() != 0 or not shutil.which("strace") or not shutil.which("unshare"):
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with strace (scripts/install-host-deps)")
        pytest.skip("needs root, strace and unshare (CI has them)")
    with tempfile.TemporaryDirectory() as td:
        out = subprocess.run(["unshare", "-m", "strace", *flags.group(1).split(), "-o", f"{td}/t",
                              "mount", "-t", "tmpfs", "none", td], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        trace = Path(f"{td}/t").read_text()
    assert "tmpfs" in specialize.parse_trace(trace).filesystems, trace


def test_the_initramfs_gives_back_its_members(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 5)
    spec = initramfs.Spec().file("/bin/a", tmp_path / "a", "0755")
    initramfs.write(spec, tmp_path / "i.cpio")
    data = (tmp_path / "i.cpio").read_bytes()
    assert initramfs.read_member(data, "bin/a") == b"x" * 5 and initramfs.read_member(data, "bin/b") is None


def test_the_kept_trace_holds_no_application_data():
    trace = ('60    write(1, "secret password\\n", 16) = 16\n'
             '60    openat(AT_FDCWD, "/etc/passwd", O_RDONLY) = 3\n'
             '60    mount("none", "/mnt", "tmpfs", 0, NULL) = 0\n'
             '60    <... read resumed>"top secret", 10) = 10\n')
    kept = specialize.redact(trace)
    assert "secret" not in kept and '"/etc/passwd"' in kept and '"tmpfs"' in kept
    u = specialize.parse_trace(kept)
    assert "tmpfs" in u.filesystems and "/etc/passwd" in u.paths and u.syscalls["write"].count == 1


def test_fcntl_s_command_selects_its_option(table):
    """A record lock or lease through fcntl (not flock) needs FILE_LOCKING,
    dnotify DNOTIFY: the command is fcntl's second argument (%esi). One
    the code computes gets every option fcntl's commands select."""
    dis = """
0000000000401000 <main>:
  401000:	mov    $0x6,%esi
  401005:	call   402000 <__libc_fcntl64>
  40100a:	mov    $0x3,%esi
  40100f:	call   402000 <__libc_fcntl64>
"""
    use = binsyscalls.analyze(dis, {0x402000: "fcntl"})
    assert dict(use.call_args["fcntl"]) == {6: 1, 3: 1}  # F_SETLK, and F_GETFL (no option)
    sel = specialize.choose(specialize.Usage(), table, None, code=specialize.Code(use, {}))
    assert set(sel.options) == {"CONFIG_FILE_LOCKING"}, sel.options
    assert any("fcntl(F_SETLK)" in r for r in sel.options["CONFIG_FILE_LOCKING"].reasons)
    computed = binsyscalls.analyze(dis.replace("mov    $0x6,%esi", "mov    %ebx,%esi"), {0x402000: "fcntl"})
    sel = specialize.choose(specialize.Usage(), table, None, code=specialize.Code(computed, {}))
    assert {"CONFIG_FILE_LOCKING", "CONFIG_DNOTIFY"} <= set(sel.options), sel.options
