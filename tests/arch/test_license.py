"""The licence: Apache-2.0, as a LICENSE file at the root and as metadata in every package."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_license_file_is_the_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_package_declares_apache_2() -> None:
    packages = sorted(ROOT.glob("packages/*/pyproject.toml"))
    assert len(packages) >= 5
    for path in packages:
        project = tomllib.loads(path.read_text())["project"]
        assert project.get("license") == "Apache-2.0", path


def test_every_package_ships_the_licence_text() -> None:
    """Apache-2.0 asks for a copy of the licence with every redistribution: each package holds the root's LICENSE,
    which the build backend puts into the wheel's ``.dist-info/licenses``."""
    root_text = (ROOT / "LICENSE").read_bytes()
    for pyproject in sorted(ROOT.glob("packages/*/pyproject.toml")):
        copy = pyproject.parent / "LICENSE"
        assert copy.is_file(), copy
        assert copy.read_bytes() == root_text, copy
