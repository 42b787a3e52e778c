"""``evalkit keys generate|show``: the Ed25519 key that signs receipts, in ``$EVALKIT_HOME/keys``."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import typer

__all__ = ["app", "signing_key"]

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

_HOME_HELP = "Home directory (default: $EVALKIT_HOME, else .evalkit/ in the working directory)."


def signing_key() -> Any:
    """The key in $EVALKIT_HOME, made when something is first signed with it, not before: a run or a certificate
    refused for bad input (a config, prices, a window, a receipt) leaves a fresh home as it was. One line on stderr
    when it is new (the commands that sign call this: run, certify)."""
    from evalkit_core import SigningKey, ensure_signing_key

    class KeyOnFirstUse(SigningKey):
        __slots__ = ("_made",)

        def __init__(self) -> None:  # the real key is loaded or made by _key(), on first use
            self._made: SigningKey | None = None

        def _key(self) -> SigningKey:
            if self._made is None:
                key, created = ensure_signing_key()
                if created:
                    typer.echo(f"key         generated {key.key_id} in {key.path} (first run; `evalkit keys show`)", err=True)
                self._made = key
            return self._made

        @property
        def key_id(self) -> str:
            return self._key().key_id

        def sign(self, data: bytes) -> bytes:
            return self._key().sign(data)

        def __getattr__(self, name: str) -> Any:  # public, path: the real key's (slots left unset here)
            if name == "_made":
                raise AttributeError(name)
            return getattr(self._key(), name)

        def __repr__(self) -> str:
            return "SigningKey(the local key, made on first use)"

    return KeyOnFirstUse()


def _describe(key: Any) -> dict[str, Any]:
    from evalkit_core import signing_key_paths

    home = key.path.parent.parent if key.path is not None else None
    private, public = signing_key_paths(home)
    return {
        "key_id": key.key_id,
        "algorithm": "ed25519",
        "public_key": key.public.to_json()["public_key"],
        "private_key_path": str(private),
        "private_key_mode": f"{stat.S_IMODE(private.stat().st_mode):04o}",
        "public_key_path": str(public),
    }


def _print(info: dict[str, Any], as_json: bool, *, pem: bytes | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(info, indent=2, sort_keys=True))
        return
    typer.echo(f"key_id      {info['key_id']}")
    typer.echo(f"public_key  {info['public_key']}  (raw Ed25519, base64)")
    typer.echo(f"private     {info['private_key_path']}  (mode {info['private_key_mode']}; never share it)")
    typer.echo(
        f"public      {info['public_key_path']}  (give this file to whoever verifies: evalkit verify --key FILE)"
    )
    if pem is not None:
        typer.echo(pem.decode("ascii").rstrip("\n"))


@app.command("generate")
def generate(
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    force: bool = typer.Option(
        False, "--force", help="Replace an existing key (receipts it signed then verify only with --key)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the key's description as JSON."),
) -> None:
    """Create the signing key (Ed25519; private key 0600). Refuses to replace one unless --force."""
    from evalkit_core import generate_signing_key

    key = generate_signing_key(home, force=force)
    _print(_describe(key), as_json)


@app.command("show")
def show(
    home: Path | None = typer.Option(None, "--home", help=_HOME_HELP),
    pem: bool = typer.Option(False, "--pem", help="Also print the public key as PEM (what --key reads)."),
    as_json: bool = typer.Option(False, "--json", help="Print the key's description as JSON."),
) -> None:
    """Show the signing key's id and public key (never the private key). Exit 2 when there is none."""
    from evalkit_core import load_signing_key

    key = load_signing_key(home)
    info = _describe(key)
    if as_json and pem:
        info["public_key_pem"] = key.public.pem().decode("ascii")
    _print(info, as_json, pem=key.public.pem() if pem and not as_json else None)
