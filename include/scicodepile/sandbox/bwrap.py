"""The bubblewrap backend: one ``bwrap`` launch per program, about 5-10 ms of overhead.

The launch chain is ``prlimit`` (rlimits, as root) -> ``setpriv`` (switch to an unprivileged host uid,
drop groups) -> ``bwrap`` -> the sandbox's Python.  Why each piece:

- **An unprivileged host uid, leased per run** (``sandbox_uid_base`` + slot, flock-ed so no two live runs
  share one).  bwrap started by root maps the sandbox's uid to host root, so root-only files such as
  ``/etc/shadow`` would stay readable; and RLIMIT_NPROC is ignored for root and counted per host uid, so
  each run needs a uid of its own for the process limit to hold and not to starve its neighbours.
- **An empty environment for bwrap itself**: bwrap's own process is pid 1 inside and its
  ``/proc/1/environ`` would show whatever bwrap was started with.  The program gets a fresh, fixed one.
- **Nothing of the host's file tree but /usr and the interpreter environment**, read-only: no /root, no
  /home, no /etc, no project data folder, no object store folder.  The root itself, /dev and /proc are
  bwrap's own, the root and /dev remounted read-only; /tmp and /dev/shm share one host-mounted tmpfs
  with a size and an inode cap (:class:`PrivateTmp`).  ``/proc/1`` (bwrap's init, of the program's own
  uid) is hidden, and a seccomp filter (:mod:`scicodepile.sandbox.seccomp`) denies ptrace, cross-process
  memory access, keyrings and other kernel attack surface: nothing inside can reach init and keep it
  alive past the run.
- **Namespaces**: user, pid, net (no interfaces but a private loopback: the host's 127.0.0.1 is
  unreachable), ipc, uts, cgroup; ``--new-session`` (no controlling terminal), ``--die-with-parent``,
  ``--disable-userns`` (no nested namespaces).
- **Process-tree kill without cgroups**: bwrap's init is pid 1 of the run's PID namespace; when it dies
  the kernel kills every process in the namespace, double-forked daemons included.  On timeout we
  SIGKILL the launch's process group (bwrap's monitor) and every process of the leased uid (init among
  them), then confirm from ``/proc`` that no process of the leased uid is left before the uid is handed
  on.  A lease whose runner died mid-run is marked in its lock file; the next holder clears it first.
"""

# ruff: noqa: S108 - /tmp and /dev/shm here are paths inside the sandbox (its own tmpfs), not the host's.

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import random
import select
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from scicodepile.sandbox.base import (
    KillReason,
    Limits,
    Outcome,
    Program,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    TailBuffer,
    classify,
    sandbox_python,
)
from scicodepile.sandbox.seccomp import filter_program

if TYPE_CHECKING:
    from scicodepile.settings import Settings

SANDBOX_DIR = "/sandbox"
_SECCOMP_KEY = ".seccomp"  # not a valid program file name, so it cannot clash
_GRACE_AFTER_EXIT_S = 2.0
_MiB = 1 << 20


class UidPool:
    """Leases host uids to live runs, one each, across threads (a set) and processes (flock per uid)."""

    def __init__(self, base: int, slots: int, lock_dir: Path | None = None) -> None:
        self.base = base
        self.slots = slots
        self.lock_dir = lock_dir or Path(tempfile.gettempdir()) / f"scicodepile-sandbox-uids-{os.geteuid()}"
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._mutex = threading.Lock()
        self._busy: set[int] = set()
        self._fds: dict[int, int] = {}  # kept open: opening a lock file per run costs more than the lock

    def _try(self, slot: int) -> bool:
        fd = self._fds.get(slot)
        if fd is None:
            fd = os.open(self.lock_dir / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._fds[slot] = fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _acquire(self) -> int | None:
        with self._mutex:
            start = random.randrange(self.slots)
            for i in range(self.slots):
                slot = (start + i) % self.slots
                if slot not in self._busy and self._try(slot):
                    self._busy.add(slot)
                    return slot
        return None

    @contextlib.contextmanager
    def lease(self, on_stale: Callable[[int], None] | None = None) -> Iterator[int]:
        """A uid no other live run holds; released when the block ends.

        Each slot's lock file holds one byte, ``1`` while a lease is live: a lease that finds ``1`` follows
        a holder that died mid-run (its runner was killed), and ``on_stale(uid)`` clears whatever of that
        run may still be alive before the uid is used again.
        """
        delay = 0.002
        while (slot := self._acquire()) is None:
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        fd = self._fds[slot]
        try:
            if os.pread(fd, 1, 0) == b"1" and on_stale is not None:
                on_stale(self.base + slot)
            os.pwrite(fd, b"1", 0)
            yield self.base + slot
            os.pwrite(fd, b"0", 0)  # only a lease that ended normally is clean
        finally:
            with self._mutex:
                fcntl.flock(fd, fcntl.LOCK_UN)
                self._busy.discard(slot)

    def close(self) -> None:
        """Close the kept lock files (no lease may be live)."""
        with self._mutex:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def processes_of(uid: int, *, zombies: bool = True) -> list[int]:
    """Pids of processes owned by host ``uid`` (a /proc scan: about a millisecond).

    Zombies are dead (they hold no memory, run nothing) but still count against RLIMIT_NPROC until
    reaped.  bwrap's monitor exits as soon as the program does, so the PID namespace's init is
    reparented to the host's pid 1 and reaped whenever that gets to it; ``zombies=False`` skips them.
    """
    pids = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if not zombies:
                    with open(f"/proc/{entry.name}/stat", "rb") as fh:
                        if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                            continue
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            pids.append(int(entry.name))
    return pids


def _usage_of(pids: list[int]) -> tuple[int, int]:
    """(largest VmHWM in bytes, total threads) among ``pids``; read just before a kill.

    Threads count against RLIMIT_NPROC like processes, so a thread bomb fills the table as surely as a
    fork bomb while showing as a single process.
    """
    peak = tasks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
                    elif line.startswith(b"Threads:"):
                        tasks += int(line.split()[1])
                        break
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return peak, tasks


class PrivateTmp:
    """Per-run tmpfs mounted by the host (root) for the sandbox's /tmp and /dev/shm: a size and inode cap.

    bwrap's own ``--tmpfs`` takes a size but no inode count, and tmpfs's default (half the host's RAM
    pages) lets a program create millions of empty files: measured here, 1.3 million in 10 s, 1.4 GB of
    unswappable kernel memory that the size cap and RLIMIT_AS never see.  So the host mounts one tmpfs per
    leased uid with ``size=`` and ``nr_inodes=`` (about 0.2 ms with the unmount), owned by that uid, and
    bwrap binds its ``tmp`` and ``shm`` folders.  Where the host may not mount (a container without
    CAP_SYS_ADMIN), :meth:`available` is False and the sandbox falls back to bwrap's tmpfs.
    """

    _MS_NOSUID, _MS_NODEV, _MNT_DETACH = 2, 4, 2

    def __init__(self, root: Path | None = None) -> None:
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        self._ctypes = ctypes
        base = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
        self.root = root or base / f"scicodepile-sandbox-tmp-{os.geteuid()}"
        self.available = self._probe()

    def _probe(self) -> bool:
        try:
            self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
            os.chmod(self.root, 0o711)  # noqa: S103 - bwrap runs as the leased uid: it must reach the mounts
            probe = self.mount(os.getuid(), 1 << 20, 64, name="probe")
        except OSError:
            return False
        self.unmount(probe)
        return True

    def mount(self, uid: int, size: int, inodes: int, *, name: str | None = None) -> Path:
        """A fresh tmpfs for ``uid`` (whatever an earlier, crashed run left there is detached first)."""
        path = self.root / (name or str(uid))
        path.mkdir(mode=0o700, exist_ok=True)
        self.unmount(path)
        options = f"size={size},nr_inodes={inodes},mode=0700,uid={uid},gid={uid}".encode()
        flags = self._MS_NOSUID | self._MS_NODEV
        if self._libc.mount(b"tmpfs", str(path).encode(), b"tmpfs", flags, options) != 0:
            err = self._ctypes.get_errno()
            raise OSError(err, f"mount tmpfs on {path}: {os.strerror(err)}")
        for sub in ("tmp", "shm"):
            os.mkdir(path / sub, 0o700)
            os.chown(path / sub, uid, uid)
        return path

    def unmount(self, path: Path) -> None:
        """Detach the tmpfs at ``path`` (its files go with it); nothing mounted there is fine."""
        while self._libc.umount2(str(path).encode(), self._MNT_DETACH) == 0:
            pass  # stacked mounts (crashed runs) come off one by one


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of host ``uid`` (a leased uid: only this run's processes)."""
    for pid in processes_of(uid, zombies=False):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER).

    bwrap's monitor exits as soon as the program does, orphaning the PID namespace's init.  As subreaper
    we adopt and reap that init ourselves: its rusage then carries the program's true peak memory
    (ru_maxrss of bwrap's monitor only shows the image it was forked from), and no zombie of a leased uid
    lingers, counting against the next run's RLIMIT_NPROC, until the host's pid 1 gets to it.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # 36 = PR_SET_CHILD_SUBREAPER
        raise SandboxUnavailable(
            f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}",
            setting="SCICODEPILE_SANDBOX_BACKEND",
        )


def _require_tool(name: str) -> str:
    path = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
    if not path:
        package = "bubblewrap" if name == "bwrap" else "util-linux"
        raise SandboxUnavailable(
            f"{name} is not installed (Debian package {package}; scripts/sysdeps.sh installs it)",
            setting="SCICODEPILE_SANDBOX_BACKEND",
        )
    return path


class BwrapSandbox(Sandbox):
    """Runs each program in a fresh bubblewrap sandbox (see the module docstring for the layout)."""

    name = "bwrap"

    def __init__(self, settings: Settings, limits: Limits | None = None) -> None:
        super().__init__(settings, limits)
        if os.geteuid() != 0:
            # Without root we cannot switch to a leased uid; the caller's own uid would be the sandbox's.
            raise SandboxUnavailable(
                "the bwrap backend must be started as root (it drops to a leased unprivileged uid)",
                setting="SCICODEPILE_SANDBOX_BACKEND",
            )
        self.bwrap = _require_tool("bwrap")
        self.setpriv = _require_tool("setpriv")
        self.prlimit = _require_tool("prlimit")
        self.python = sandbox_python(settings)
        self.env_dir = self.python.parent.parent
        self.uids = UidPool(settings.sandbox_uid_base, settings.sandbox_uid_slots)
        self.seccomp = filter_program()
        self.private_tmp = PrivateTmp()
        _become_subreaper()
        self._checked = False
        self._check_lock = threading.Lock()

    # ------------------------------------------------------------------------------ command line
    def _argv(
        self, uid: int, files: dict[str, int], timeout: float, program: Program, tmp: Path | None = None
    ) -> list[str]:
        lim = self.limits
        cpu = math.ceil(timeout) + 1
        env_dir = str(self.env_dir)
        argv = [
            self.prlimit,
            f"--as={lim.memory_mb * _MiB}",
            f"--nproc={lim.max_processes}",
            f"--nofile={lim.open_files}",
            f"--fsize={lim.file_size_mb * _MiB}",
            f"--cpu={cpu}:{cpu + 1}",
            "--core=0",
            "--memlock=0",
            "--",
            self.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
            self.bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--ro-bind", env_dir, env_dir,
            # /proc/1 is bwrap's init, of the program's own uid: hidden, so the program cannot write its
            # memory (/proc/1/mem), keep it from dying with the run, or read its command line.
            "--proc", "/proc", "--size", "4096", "--tmpfs", "/proc/1", "--remount-ro", "/proc/1",
            "--dev", "/dev",
        ]  # fmt: skip
        if tmp is not None:  # one host tmpfs with a size and an inode cap (see PrivateTmp)
            argv += ["--bind", f"{tmp}/tmp", "/tmp", "--bind", f"{tmp}/shm", "/dev/shm"]
        else:
            argv += [
                "--size", str(lim.tmp_mb * _MiB), "--tmpfs", "/tmp",
                "--size", str(min(lim.tmp_mb, 16) * _MiB), "--tmpfs", "/dev/shm",
            ]  # fmt: skip
        argv += ["--dir", SANDBOX_DIR]
        for name, fd in files.items():
            if name == _SECCOMP_KEY:
                argv += ["--seccomp", str(fd)]
            else:
                argv += ["--ro-bind-data", str(fd), f"{SANDBOX_DIR}/{name}"]
        argv += [
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--chdir", "/tmp", "--clearenv",
            "--setenv", "PATH", f"{env_dir}/bin:/usr/bin:/bin",
            "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
            "--setenv", "OPENBLAS_NUM_THREADS", "1", "--setenv", "OMP_NUM_THREADS", "1",
            "--setenv", "MKL_NUM_THREADS", "1", "--setenv", "MPLBACKEND", "Agg",
            "--",
            # -E -s: no PYTHON* variables, no user site; not -I, which would drop /sandbox from sys.path.
            str(self.python), "-E", "-s", "-B", f"{SANDBOX_DIR}/{program.name}", *program.argv,
        ]  # fmt: skip
        return argv

    # ------------------------------------------------------------------------------------ running
    def run(self, program: Program, *, timeout: float | None = None) -> RunResult:
        """Run ``program`` in a fresh sandbox; see :class:`~scicodepile.sandbox.base.Outcome`."""
        seconds = self.check_timeout(timeout)
        self._self_check()
        return self._run(program, seconds)

    def _self_check(self) -> None:
        """Once per instance: prove the sandbox starts and sees its interpreter, or fail loudly."""
        if self._checked:
            return
        with self._check_lock:
            if self._checked:
                return
            nonce = os.urandom(8).hex()
            probe = Program(source=f"import sys\nprint('{nonce}', sys.prefix)\n", key="self-check")
            result = self._run(probe, 30.0)
            if result.exit_code != 0 or nonce not in result.stdout:
                raise SandboxUnavailable(
                    "the bwrap sandbox cannot start its interpreter "
                    f"({self.python}): exit {result.exit_code}: {result.output_tail[-500:]!r}",
                    setting="SCICODEPILE_SANDBOX_PYTHON_ENV",
                )
            self._checked = True

    def _run(self, program: Program, timeout: float) -> RunResult:
        lim = self.limits
        fds: dict[str, int] = {}
        payload = program.payload()
        if self.seccomp is not None:
            payload[_SECCOMP_KEY] = self.seccomp
        try:
            for name, data in payload.items():
                fd = os.memfd_create(f"sandbox-{name}", os.MFD_CLOEXEC)
                fds[name] = fd
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.lseek(fd, 0, os.SEEK_SET)
            with self.uids.lease(on_stale=self._reap_survivors) as uid:
                tmp = None
                if self.private_tmp.available:
                    tmp = self.private_tmp.mount(uid, lim.tmp_mb * _MiB, lim.tmp_inodes)
                try:
                    return self._launch(program, uid, fds, timeout, lim, tmp)
                finally:
                    if tmp is not None:
                        self.private_tmp.unmount(tmp)
        finally:
            for fd in fds.values():
                os.close(fd)

    def _launch(
        self, program: Program, uid: int, fds: dict[str, int], timeout: float, lim: Limits, tmp: Path | None
    ) -> RunResult:
        info_read, info_write = os.pipe2(os.O_CLOEXEC)
        argv = self._argv(uid, fds, timeout, program, tmp)
        argv[argv.index(self.bwrap) + 1 : argv.index(self.bwrap) + 1] = ["--info-fd", str(info_write)]
        out, err = TailBuffer(lim.tail_bytes), TailBuffer(lim.tail_bytes)
        start = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            pass_fds=(*fds.values(), info_write),
            start_new_session=True,
        )
        os.close(info_write)
        deadline = start + timeout
        kill_reason: KillReason | None = None
        timed_out = False
        peak_before_kill = 0
        init_reaped = False
        pidfd = os.pidfd_open(proc.pid)
        sel = selectors.DefaultSelector()
        try:
            streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}  # type: ignore[union-attr]
            for fd in streams:
                os.set_blocking(fd, False)
                sel.register(fd, selectors.EVENT_READ)
            sel.register(pidfd, selectors.EVENT_READ)
            exited_at: float | None = None
            killed = False
            while streams or exited_at is None:
                now = time.monotonic()
                if exited_at is None:
                    wait = deadline - now
                else:
                    wait = exited_at + _GRACE_AFTER_EXIT_S - now
                if wait <= 0:
                    if exited_at is None and not killed:
                        timed_out = True
                        pids = processes_of(uid)
                        peak_before_kill, tasks = _usage_of(pids)
                        # bwrap's monitor and init count too: a full table means a fork (or thread) bomb.
                        if max(len(pids), tasks) >= lim.max_processes - 1:
                            kill_reason = KillReason.PROCESSES
                        self._kill(proc, uid)
                        killed = True
                        deadline = time.monotonic() + _GRACE_AFTER_EXIT_S
                        continue
                    break  # exited (or killed) and the pipes are still open after the grace: stop reading
                for key, _ in sel.select(wait):
                    fd = key.fd
                    if fd == pidfd:
                        sel.unregister(pidfd)
                        exited_at = time.monotonic()
                        continue
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        del streams[fd]
                        continue
                    streams[fd].write(chunk)
                    if out.total + err.total > lim.max_output_bytes and not killed:
                        kill_reason = KillReason.OUTPUT
                        peak_before_kill = _usage_of(processes_of(uid))[0]
                        self._kill(proc, uid)
                        killed = True
                        for other in list(streams):  # stop reading: the flood is what we kill for
                            sel.unregister(other)
                            del streams[other]
            _, status, usage = os.wait4(proc.pid, 0)
            duration = time.monotonic() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            init_usage = self._reap_init(info_read, uid)
            init_reaped = init_usage is not None
        finally:
            sel.close()
            os.close(pidfd)
            os.close(info_read)
            if proc.returncode is None:
                self._kill(proc, uid)
                proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
            # Once we have reaped the namespace's init, the kernel has killed and released every process
            # in it (an exiting init waits for that), so the /proc check is needed only when we could not.
            if not init_reaped:
                self._reap_survivors(uid)
        # The monitor's own ru_maxrss is the image it was forked from (this process): not the program's.
        del usage
        peak = max(init_usage.ru_maxrss * 1024 if init_usage else 0, peak_before_kill)
        return self._result(program, proc.returncode, timed_out, kill_reason, duration, peak, out, err)

    @staticmethod
    def _reap_init(info_read: int, uid: int) -> os.struct_rusage | None:  # type: ignore[name-defined]
        """Wait for the PID namespace's init (adopted by us as subreaper); its rusage covers the program.

        The wait is bounded: the monitor has exited, so init is dying by its parent-death signal, unless
        something inside kept it alive; then every process of the leased uid is killed and init reaped.
        """
        import json

        os.set_blocking(info_read, False)
        try:
            info = json.loads(os.read(info_read, 4096) or b"{}")
        except (BlockingIOError, ValueError):
            return None
        pid = info.get("child-pid")
        if not isinstance(pid, int):
            return None
        try:
            init_fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        try:
            if not select.select([init_fd], [], [], _GRACE_AFTER_EXIT_S)[0]:
                _kill_uid(uid)
            _, _, usage = os.wait4(pid, 0)
        except ChildProcessError:  # not adopted (bwrap setup failed before the fork)
            return None
        finally:
            os.close(init_fd)
        return usage

    @staticmethod
    def _kill(proc: subprocess.Popen, uid: int) -> None:
        """SIGKILL the launch's process group (bwrap's monitor) and every process of the leased uid.

        The uid is this run's alone, so killing by uid reaches the namespace's init (and with it the whole
        namespace) whatever the program did to its process group, session or parent-death signal.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_uid(uid)

    @staticmethod
    def _reap_survivors(uid: int) -> None:
        """Make sure no process of the leased uid outlives the run before the uid is handed on.

        Right after bwrap's monitor exits, the namespace's init may still be exiting: SIGKILL whatever
        still runs (harmless to a dying process) and wait on its pidfd until it has exited.
        """
        deadline = time.monotonic() + 5.0
        while pids := processes_of(uid, zombies=False):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    pidfd = os.pidfd_open(pid)
                except (ProcessLookupError, PermissionError):
                    continue
                try:
                    select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
                finally:
                    os.close(pidfd)
            if time.monotonic() > deadline:
                raise RuntimeError(f"sandbox processes of uid {uid} survived SIGKILL: {pids[:10]}")

    def _result(
        self,
        program: Program,
        returncode: int,
        timed_out: bool,
        kill_reason: KillReason | None,
        duration: float,
        peak: int,
        out: TailBuffer,
        err: TailBuffer,
    ) -> RunResult:
        stderr = err.text()
        exit_code: int | None = returncode
        sig: int | None = None
        if returncode < 0:  # we killed bwrap itself
            exit_code, sig = None, -returncode
        elif returncode > 128:  # bwrap reports a program killed by signal N as 128 + N
            sig = returncode - 128
        if kill_reason is not None:
            outcome = Outcome.KILLED
            message = {
                KillReason.OUTPUT: f"output over {self.limits.max_output_bytes} bytes",
                KillReason.PROCESSES: f"process limit ({self.limits.max_processes}) reached, then timed out",
            }.get(kill_reason, kill_reason.value)
        elif timed_out:
            outcome, message = Outcome.TIMEOUT, "wall-clock timeout"
        else:
            outcome, kill_reason, message = classify(returncode if sig is None else 128 + sig, sig, stderr)
        return RunResult(
            outcome=outcome,
            kill_reason=kill_reason,
            exit_code=exit_code,
            signal=sig,
            duration_s=duration,
            peak_memory_bytes=peak or None,
            stdout=out.text(),
            stderr=stderr,
            output_bytes=out.total + err.total,
            truncated=out.truncated or err.truncated,
            backend=self.name,
            message=message,
            key=program.key,
        )
