"""The Docker backend against a real engine, where one exists.

This machine has no Docker engine, so these tests skip with that reason; on a deployment host with an
engine and the sandbox image (``SCICODEPILE_SANDBOX_DOCKER_IMAGE``) they run the same checks as bwrap.
The "no engine" path itself is tested unconditionally: it must be a clear configuration error.
"""

from __future__ import annotations

import pytest

from scicodepile.sandbox import KillReason, Outcome, Program, Sandbox, SandboxUnavailable, open_sandbox
from scicodepile.settings import load_settings

pytestmark = pytest.mark.integration


def _engine_or_reason() -> str | None:
    from scicodepile.sandbox.docker import docker_client

    try:
        docker_client()
    except SandboxUnavailable as exc:
        return str(exc)
    return None


REASON = _engine_or_reason()


@pytest.fixture(scope="module")
def docker_sandbox() -> Sandbox:
    if REASON is not None:
        pytest.skip(f"Docker backend not testable here: {REASON}")
    settings = load_settings(sandbox_backend="docker")
    try:
        return open_sandbox(settings)
    except SandboxUnavailable as exc:  # engine present, image not built on this host
        pytest.skip(f"Docker engine present but the sandbox image is missing: {exc}")


def test_no_engine_is_a_clear_configuration_error() -> None:
    if REASON is None:
        pytest.skip("a Docker engine is reachable here; the no-engine path cannot be shown")
    with pytest.raises(SandboxUnavailable, match="no Docker engine reachable"):
        open_sandbox(load_settings(sandbox_backend="docker"))


def test_docker_outcomes(docker_sandbox: Sandbox) -> None:
    assert docker_sandbox.run(Program("print('ok')"), timeout=30).outcome is Outcome.PASS
    assert docker_sandbox.run(Program("assert False"), timeout=30).outcome is Outcome.FAIL
    spin = docker_sandbox.run(Program("while True: pass"), timeout=2)
    assert spin.outcome is Outcome.TIMEOUT
    flood = docker_sandbox.run(Program("while True: print('x' * 10000)"), timeout=30)
    assert flood.outcome is Outcome.KILLED and flood.kill_reason is KillReason.OUTPUT


def test_docker_isolation(docker_sandbox: Sandbox) -> None:
    source = """
import os, socket
print(os.getuid())
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    print("CONNECTED")
except OSError:
    print("blocked")
try:
    open("/escape", "w")
    print("WROTE")
except OSError:
    print("read-only")
"""
    result = docker_sandbox.run(Program(source), timeout=30)
    assert result.stdout.split() == ["65534", "blocked", "read-only"]
