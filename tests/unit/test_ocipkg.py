"""`ukl pkg OUTDIR --oci FILE.tar` (issue 33): an OCI image archive that
standard tools read (skopeo, umoci), reproducible, with urunc's settings
base64-encoded as urunc decodes them; bad input is a clear error and
leaves nothing behind. No VM: OUTDIR is a fake build result."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest
from fakekernel import pvh_bzimage

from conftest import ukl
from ukltool.build import image
from ukltool.cli.run import run_machine
from ukltool.run import ocipkg, vm
from ukltool.util.errors import UklError


def fake_image(root: Path, args: list[str] | None = None, forwards: list[list[int]] | None = None,
               recipe: str | None = None, config: str = "base", userspace: bool = False, name: str = "img",
               ip_pnp: bool = True, machine: str | None = None) -> Path:
    """A build result with a fake kernel; its System.map says whether the
    kernel configures eth0 from ip= (IP_PNP)."""
    out = root / name
    out.mkdir()
    kdir = root / f"{name}-kernel"
    kdir.mkdir()
    (kdir / "System.map").write_text("ffffffff81000000 T _text\n"
                                     + ("ffffffff82000000 T ip_auto_config_setup\n" if ip_pnp else ""))
    (out / "bzImage").write_bytes(b"MZ fake kernel " * 1000)
    (out / "initramfs.cpio").write_bytes(b"070701 fake initramfs " * 500)
    (out / "manifest.json").write_text(json.dumps({
        "config": config, "app": "hello", "kernel_release": "6.1.192-ukl", "kernel_key": "0",
        "linux_version": "6.1.192-2", "vmlinux": str(kdir / "vmlinux"), "userspace": userspace, "schema": 2,
        "args": args or [], "forwards": forwards or [], "recipe": recipe, "machine": machine}))
    return out


def test_an_image_for_microvm_alone_boots_there_and_is_not_packaged_for_urunc_s_qemu(tmp_path):
    mv = fake_image(tmp_path, machine="microvm", name="mv")
    anyw = fake_image(tmp_path, name="any")
    assert vm.image_machine(mv / "bzImage") == "microvm" and vm.image_machine(anyw / "bzImage") == "pc"
    assert vm.with_machine(vm.RunSpec(mv / "bzImage", [], tmp_path / "log")).machine == "microvm"
    assert vm.with_machine(vm.RunSpec(mv / "bzImage", [], tmp_path / "log", machine="pc")).machine == "pc"
    assert vm.image_machine(tmp_path / "nowhere" / "bzImage") == "pc"  # no manifest: a kernel of its own
    man = image.load(mv)
    assert run_machine(None, man, mv, False) == run_machine("microvm", man, mv, False) == "microvm"
    for asked, remote in (("pc", False), (None, True)):
        with pytest.raises(UklError, match="specialized for -M microvm alone"):
            run_machine(asked, man, mv, remote)
    assert run_machine(None, image.load(anyw), anyw, False) == "pc"
    with pytest.raises(UklError, match="urunc's qemu monitor boots -M pc"):
        ocipkg.build(mv)
    (mv / "bzImage").write_bytes(pvh_bzimage()[0])
    assert ocipkg.build(mv, hypervisor="firecracker", warn=False).manifest.digest


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{tool} is missing: scripts/install-host-deps installs it")
        pytest.skip(f"{tool} is not installed (scripts/install-host-deps installs it)")
    return path


def test_references_follow_the_distribution_grammar_and_are_normalized():
    good = {"hello": "docker.io/library/hello:latest", "ukl/redis:7.0": "docker.io/ukl/redis:7.0",
            "localhost/ukl/hello": "localhost/ukl/hello:latest",
            "localhost:5000/a/b:x": "localhost:5000/a/b:x", "registry.example.com/a_b/c__d/e-f--g:v1.2-3_4":
            "registry.example.com/a_b/c__d/e-f--g:v1.2-3_4", "[::1]:5000/x:y": "[::1]:5000/x:y",
            "x:" + "T" * 128: "docker.io/library/x:" + "T" * 128}
    for ref, want in good.items():
        assert ocipkg.normalize_reference(ref) == want, ref
    for bad in ("", "Hello", "ukl/Hello", "a//b", "a/b/", "a:", "a:-x", "-a", "a___b", "a..b", "a_",
                "x:" + "t" * 129, "x:é", "bad domain/x", "a b", "/a"):
        with pytest.raises(UklError, match="is not a valid image reference"):
            ocipkg.normalize_reference(bad)
    with pytest.raises(UklError, match="digest"):
        ocipkg.normalize_reference("hello@sha256:" + "0" * 64)


def test_only_urunc_monitors_that_boot_linux_are_taken():
    assert ocipkg.check_hypervisor("qemu") == "qemu"
    assert ocipkg.check_hypervisor("firecracker") == "firecracker"
    with pytest.raises(UklError, match="runs solo5 unikernels"):
        ocipkg.check_hypervisor("hvt")
    with pytest.raises(UklError, match="not a monitor urunc knows"):
        ocipkg.check_hypervisor("vbox")


def test_the_archive_is_an_oci_layout_with_urunc_settings(tmp_path):
    out = fake_image(tmp_path, args=["--port", "6379", "a b", ""], forwards=[[16379, 6379]])
    target = tmp_path / "img.tar"
    pkg = ocipkg.package(out, target, "ukl/redis:1", start="init")
    with tarfile.open(target) as tf:
        names = tf.getnames()
        members = tf.getmembers()
        index = json.loads(tf.extractfile("index.json").read())  # type: ignore[union-attr]
        layout = json.loads(tf.extractfile("oci-layout").read())  # type: ignore[union-attr]
    assert layout == {"imageLayoutVersion": "1.0.0"}
    assert all(m.mtime == 0 and m.uid == 0 and m.gid == 0 for m in members)
    assert sorted(n for n in names if n.startswith("blobs/sha256/")) == sorted(
        f"blobs/sha256/{b.digest[7:]}" for b in (pkg.config, pkg.layer, pkg.manifest))
    (entry,) = index["manifests"]
    assert entry["digest"] == pkg.manifest.digest and entry["mediaType"] == ocipkg.MEDIA_MANIFEST
    assert entry["annotations"] == {ocipkg.REF_NAME: "docker.io/ukl/redis:1",
                                    ocipkg.CONTAINERD_NAME: "docker.io/ukl/redis:1"}
    manifest = json.loads(pkg.manifest.data)
    plain = {k: base64.b64decode(v).decode() for k, v in manifest["annotations"].items()}
    assert plain == {"com.urunc.unikernel.unikernelType": "linux", "com.urunc.unikernel.hypervisor": "qemu",
                     "com.urunc.unikernel.binary": "/ukl/bzImage",
                     "com.urunc.unikernel.initrd": "/ukl/initramfs.cpio",
                     "com.urunc.unikernel.cmdline": "/init --port 6379 a b ",
                     "com.urunc.unikernel.unikernelVersion": "", "com.urunc.unikernel.useDMBlock": "false",
                     "com.urunc.unikernel.exitStatus": "serial"}
    config = json.loads(pkg.config.data)["config"]
    assert config["Entrypoint"] == ["/init"] and config["Cmd"] == ["--port", "6379", "a b", ""]
    assert config["ExposedPorts"] == {"6379/tcp": {}} and "PATH=/bin:/sbin:/usr/bin:/usr/sbin" in config["Env"]


def test_a_server_starts_as_pid_1_where_the_image_allows(tmp_path):
    """Issue 47, item 2: --start auto gives a UKL server the application as
    PID 1 (the kernel configures eth0 from urunc's ip=), and keeps init,
    which reports the exit status, for programs that end and where the
    image needs it."""
    server = fake_image(tmp_path, args=["--port", "6379"], forwards=[[16379, 6379]])
    pkg = ocipkg.build(server)
    assert pkg.urunc["com.urunc.unikernel.cmdline"] == "/ukl/hello --port 6379"
    assert "com.urunc.unikernel.exitStatus" not in pkg.urunc  # only init reports it
    assert json.loads(pkg.config.data)["config"]["Entrypoint"] == ["/ukl/hello"]
    assert ocipkg.firecracker_config(ocipkg.image.load(server), True, True)["boot-source"]["boot_args"].endswith(
        "rdinit=/ukl/hello -- --port 6379")
    batch = fake_image(tmp_path, name="batch")
    linux = fake_image(tmp_path, forwards=[[80, 80]], config="linux", name="linux")
    shell = fake_image(tmp_path, forwards=[[80, 80]], userspace=True, name="shell")
    old = fake_image(tmp_path, forwards=[[80, 80]], ip_pnp=False, name="old")          # a kernel without IP_PNP
    spaced = fake_image(tmp_path, args=["--greeting", "hi there"], forwards=[[80, 80]], name="spaced")
    for out in (batch, linux, shell, old, spaced):
        assert json.loads(ocipkg.build(out).config.data)["config"]["Entrypoint"] == ["/init"], out
    assert json.loads(ocipkg.build(batch, start="pid1").config.data)["config"]["Entrypoint"] == ["/ukl/hello"]
    assert json.loads(ocipkg.build(server, start="init").config.data)["config"]["Entrypoint"] == ["/init"]
    for out, why in ((linux, "where the application is an ordinary program"), (shell, "carries a userspace"),
                     (old, "cannot configure eth0"), (spaced, "an argument has a blank")):
        res = ukl("pkg", out, "--oci", tmp_path / "x.tar", "--start", "pid1")
        assert res.returncode == 2 and why in res.stdout and "Traceback" not in res.stdout, res.stdout
    assert not (tmp_path / "x.tar").exists()


def test_the_same_outdir_gives_the_same_bytes(tmp_path):
    out = fake_image(tmp_path)
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    ocipkg.package(out, a)
    for f in out.iterdir():
        os.utime(f, (1_000_000_000, 1_000_000_000))  # other times, same content
    res = ukl("pkg", out, "--oci", b)
    assert res.returncode == 0, res.stdout
    assert a.read_bytes() == b.read_bytes()
    (out / "bzImage").write_bytes(b"another kernel")
    ocipkg.package(out, b)
    assert a.read_bytes() != b.read_bytes()


def test_skopeo_and_umoci_read_it(tmp_path):
    skopeo, umoci = need("skopeo"), need("umoci")
    out = fake_image(tmp_path, args=["--greeting", "hi"], forwards=[[8080, 80]])
    target = tmp_path / "img.tar"
    pkg = ocipkg.package(out, target, "localhost/ukl/hello:1.0")
    res = subprocess.run([skopeo, "inspect", f"oci-archive:{target}"], capture_output=True, text=True, check=True)
    info = json.loads(res.stdout)
    assert info["Digest"] == pkg.manifest.digest and info["Architecture"] == "amd64" and info["Os"] == "linux"
    assert info["Layers"] == [pkg.layer.digest] and info["Labels"]["dev.ukl.config"] == "base"
    res = subprocess.run([skopeo, "inspect", "--config", f"oci-archive:{target}"], capture_output=True, text=True,
                         check=True)
    cfg = json.loads(res.stdout)["config"]
    assert cfg["Entrypoint"] == ["/ukl/hello"] and cfg["Cmd"] == ["--greeting", "hi"]  # a server: PID 1
    assert cfg["ExposedPorts"] == {"80/tcp": {}}
    # umoci unpacks it (and checks every digest) into a runtime bundle
    layout = tmp_path / "layout"
    layout.mkdir()
    with tarfile.open(target) as tf:
        tf.extractall(layout, filter="data")
    bundle = tmp_path / "bundle"
    subprocess.run([umoci, "unpack", "--image", f"{layout}:localhost/ukl/hello:1.0", bundle], check=True,
                   capture_output=True)
    rootfs = bundle / "rootfs"
    assert (rootfs / "ukl" / "bzImage").read_bytes() == (out / "bzImage").read_bytes()
    assert (rootfs / "ukl" / "initramfs.cpio").read_bytes() == (out / "initramfs.cpio").read_bytes()
    urunc = json.loads((rootfs / "urunc.json").read_text())
    assert ocipkg.decode(urunc)["com.urunc.unikernel.binary"] == "/ukl/bzImage"
    assert ocipkg.decode(urunc) == pkg.urunc
    spec = json.loads((bundle / "config.json").read_text())
    assert spec["process"]["args"] == ["/ukl/hello", "--greeting", "hi"]


def test_bad_input_is_a_clear_error_and_leaves_nothing(tmp_path):
    out = fake_image(tmp_path)
    target = tmp_path / "x.tar"
    empty = tmp_path / "empty"
    empty.mkdir()
    for args, message in (
        ([empty, "--oci", target], "is not a ukl build output"),
        ([out, "--oci", target, "--tag", "Bad/Name:x"], "is not a valid image reference"),
        ([out, "--oci", target, "--tag", "a b"], "is not a valid image reference"),
        ([out, "--oci", target, "--hypervisor", "vbox"], "not a monitor urunc knows"),
        ([out, "--oci", target, "--hypervisor", "spt"], "solo5"),
        ([out, "--oci", tmp_path], "is a directory"),
        ([out, "--oci", tmp_path / "no" / "x.tar"], "is not a directory"),
        ([out], "say what to write"),
    ):
        res = ukl("pkg", *args)
        assert res.returncode == 2 and message in res.stdout and "Traceback" not in res.stdout, (args, res.stdout)
        assert "hint:" in res.stdout, res.stdout
        assert not target.exists() and not list(tmp_path.glob(".*ukl-partial")), args
    # a failure leaves an existing archive as it was
    target.write_bytes(b"old")
    assert ukl("pkg", out, "--oci", target, "--tag", "-x").returncode == 2
    assert target.read_bytes() == b"old"
    (out / "bzImage").unlink()
    res = ukl("pkg", out, "--oci", target)
    assert res.returncode == 2 and "has no kernel" in res.stdout and target.read_bytes() == b"old"


def test_a_fifo_or_device_is_written_into_not_replaced(tmp_path):
    out = fake_image(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = ukl("pkg", out, "--oci", fifo)
    reader.join(timeout=60)
    assert res.returncode == 0, res.stdout
    assert fifo.is_fifo() and got and got[0] == ocipkg.archive_bytes(ocipkg.build(out))
    res = ukl("pkg", out, "--oci", "/dev/null")
    assert res.returncode == 0 and Path("/dev/null").is_char_device(), res.stdout


def test_firecracker_dir_holds_the_elf_kernel_and_a_vm_config(tmp_path):
    out = fake_image(tmp_path, args=["--greeting", "hi there", ""])
    bz, elf = pvh_bzimage()
    (out / "bzImage").write_bytes(bz)
    target = tmp_path / "fc"
    res = ukl("pkg", out, "--firecracker", target)
    assert res.returncode == 0, res.stdout
    # the kernel Firecracker boots: the bzImage's payload, an ELF file with a PVH entry
    assert (target / "vmlinux").read_bytes() == elf
    assert (target / "initramfs.cpio").read_bytes() == (out / "initramfs.cpio").read_bytes()
    cfg = json.loads((target / "vm-config.json").read_text())
    boot = cfg["boot-source"]
    assert boot["kernel_image_path"] == "vmlinux" and boot["initrd_path"] == "initramfs.cpio"
    assert boot["boot_args"].endswith('rdinit=/init -- --greeting "hi there" ""'), boot["boot_args"]
    assert "pci=off" in boot["boot_args"] and "ip=10.0.2.15::10.0.2.2:255.255.255.0::eth0:off" in boot["boot_args"]
    assert cfg["network-interfaces"][0]["host_dev_name"] == "tap0" and cfg["drives"] == []
    assert cfg["machine-config"]["vcpu_count"] >= 1 and not (tmp_path / "fc.partial").exists()
    # written again over its own output; refused over anything else
    assert ukl("pkg", out, "--firecracker", target).returncode == 0
    for args, message in (([out, "--firecracker", tmp_path / "img"], "was not written by ukl pkg"),
                          ([out, "--firecracker", out / "bzImage"], "is not a directory"),
                          ([out, "--firecracker", target, "--oci", tmp_path / "x.tar"], "no --oci or --tag")):
        res = ukl("pkg", *args)
        assert res.returncode == 2 and message in res.stdout and "Traceback" not in res.stdout, res.stdout
    (out / "bzImage").write_bytes(b"MZ fake kernel " * 1000)
    res = ukl("pkg", out, "--firecracker", tmp_path / "fc2")
    assert res.returncode == 2 and "no bzImage" in res.stdout and not (tmp_path / "fc2").exists()
    with pytest.raises(UklError, match="double quote"):
        ocipkg._cmdline_word('say "hi"')


def test_firecracker_dir_never_removes_what_it_did_not_write(tmp_path):
    """Issue 44: a DIR with Firecracker's usual vm-config.json, a rootfs and
    logs was removed whole. Now only ukl pkg's own files are written."""
    out = fake_image(tmp_path)
    bz, elf = pvh_bzimage()
    (out / "bzImage").write_bytes(bz)
    user = tmp_path / "fcuser"
    (user / "logs").mkdir(parents=True)
    (user / "logs" / "fc.log").write_text("log")
    (user / "rootfs.ext4").write_bytes(b"ext4")
    (user / "vm-config.json").write_text("{}")
    partial = tmp_path / "fcuser.partial"
    partial.mkdir()
    (partial / "keep").write_text("mine")
    before = {p: p.read_bytes() for p in (user / "logs" / "fc.log", user / "rootfs.ext4", user / "vm-config.json",
                                            partial / "keep")}
    res = ukl("pkg", out, "--firecracker", user)
    assert res.returncode == 2 and "was not written by ukl pkg" in res.stdout, res.stdout
    assert {p: p.read_bytes() for p in before} == before
    # a DIR ukl pkg made keeps what the user adds to it; an initramfs it no
    # longer needs goes, the user's own files stay
    target = tmp_path / "fc"
    assert ukl("pkg", out, "--firecracker", target).returncode == 0
    (target / "rootfs.ext4").write_bytes(b"ext4")
    (target / "logs").mkdir()
    assert ukl("pkg", out, "--firecracker", target).returncode == 0
    assert (target / "rootfs.ext4").read_bytes() == b"ext4" and (target / "logs").is_dir()
    assert (target / "vmlinux").read_bytes() == elf
    (out / "initramfs.cpio").unlink()
    assert ukl("pkg", out, "--firecracker", target).returncode == 0
    assert not (target / "initramfs.cpio").exists() and (target / "rootfs.ext4").is_file()
    assert "initrd_path" not in json.loads((target / "vm-config.json").read_text())["boot-source"]
    # a file of its names that it did not write is refused, not replaced
    (target / "initramfs.cpio").write_bytes(b"the user's")
    res = ukl("pkg", out, "--firecracker", target)
    assert res.returncode == 2 and "initramfs.cpio there was not written by ukl pkg" in res.stdout, res.stdout
    assert (target / "initramfs.cpio").read_bytes() == b"the user's"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("args,message", [
    (["two  spaces"], "does not survive urunc's kernel command line"),
    ([" lead"], "does not survive"),
    (["tab\there"], "does not survive"),
    (["it's"], "does not survive"),
    ([f"w{i}" for i in range(32)], "passes init at most 31"),
    (["x" * 1500], "Linux keeps 2047"),
])
def test_arguments_urunc_cannot_pass_are_refused(tmp_path, args, message):
    """Issue 46, item 3: urunc passes the arguments as kernel command-line
    words; what would arrive changed (or panic the kernel) is refused."""
    out = fake_image(tmp_path, args=args)
    res = ukl("pkg", out, "--oci", tmp_path / "x.tar")
    assert res.returncode == 2 and message in res.stdout and "hint:" in res.stdout, res.stdout
    assert not (tmp_path / "x.tar").exists()


def test_arguments_urunc_passes_are_taken(tmp_path):
    # Redis's recipe, and an argument with single spaces (urunc quotes it, init joins it)
    args = ["--protected-mode", "no", "--save", "", "--appendonly", "no"]
    ok = [a for a in args if a] + ["a b c"] + [f"w{i}" for i in range(20)]
    out = fake_image(tmp_path, args=ok)
    res = ukl("pkg", out, "--oci", tmp_path / "x.tar")
    assert res.returncode == 0 and "empty" not in res.stdout, res.stdout
    # an empty one vanishes: said, not refused (Redis's --save "")
    out = fake_image(tmp_path / "r", args=args) if (tmp_path / "r").mkdir() is None else None
    res = ukl("pkg", out, "--oci", tmp_path / "r.tar")
    assert res.returncode == 0 and "argument 4 is empty: under urunc it vanishes" in res.stdout, res.stdout
