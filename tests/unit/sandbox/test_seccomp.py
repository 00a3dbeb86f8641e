"""The sandbox's seccomp filter, run by a classic-BPF interpreter written here, the uid lease's
stale-run marker, and the size check on program files."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest

from scicodepile.sandbox.bwrap import UidPool
from scicodepile.sandbox.seccomp import _ARCHES, denied_syscalls, filter_program

ALLOW, KILL, EPERM = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM


def run_filter(program: bytes, arch: int, nr: int) -> int:
    """Evaluate the filter on ``seccomp_data`` {nr, arch} (the only fields it loads)."""
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    data = {0: nr, 4: arch}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = data[k]
        elif code == 0x06:
            return k
        elif code in (0x15, 0x35):
            taken = acc == k if code == 0x15 else acc >= k
            pc += jt if taken else jf
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(_ARCHES))
def test_filter_denies_exactly_the_listed_calls(machine: str) -> None:
    program = filter_program(machine)
    assert program is not None and len(program) % 8 == 0
    audit_arch, numbers = _ARCHES[machine]
    denied = {numbers[name] for name in denied_syscalls()}
    for nr in range(0, 460):
        expected = EPERM if nr in denied else ALLOW
        assert run_filter(program, audit_arch, nr) == expected, (machine, nr)
    assert run_filter(program, 0x40000003, 39) == KILL  # a foreign ABI (i386) is killed, not let through
    if machine == "x86_64":
        assert run_filter(program, audit_arch, 0x40000000 | 39) == EPERM  # x32 numbers


def test_unknown_architecture_has_no_filter() -> None:
    assert filter_program("sparc64") is None


def test_uid_pool_reports_a_lease_that_never_ended(tmp_path: Path) -> None:
    stale: list[int] = []
    pool = UidPool(base=7000, slots=1, lock_dir=tmp_path)
    with pool.lease(on_stale=stale.append):
        pass
    assert stale == []  # a clean end leaves the slot clean
    pool.close()
    (tmp_path / "0.lock").write_bytes(b"1")  # what a runner killed mid-run leaves (its flock went with it)
    again = UidPool(base=7000, slots=1, lock_dir=tmp_path)
    with again.lease(on_stale=stale.append) as uid:
        assert stale == [7000] and uid == 7000
    with again.lease(on_stale=stale.append):
        pass
    assert stale == [7000]
    again.close()


def test_load_program_never_reads_a_huge_file_whole(tmp_path: Path) -> None:
    from scicodepile.sandbox import SandboxInputError, load_program

    huge = tmp_path / "huge.py"
    with huge.open("wb") as fh:
        fh.truncate(64 << 30)  # sparse: 64 GiB that a whole read would try to hold in memory
    with pytest.raises(SandboxInputError, match="larger than"):
        load_program(huge)
