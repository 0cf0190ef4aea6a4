"""Files in the image (issue 12, item 3): every image has a minimal /etc
(users root and nobody, groups, hosts, services), and `ukl build --file
SRC:DEST` and `--overlay DIR` add the user's files, replacing defaults."""

from __future__ import annotations

import pytest

from conftest import BASIC_CONFIGS, REPO, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "image_files.c"


@pytest.mark.parametrize("config", BASIC_CONFIGS)
def test_servers_find_users_hosts_services_and_their_files(tmp_path, outdir, config):
    conf = tmp_path / "app.conf"
    conf.write_text("listen 8080\n")
    conf.chmod(0o640)
    overlay = tmp_path / "overlay"
    (overlay / "srv" / "www").mkdir(parents=True)
    (overlay / "srv" / "www" / "index.html").write_text("<p>hello</p>\n")
    (overlay / "etc").mkdir()
    (overlay / "etc" / "hosts").write_text("127.0.0.1 localhost\n10.0.0.7 backend\n")
    (overlay / "srv" / "current").symlink_to("www")
    out = build(SRC, config, outdir / f"image-files-{config}", "--file", f"{conf}:/etc/app/app.conf",
                "--overlay", overlay)
    res = ukl("run", out, "--timeout", "120", "--", "/etc/app/app.conf", "/srv/current/index.html", "/etc/hosts")
    assert res.returncode == 0, res.stdout
    for want in ("nobody: 65534 65534", "group 65534: nogroup", "http: 80", "localhost: 127.0.0.1",
                 "/etc/app/app.conf: listen 8080", "/etc/app/app.conf: mode 640",
                 "/srv/current/index.html: <p>hello</p>", "/etc/hosts: 10.0.0.7 backend"):
        assert want in res.stdout, (want, res.stdout)
    assert_clean(out / "console.log")


def test_bad_file_arguments_are_clear_errors(tmp_path, outdir):
    for args, message in (
        (["--file", "nosuch:/etc/x"], "nosuch: not a file"),
        (["--file", f"{SRC}:etc/x"], "is not SRC:DEST"),
        (["--overlay", str(tmp_path / "none")], "not a directory"),
    ):
        res = ukl("build", SRC, "--config", "linux", "-o", outdir / "bad-files", *args)
        assert res.returncode == 2 and message in res.stdout and "Traceback" not in res.stdout, res.stdout
        assert not (outdir / "bad-files").exists() and not (outdir / "bad-files.partial").exists()
