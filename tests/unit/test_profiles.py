"""Profiles and option words (tools/ukltool/linux/profiles.py), without a VM."""

from __future__ import annotations

import json

import pytest

from ukltool.linux import profiles
from ukltool.util.errors import UklError

TABLE = {"byp": profiles.Option("byp", "bypass", False), "byp-every": profiles.Option("byp-every", "n", True),
         "rtc-max-us": profiles.Option("rtc-max-us", "us", True, 1000)}


def test_a_profile_is_a_configuration_and_options_in_order():
    p = profiles.parse("base+byp-every=16+byp", TABLE)
    assert (p.config, p.opts, p.name) == ("base", ("byp-every=16", "byp"), "base+byp-every=16+byp")
    assert p.kernel_args() == ["ukl.opts=byp-every=16,byp"]
    assert profiles.parse("linux", TABLE).kernel_args() == []


@pytest.mark.parametrize("words,message", [
    (["nope"], "unknown"), (["byp", "byp"], "twice"), (["byp=1"], "switch"), (["byp-every"], "needs a value"),
    (["byp-every=-1"], "whole number"), (["byp-every=x"], "whole number"), (["byp-every=1000000000"], "whole"),
    (["rtc-max-us=1001"], "from 1 to 1000$"), (["rtc-max-us=0"], "from 1 to 1000$"),
])
def test_bad_option_words(words, message):
    with pytest.raises(UklError, match=message):
        profiles.parse_opts(words, TABLE)


def test_opts_argument_and_empty():
    assert profiles.opts_arg(" byp , byp-every=2 ", TABLE) == ("byp", "byp-every=2")
    assert profiles.opts_arg("", TABLE) == ()
    assert profiles.opts_arg("rtc-max-us=1000", TABLE) == ("rtc-max-us=1000",)


def test_the_option_table_is_checked(tmp_path):
    assert "byp" in profiles.options()
    bad = tmp_path / "o.toml"
    bad.write_text("[Bad_Name]\nsummary = 'x'\n")
    with pytest.raises(UklError, match="Bad_Name"):
        profiles.options(bad)
    bad.write_text("[x]\n")
    with pytest.raises(UklError, match="summary"):
        profiles.options(bad)
    bad.write_text("[x\n")
    with pytest.raises(UklError, match="cannot read"):
        profiles.options(bad)
    for maximum in ("0", "'9'", "true", "1000000000"):
        bad.write_text(f"[x]\nsummary = 's'\nparam = true\nmax = {maximum}\n")
        with pytest.raises(UklError, match="max must be a whole number"):
            profiles.options(bad)
    assert profiles.options()["rtc-max-us"].maximum == 1000000


def test_an_image_passes_its_profile(tmp_path):
    assert profiles.image_config(tmp_path) == ""
    assert profiles.profile_kernel_args("") == []
    (tmp_path / "manifest.json").write_text(json.dumps({"config": "base+byp"}))
    assert profiles.image_config(tmp_path) == "base+byp"
    assert profiles.profile_kernel_args("base+byp") == ["ukl.opts=byp"]
