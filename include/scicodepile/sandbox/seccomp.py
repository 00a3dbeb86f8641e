"""A small seccomp filter for the bubblewrap sandbox: deny the syscalls that reach other processes or the
kernel's shared state, which the namespaces and the unprivileged uid alone leave open.

Measured here (kernel 6.x, no Yama): inside the sandbox the program shares its uid with bwrap's init
(pid 1 of the run's PID namespace), so without a filter it may ``ptrace`` init, read and write its
memory (``process_vm_readv``/``writev``), or take its descriptors (``pidfd_getfd``); a hijacked init can
drop its parent-death signal and outlive the run.  Keyring calls (``add_key``/``keyctl``) leave keys in
the kernel under the leased host uid, visible in ``/proc/keys`` to the next run that leases it.  The
rest (``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring``, ``kcmp``, ``process_madvise``) are
kernel attack surface that no scientific program needs; Docker's default profile denies them too.

Denied calls fail with ``EPERM``; a syscall of a foreign ABI (32-bit ``int 0x80`` or x32 on x86_64)
kills the process, since the numbers above would not match it.  The filter is a classic BPF program,
built once per architecture and handed to ``bwrap --seccomp FD``.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct

# Per architecture: (AUDIT_ARCH_* value, {syscall name: number}); numbers from the kernel's uapi headers.
_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "process_madvise",
    "kcmp",
    "add_key",
    "request_key",
    "keyctl",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
            "process_madvise": 440, "kcmp": 312, "add_key": 248, "request_key": 249, "keyctl": 250,
            "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
            "process_madvise": 440, "kcmp": 272, "add_key": 217, "request_key": 218, "keyctl": 219,
            "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
            "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
}  # fmt: skip
_X32_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_OFF_NR = 0
_OFF_ARCH = 4


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def denied_syscalls() -> tuple[str, ...]:
    """Names of the syscalls the filter denies (with EPERM)."""
    return _DENIED


@functools.cache
def filter_program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture as raw ``struct sock_filter`` array, or None if unknown."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, numbers = arch
    nrs = [numbers[name] for name in _DENIED]
    head = [
        _insn(_LD_W_ABS, 0, 0, _OFF_ARCH),
        _insn(_JEQ_K, 1, 0, audit_arch),
        _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    checks: list[tuple[int, int]] = []
    if audit_arch == _ARCHES["x86_64"][0]:
        checks.append((_JGE_K, _X32_BIT))  # x32 ABI numbers: deny (with EPERM) rather than guess
    checks += [(_JEQ_K, nr) for nr in nrs]
    body = []
    for index, (code, k) in enumerate(checks):
        to_deny = len(checks) - index  # skip the rest of the checks and the ALLOW
        body.append(_insn(code, to_deny, 0, k))
    tail = [_insn(_RET_K, 0, 0, _RET_ALLOW), _insn(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    return b"".join(head + body + tail)
