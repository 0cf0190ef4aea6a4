"""Profiles: a kernel configuration and UKL options chosen at boot.

A profile is written CONFIG+OPTION+... (base+byp, base+byp+byp-every=16).
The kernel is CONFIG's: every profile of one configuration shares its
build. The options (kernel/options.toml) reach the kernel on its command
line as ukl.opts=OPTION,...; an image built for a profile keeps its name in
its manifest, and every boot of the image passes its options."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ukltool.util.errors import UklError
from ukltool.util.paths import REPO

OPTIONS_FILE = REPO / "kernel" / "options.toml"
MANIFEST = "manifest.json"  # image.MANIFEST (image imports this module)
KERNEL_PARAM = "ukl.opts"


@dataclass(frozen=True)
class Option:
    name: str
    summary: str
    param: bool
    maximum: int = 999_999_999  # largest value of a parameter


@dataclass(frozen=True)
class Profile:
    config: str
    opts: tuple[str, ...]  # in the order given: NAME or NAME=N

    @property
    def name(self) -> str:
        return "+".join((self.config, *self.opts))

    def kernel_args(self) -> list[str]:
        return [f"{KERNEL_PARAM}={','.join(self.opts)}"] if self.opts else []


def options(path: Path = OPTIONS_FILE) -> dict[str, Option]:
    """The option table, checked: a broken file is an error naming it."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read the option table {path}: {e}", "fix the file (TOML)") from None
    out: dict[str, Option] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("summary"), str):
            raise UklError(f"{path}: option '{name}' needs a table with a summary string", "fix the file")
        if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
            raise UklError(f"{path}: option name '{name}' is not lower-case letters, digits and '-'",
                           "rename it")
        maximum = entry.get("max", Option.maximum)
        if not isinstance(maximum, int) or isinstance(maximum, bool) or not 1 <= maximum <= Option.maximum:
            raise UklError(f"{path}: option '{name}': max must be a whole number from 1 to {Option.maximum}",
                           "fix the file")
        out[name] = Option(name, entry["summary"], bool(entry.get("param", False)), maximum)
    return out


def parse_opts(words: list[str], table: dict[str, Option] | None = None) -> tuple[str, ...]:
    """Option words (NAME, or NAME=N for a parameter), checked, each once."""
    table = options() if table is None else table
    seen: dict[str, str] = {}
    for word in words:
        name, eq, value = word.partition("=")
        opt = table.get(name)
        if opt is None:
            raise UklError(f"unknown UKL option '{name}'",
                           f"choose from: {', '.join(table)} (kernel/options.toml)")
        if opt.param != bool(eq):
            raise UklError(f"UKL option '{name}' " + (f"needs a value: {name}=N" if opt.param
                                                      else "is a switch and takes no value"),
                           f"{name}: {opt.summary}")
        if eq and not (re.fullmatch(r"[1-9][0-9]{0,8}", value) and int(value) <= opt.maximum):
            raise UklError(f"UKL option '{word}': the value must be a whole number from 1 to {opt.maximum}",
                           f"{name}: {opt.summary}")
        if name in seen:
            raise UklError(f"UKL option '{name}' is given twice", "name each option once")
        seen[name] = word
    return tuple(seen.values())


def parse(text: str, table: dict[str, Option] | None = None) -> Profile:
    """CONFIG[+OPTION...]: the configuration is checked by the caller (kernel.fragments)."""
    config, *words = text.split("+")
    if not config:
        raise UklError(f"'{text}' names no kernel configuration", "write CONFIG+OPTION, for example base+byp")
    return Profile(config, parse_opts(words, table) if words else ())


def opts_arg(text: str, table: dict[str, Option] | None = None) -> tuple[str, ...]:
    """--opts a,b,c"""
    return parse_opts([w.strip() for w in text.split(",") if w.strip()], table)


def image_config(image_dir: Path) -> str:
    """The profile an image was built for (its manifest's "config"), or ""
    where the image has no readable manifest."""
    try:
        data = json.loads((image_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        return ""
    config = data.get("config", "") if isinstance(data, dict) else ""
    return config if isinstance(config, str) else ""


def profile_kernel_args(config: str) -> list[str]:
    """The kernel command line words for CONFIG, an image's profile ("": none)."""
    return parse(config).kernel_args() if config else []
