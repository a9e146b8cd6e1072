"""CPU accounting: the server's CPU time (its whole process tree, from /proc)
across the generator's measured window, and the generator's own CPU time."""
import dataclasses
import os
import time

from .procs import descendants, proc_stat

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pids):
    """(user, system) clock ticks used so far by PIDS (all their threads, and
    the children they have reaped), summed. Reads /proc only: no process is
    started, so a read takes well under a millisecond."""
    user = system = 0
    for pid in pids:
        f = proc_stat(pid)
        if f is None:
            continue
        # f[0] is field 3 (state): utime=14, stime=15, cutime=16, cstime=17.
        user += int(f[11]) + int(f[13])
        system += int(f[12]) + int(f[14])
    return user, system


def reaped_child_ticks():
    """cutime + cstime of this process: the CPU of the children it has reaped."""
    f = proc_stat("self")
    return int(f[13]) + int(f[14])


def now_us():
    return time.monotonic_ns() // 1000


@dataclasses.dataclass
class Measurement:
    rc: int  # the generator's exit status
    wall_us: int  # the measured window's wall time
    user_ticks: int  # the server tree's CPU over the window
    sys_ticks: int
    late_us: int  # how late the opening read came (gapura-loadtest)
    gen_ticks: int  # the generator's whole CPU time, user + system


def measure(b, server_pid, out_path, open_us, cmd):
    """Runs the load generator CMD in the background (tracked, so cleanup can
    stop it) and waits for it. The server's CPU counters are read where the
    generator's measured window opens, and again once the generator has exited.

    OPEN_US 0: the window opens at the launch, and the counters are read just
    before it. OPEN_US > 0 (gapura-loadtest): the window opens OPEN_US after
    the generator computes its start time, which it does just before it
    spawns its first shard thread; this watches /proc/PID/task for that thread
    (every 0.5 ms) and reads the counters OPEN_US later, from /proc only, so
    the read lands within a millisecond or two of the opening (late_us says
    how late it came).

    The generator's CPU is how much this process's cutime + cstime grew while
    it reaped the generator; nothing else is reaped then, as the counters are
    read right around that wait.
    """
    pids = [server_pid, *descendants(server_pid)]
    late_us = 0
    if open_us == 0:
        before = cpu_ticks(pids)
        t0 = now_us()
    gen = b.procs.start(cmd, out_path)
    anchor = now_us()
    if open_us > 0:
        seen = False  # the first shard thread appeared (or the process ended)
        for _ in range(4000):  # up to about 2 s
            try:
                if len(os.listdir(f"/proc/{gen.pid}/task")) >= 2:
                    seen = True
                    break
            except OSError:
                seen = True
                break
            time.sleep(0.0005)
        now = now_us()
        if seen:
            anchor = now
        if anchor + open_us > now:
            time.sleep((anchor + open_us - now) / 1e6)
        t0 = now_us()
        before = cpu_ticks(pids)
        late_us = t0 - anchor - open_us
    g0 = reaped_child_ticks()
    rc = b.procs.wait(gen)
    g1 = reaped_child_ticks()
    t1 = now_us()
    after = cpu_ticks([server_pid, *descendants(server_pid)])
    return Measurement(rc, t1 - t0, after[0] - before[0], after[1] - before[1],
                       late_us, g1 - g0)
