"""`ukl bench boot --peers`' logic without a VM: the peers' definitions,
their pinned inputs, and how the report shows them beside our rows."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from test_bootbench import row, sample

from conftest import ukl
from ukltool.bench import bootbench, peerbench
from ukltool.util.errors import UklError


def test_the_peers_are_defined_with_pinned_inputs():
    assert peerbench.names() == ["firecracker-linux", "unikraft-hello"]
    fc, uk = peerbench.check(["firecracker-linux", "unikraft-hello"])
    assert fc.boot in bootbench.BOOTS and uk.boot in bootbench.PEER_BOOTS
    assert set(fc.files) == {"config"} and set(uk.files) == {"core", "app"}
    assert all(len(sha) == 64 for _f, sha in [*fc.files.values(), *uk.files.values()])
    assert uk.defconfig_extra == ["# CONFIG_LIBUKRANDOM is not set"]
    assert set(peerbench.BUILDERS) == set(peerbench.names())


def test_an_unknown_peer_is_refused_before_any_work(tmp_path):
    with pytest.raises(UklError, match="unknown peer"):
        peerbench.check(["firecracker-linux", "osv"])
    res = ukl("bench", "boot", "--peers", "osv", "--json", tmp_path / "x.json")
    assert res.returncode == 2 and "unknown peer(s): osv" in res.stdout and "Traceback" not in res.stdout
    assert not (tmp_path / "x.json").exists()


def test_a_changed_input_is_refused(tmp_path, monkeypatch):
    spec = peerbench.check(["firecracker-linux"])[0]
    (tmp_path / "peers").mkdir()
    (tmp_path / "peers" / "firecracker-microvm-kernel-ci-x86_64-6.1.config").write_text("CONFIG_X=y\n")
    monkeypatch.setenv("UKL_SHARED_DIR", str(tmp_path))
    with pytest.raises(UklError, match="checksum mismatch .*boot-peers-built.toml"):
        peerbench._shared(spec, "config")


def test_peer_rows_are_reported_and_compared_as_ratios(tmp_path):
    report = sample()
    report.rows.append(row("examples/hello/hello.c", "base", boot="microvm-direct", image_bytes=2_000_000,
                           boot_to_main_instructions=60_000_000, min_memory_mib=20))
    report.peers.append(row("hello (Unikraft 0.17)", "unikraft-hello", boot="pc-multiboot", image_bytes=250_000,
                            boot_to_main_instructions=100_000_000, min_memory_mib=2, about="Unikraft's helloworld",
                            notes=["99.99 M of its instructions to main() are its TSC calibration"],
                            phases={"kernel..init": 100_000_000, bootbench.PEER_AVOIDABLE: 99_990_000}))
    path = tmp_path / "boot.json"
    bootbench.save_json(report, path)
    assert json.loads(path.read_text())["peers"][0]["about"] == "Unikraft's helloworld"
    assert bootbench.load_json(path) == report
    md = bootbench.markdown(report, None, tmp_path / "boot.md")
    assert "## Peers measured here" in md and "**hello (Unikraft 0.17)** (`unikraft-hello`): Unikraft's" in md
    assert "TSC calibration" in md and "| pc-multiboot | -M pc, the image's multiboot entry" in md
    # ours / the peer's: 8x the bytes, 0.6x the instructions, 10x the memory
    # (and against its 10,000 instructions without the avoidable TSC calibration: 6000x)
    assert ("| examples/hello/hello.c | base | microvm-direct | hello (Unikraft 0.17) | 8.00x | 0.60x | 6000.00x | "
            "10.00x |") in md
    # rows of other applications are not compared with a hello
    assert "| redis | base | pc-plain | hello (Unikraft 0.17)" not in md
    merged = bootbench.merge([report, report])
    assert len(merged.peers) == 2


def test_the_call_span_is_read_from_the_disassembly(tmp_path):
    if shutil.which("gcc") is None or shutil.which("objdump") is None:
        pytest.skip("needs gcc and objdump")
    src = tmp_path / "c.c"
    src.write_text("__attribute__((noinline)) int callee(int x) { return x * 3; }\n"
                   "int caller(int x) { return callee(x) + 1; }\nint main(void) { return caller(2); }\n")
    exe = tmp_path / "c"
    subprocess.run(["gcc", "-O1", "-fno-inline", "-o", exe, src], check=True)
    start, end = peerbench._call_span(exe, "caller", "callee")  # type: ignore[misc]
    assert start == bootbench.symbol_address(exe, "callee")
    text = subprocess.run(["objdump", "-d", "--disassemble=caller", exe], capture_output=True, text=True).stdout
    assert f"{end:x}:" in text
    assert peerbench._call_span(exe, "main", "callee") is None   # main calls caller, not callee


def test_peers_and_pid1_are_checked_before_any_work(tmp_path):
    res = ukl("bench", "boot", "--from-json", tmp_path / "a.json", "--peers", "unikraft-hello")
    assert res.returncode == 2 and "--peers boots images" in res.stdout and "Traceback" not in res.stdout
    # every configuration is checked before any suite runs (base's would run first)
    res = ukl("apptest", "redis", "--configs", "base,linux", "--pid1")
    assert res.returncode == 2 and "--pid1 with 'linux'" in res.stdout and "Traceback" not in res.stdout
