"""Profiles and option words (tools/ukltool/profiles.py), without a VM."""

from __future__ import annotations

import json

import pytest

from ukltool import profiles
from ukltool.errors import UklError

TABLE = {"byp": profiles.Option("byp", "bypass", False), "byp-every": profiles.Option("byp-every", "n", True)}


def test_a_profile_is_a_configuration_and_options_in_order():
    p = profiles.parse("base+byp-every=16+byp", TABLE)
    assert (p.config, p.opts, p.name) == ("base", ("byp-every=16", "byp"), "base+byp-every=16+byp")
    assert p.kernel_args() == ["ukl.opts=byp-every=16,byp"]
    assert profiles.parse("linux", TABLE).kernel_args() == []


@pytest.mark.parametrize("words,message", [
    (["nope"], "unknown"), (["byp", "byp"], "twice"), (["byp=1"], "switch"), (["byp-every"], "needs a value"),
    (["byp-every=-1"], "whole number"), (["byp-every=x"], "whole number"), (["byp-every=1000000000"], "whole"),
])
def test_bad_option_words(words, message):
    with pytest.raises(UklError, match=message):
        profiles.parse_opts(words, TABLE)


def test_opts_argument_and_empty():
    assert profiles.opts_arg(" byp , byp-every=2 ", TABLE) == ("byp", "byp-every=2")
    assert profiles.opts_arg("", TABLE) == ()


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


def test_an_image_passes_its_profile(tmp_path):
    assert profiles.image_kernel_args(tmp_path) == []
    (tmp_path / "manifest.json").write_text(json.dumps({"config": "base+byp"}))
    assert profiles.image_kernel_args(tmp_path) == ["ukl.opts=byp"]
