"""Developer sessions; each is callable alone (`uv run nox -s lint`). They reuse the uv-synced environment."""

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "types", "arch", "tests"]


@nox.session
def tests(session: nox.Session) -> None:
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.run("ruff", "check", "packages", "tests", "tools", "noxfile.py")


@nox.session
def types(session: nox.Session) -> None:
    session.run("basedpyright")


@nox.session
def arch(session: nox.Session) -> None:
    session.run("lint-imports")


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark script under tools/bench/ and print its figures."""
    from pathlib import Path

    for script in sorted(Path("tools/bench").glob("*.py")):
        session.log(f"== {script}")
        session.run("python", str(script), *session.posargs)
