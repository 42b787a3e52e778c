"""``evalkit keys generate|show``: the signing key in $EVALKIT_HOME, through the real entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def _evalkit(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EVALKIT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "evalkit_cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_generate_show_and_refuse_to_replace(tmp_path):
    home = tmp_path / "home"
    none = _evalkit("keys", "show", home=home)
    assert none.returncode == 2
    assert none.stdout == ""
    assert none.stderr.count("\n") == 1 and "evalkit keys generate" in none.stderr
    assert not home.exists()

    made = _evalkit("keys", "generate", "--json", home=home)
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert info["key_id"].startswith("ed25519:") and len(info["key_id"]) == 8 + 64
    assert info["private_key_mode"] == "0600"
    assert (home / "keys/ed25519.pem").stat().st_mode & 0o777 == 0o600

    shown = _evalkit("keys", "show", "--json", "--pem", home=home)
    assert shown.returncode == 0
    again = json.loads(shown.stdout)
    assert again["key_id"] == info["key_id"]
    assert again["public_key_pem"].startswith("-----BEGIN PUBLIC KEY-----")
    assert "PRIVATE" not in shown.stdout

    text = _evalkit("keys", "show", home=home)
    assert text.stdout.splitlines()[0].split() == ["key_id", info["key_id"]]

    refused = _evalkit("keys", "generate", home=home)
    assert refused.returncode == 2
    assert "--force" in refused.stderr and refused.stderr.count("\n") == 1
    assert json.loads(_evalkit("keys", "show", "--json", home=home).stdout)["key_id"] == info["key_id"]

    forced = _evalkit("keys", "generate", "--force", "--json", home=home)
    assert forced.returncode == 0
    assert json.loads(forced.stdout)["key_id"] != info["key_id"]


def test_a_key_readable_by_others_is_refused(tmp_path):
    home = tmp_path / "home"
    assert _evalkit("keys", "generate", home=home).returncode == 0
    (home / "keys/ed25519.pem").chmod(0o644)
    res = _evalkit("keys", "show", home=home)
    assert res.returncode == 2
    assert "0644" in res.stderr and "chmod 600" in res.stderr


def test_help_names_both_commands(tmp_path):
    res = _evalkit("keys", "--help", home=tmp_path)
    assert res.returncode == 0
    assert "generate" in res.stdout and "show" in res.stdout
