"""Starting and stopping child processes, each by its own pid and those of its
descendants, never by name; reading /proc for their state; the descriptor limit
they inherit."""
import os
import resource
import signal
import subprocess
import time


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name (the first is the
    state, field 3), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def is_running(pid):
    """Alive and not a zombie."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid):
    """Every descendant pid of PID, depth first, from the parent pids in /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = proc_stat(entry)
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry))
    found = []

    def walk(parent):
        for child in sorted(children.get(parent, [])):
            found.append(child)
            walk(child)

    walk(pid)
    return found


def signal_pid(pid, sig):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


class Processes:
    """Every background process this program started and has not stopped yet.

    A process is only ever signalled by its own pid (and its descendants by
    theirs) while it is tracked here; until it is waited for, its pid stays
    its own, as an unreaped child's pid cannot be reused.
    """

    def __init__(self):
        self.tracked = []

    def start(self, cmd, out_path):
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)
        self.tracked.append(proc)
        return proc

    def wait(self, proc):
        """Waits for PROC to exit; its exit status as a shell gives it
        (128 + the signal's number when a signal ended it)."""
        rc = proc.wait()
        self.tracked.remove(proc)
        return 128 - rc if rc < 0 else rc

    def stop(self, proc):
        """TERM the process, wait up to 10 s, KILL what is left of its tree."""
        if proc is None or proc not in self.tracked:
            return
        if is_running(proc.pid):
            tree = [proc.pid, *descendants(proc.pid)]
            signal_pid(proc.pid, signal.SIGTERM)
            for _ in range(100):
                if not any(is_running(p) for p in tree):
                    break
                time.sleep(0.1)
            for p in tree:
                if is_running(p):
                    signal_pid(p, signal.SIGKILL)
        proc.wait()
        self.tracked.remove(proc)

    def stop_all(self):
        for proc in reversed(list(self.tracked)):
            self.stop(proc)


def raise_nofile():
    """Allows enough descriptors for 256 client connections plus upstream ones:
    20000 (soft and hard), or the hard limit where 20000 is not allowed.
    Returns the limit now in force, as `ulimit -n` prints it."""
    limit = resource.RLIMIT_NOFILE
    try:
        resource.setrlimit(limit, (20000, 20000))
    except (ValueError, OSError):
        hard = resource.getrlimit(limit)[1]
        if hard != resource.RLIM_INFINITY:
            try:
                resource.setrlimit(limit, (hard, hard))
            except (ValueError, OSError):
                pass
    soft = resource.getrlimit(limit)[0]
    return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
