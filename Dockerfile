# evalkit in a container: the runtime only (no dev tools), built from the lockfile, run as a non-root user.
#
#   docker build -t evalkit .
#   docker run --rm --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       --user "$(id -u):$(id -g)" -v "$PWD:/work" evalkit run
#
# With a directory mounted on /work, run as its owner (--user): the image's own user (uid 10001) cannot write to
# a directory that belongs to someone else. Everything evalkit writes (the store, keys, outputs, the derived
# caches) then goes under /work, so any uid works (HOME is /tmp, writable by every uid).
#
# The sandbox's wall is bubblewrap, which needs user namespaces inside the container: Docker's default seccomp
# and AppArmor profiles refuse them, hence the two --security-opt flags (--privileged also works, and grants far
# more). Without them evalkit still runs, records the weaker isolation in every verdict and receipt, and says so
# in one line. Per-job uids need root inside the container (`--user root`); as the default non-root user every
# job shares that user's uid, and the verdicts say so. See the README's "Container" section.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: resolve from uv.lock and install the CLI and its runtime closure into /opt/evalkit ----------------
FROM ${PYTHON_IMAGE} AS build
RUN pip install --no-cache-dir "uv>=0.13,<0.14"
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/opt/evalkit
WORKDIR /src
COPY pyproject.toml uv.lock LICENSE README.md ./
COPY packages ./packages
# --no-editable: the members are installed as wheels, so /src is not needed at run time.
RUN uv sync --frozen --no-default-groups --package evalkit-cli --no-editable

# --- runtime: slim Python, the sandbox's system libraries, the venv, a non-root user --------------------------
FROM ${PYTHON_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap libseccomp2 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --shell /usr/sbin/nologin evalkit \
    && mkdir /work && chown evalkit:evalkit /work
COPY --from=build /opt/evalkit /opt/evalkit
# The seed task bank and campaign, so `evalkit eval --tasks /opt/evalkit/share/tasks` works without a mount.
# (tasks/ and campaigns/ in the repository are links to these; the wheel carries them too: evalkit tasks demo)
COPY packages/evalkit/src/evalkit/seed/tasks /opt/evalkit/share/tasks
COPY packages/evalkit/src/evalkit/seed/campaigns /opt/evalkit/share/campaigns
ENV PATH=/opt/evalkit/bin:$PATH \
    EVALKIT_HOME=/work/.evalkit \
    EVALKIT_CACHE_DIR=/work/.cache/evalkit \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1
USER evalkit
WORKDIR /work
ENTRYPOINT ["evalkit"]
CMD ["--help"]
