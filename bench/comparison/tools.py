"""The programs the comparison needs: Debian packages installed when missing,
and the Gapura and gapura-loadtest binaries, built with cargo unless told not to."""
import os
import shutil
import subprocess
import sys

from .common import ROOT, die, say

# Debian package of each command the program runs.
PACKAGE_OF = {"nginx": "nginx", "haproxy": "haproxy", "wrk": "wrk", "curl": "curl",
              "taskset": "util-linux"}


def ensure_tools(tools):
    """Installs the Debian package of each command that is missing (as root)."""
    missing = [PACKAGE_OF[t] for t in tools if shutil.which(t) is None]
    if not missing:
        return
    packages = " ".join(missing)
    if os.geteuid() != 0:
        die(f"missing packages: {packages} (run as root, or: apt-get install -y {packages})")
    say(f"installing from Debian's packages: {packages}")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", *missing]):
        rc = subprocess.run(cmd).returncode
        if rc != 0:
            sys.exit(rc)


def executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def target_dir():
    return os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")


def cargo_build(package, *extra):
    cmd = ["cargo", "build", "--release", "-p", package, *extra]
    say("building: " + " ".join(cmd))
    try:
        return subprocess.run(cmd, cwd=ROOT).returncode
    except OSError as e:
        say(f"cargo: {e.strerror}")
        return 127


def release_binary(opts, env, build, name, missing):
    """The release binary NAME: $ENV when set, else built first with
    cargo_build(*BUILD) unless --no-build. A failed build ends the program
    with cargo's exit status; no executable ends it with MISSING."""
    binary = os.environ.get(env, "")
    if not binary:
        if opts.build:
            rc = cargo_build(*build)
            if rc != 0:
                sys.exit(rc)
        binary = os.path.join(target_dir(), "release", name)
    if not executable(binary):
        die(f"no {missing[0]} at {binary} ({missing[1]})")
    return binary


def find_gapura(opts):
    """The Gapura binary (built first unless GAPURA_BIN or --no-build), or
    None when gapura is not among the servers."""
    if not any(s.startswith("gapura") for s in opts.servers):
        return None
    return release_binary(opts, "GAPURA_BIN", ["gapura"], "gapura", (
        "Gapura binary", "build it, set GAPURA_BIN, or leave gapura out of --servers"))


def find_floor(opts):
    """The floor proxy's binary (bench/src/bin/floor-proxy.rs; built first
    unless FLOOR_BIN or --no-build), or None when no floor is among the
    servers."""
    if not any(s.startswith("floor-") for s in opts.servers):
        return None
    build = ["gapura-bench", "--bin", "floor-proxy"]
    if "floor-glommio" in opts.servers:
        build += ["--features", "glommio"]
    return release_binary(opts, "FLOOR_BIN", build,
                          "floor-proxy", (
                              "floor proxy", "build it with `cargo build --release -p "
                              "gapura-bench --bin floor-proxy`, set FLOOR_BIN, or leave the "
                              "floors out of --servers"))


def find_generators(opts):
    """(the generators to run, in order; the gapura-loadtest binary; a note
    for the report's header).

    When gapura-loadtest was not asked for by name and there is no binary and
    no way to build one, wrk takes its place and the report says so.
    """
    if "gapura-loadtest" not in opts.generators:
        return list(opts.generators), "", ""
    note = ""
    unusable = ""
    binary = os.environ.get("LOADTEST_BIN", "")
    build_cmd = "`cargo build --release -p gapura-loadtest`"
    if binary:
        if not executable(binary):
            unusable = f"LOADTEST_BIN={binary} is not an executable"
    else:
        binary = os.path.join(target_dir(), "release", "gapura-loadtest")
        if opts.build and cargo_build("gapura-loadtest") != 0:
            if executable(binary):
                note = (f"{build_cmd} failed; the existing {binary} was used "
                        "and may be older than the tree")
                say(f"note: {note}")
            else:
                unusable = f"no binary at {binary} and {build_cmd} failed"
        if not unusable and not executable(binary):
            unusable = f"no binary at {binary} and --no-build was given"
    if unusable:
        if opts.generator_explicit:
            die(f"--generator gapura-loadtest: {unusable}")
        note = f"gapura-loadtest was not used ({unusable}); wrk generated the load instead"
        say(f"note: {note}")
        return ["wrk"], binary, note
    return list(opts.generators), binary, note
