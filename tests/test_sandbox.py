"""The OS boundary on its own: what an attacker with arbitrary code inside a referee sandbox can do.

The in-process guards are defence in depth; these tests assume they were all bypassed (native code, a hole not
yet found) and check what the kernel still refuses. They run as whoever runs the tests (root in CI) and, where
an ordinary user can run this interpreter, again as that user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import descendants

from kernelsmith.referee import channel
from kernelsmith.referee.sandbox import Child, Limits, isolation, package_root, redact, zygote_for

PROBE = Path(__file__).parent / "sandbox_probe.py"
SECRET_NAME = "KERNELSMITH_TEST_SANDBOX_TOKEN"
SECRET = "tok-sandbox-0123456789abcdef"

pytestmark = pytest.mark.skipif(isolation()[0] is None, reason=f"no OS isolation here: {isolation()[1]}")


def _forked(limits: Limits) -> tuple[Child, object]:
    zygote = zygote_for("cpu", None, limits)
    if zygote is None:
        pytest.skip("candidates are forked from a template only as root")
    return zygote.spawn("cpu", limits, role="exec")


def _probe(marker: Path, limits: Limits | None = None, kind: str = "bwrap") -> dict:
    argv = [str(marker), SECRET_NAME, package_root()]
    if kind == "forked":  # a candidate's sandbox forked from the template, running the probe unguarded
        child, sock = _forked(limits or Limits())
        channel.send(sock, {"op": "exec", "source": PROBE.read_text(), "argv": ["/job/probe.py", *argv]})
    else:
        child = Child.start(["{work}/probe.py", *argv], "cpu", limits or Limits(), ro_files={"probe.py": str(PROBE)})
    try:
        outcome = child.wait(time.monotonic() + 120)
        log = child.log()
    finally:
        child.close()
    assert outcome.returncode == 0, log
    line = next(line for line in log.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE "):])


@pytest.fixture(scope="module", params=["bwrap", "forked"])
def probed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """What the probe saw in a sandbox of its own (bubblewrap) and in a candidate's sandbox forked from the
    template (as root), and its marker dir on the host."""
    marker = tmp_path_factory.mktemp("marker")
    os.chmod(marker, 0o777)  # writable by anyone on the host: only the sandbox can stop the write
    old = os.environ.get(SECRET_NAME)
    os.environ[SECRET_NAME] = SECRET
    try:
        seen = _probe(marker, kind=request.param)
        seen["kind"] = request.param
    finally:
        if old is None:
            del os.environ[SECRET_NAME]
        else:
            os.environ[SECRET_NAME] = old
    time.sleep(1.5)  # the daemon it forked would have written by now
    return seen, marker


def test_runs_as_an_unprivileged_user(probed: tuple[dict, Path]) -> None:
    seen, _ = probed
    assert seen["uid"] == 65534


def test_sees_no_process_outside_the_sandbox(probed: tuple[dict, Path]) -> None:
    """Its own /proc shows the sandbox's init and itself: no pid of the host (this test's included)."""
    seen, _ = probed
    assert seen["processes"] == [1, 2] and seen["pid"] == 2


def test_cannot_signal_its_parent_or_anyone(probed: tuple[dict, Path]) -> None:
    """The parent it sees is the sandbox's own init: refused (root's, when we are root) or ignoring SIGKILL and
    SIGSTOP from inside (ours, otherwise) — the probe went on to print its report after sending both."""
    seen, _ = probed
    assert seen["ppid"] == 1
    for sent in (seen["kill_ppid"], seen["stop_ppid"]):  # a forked sandbox's init runs as the candidate's uid
        assert sent == ("refused PermissionError" if os.getuid() == 0 and seen["kind"] == "bwrap"
                        else "ok None"), sent


def test_no_secret_in_any_process_it_can_see(probed: tuple[dict, Path]) -> None:
    seen, _ = probed
    assert seen["env_secret"] is False and seen["secret_in_proc"] == []


def test_host_files_are_invisible(probed: tuple[dict, Path]) -> None:
    seen, _ = probed
    assert seen["listable"][str(probed[1])].startswith("refused")
    # Home dirs show at most the way to the interpreter (a pyenv under /root, say), nothing else.
    needed = {part for p in (sys.prefix, sys.base_prefix, os.path.realpath(sys.executable))
              for part in Path(p).parts}
    for path in ("/root", "/home", "/var"):
        got = seen["listable"][path]
        if got.startswith("ok "):
            assert set(eval(got[3:])) <= needed, (path, got)  # noqa: S307 - our probe's repr of names
    # Of the checkout only the package (and a virtual environment inside it) is there: no tests, runs, .git.
    listing = eval(seen["project"].removeprefix("ok "))  # noqa: S307 - our own probe's repr of a list of names
    assert set(listing) <= {"kernelsmith", ".venv"}, listing
    assert "shadow" not in seen["etc"] and "ssh" not in seen["etc"]


def test_writes_stay_inside(probed: tuple[dict, Path]) -> None:
    seen, marker = probed
    assert not (marker / "escaped.txt").exists()
    assert seen["write_marker"].startswith("refused")
    assert seen["write_usr"].startswith("refused")
    assert seen["write_job"].startswith("ok")  # its own scratch dir is writable
    assert seen["write_tmp"].startswith("ok") and seen["write_shm"].startswith("ok")  # private tmpfs
    assert not Path("/tmp/sandbox-probe.txt").exists() and not Path("/dev/shm/sandbox-probe").exists()


def test_no_network_and_no_way_into_the_hosts(probed: tuple[dict, Path]) -> None:
    seen, _ = probed
    assert seen["net_interfaces"] <= 1  # loopback only
    assert seen["connect"].startswith("refused")
    assert not [d for d in seen["ptrace_devices"] if d.startswith(("nvidia", "sd", "nvme", "mem", "kmsg"))]


def test_no_kernel_keyring_user_namespace_or_io_uring(probed: tuple[dict, Path]) -> None:
    """Red team, 2026-12-03: the uid's kernel keyring carried data from one candidate to the next (and to the
    host's `nobody`); a seccomp filter now refuses the keyring calls, new user namespaces and io_uring."""
    import platform

    seen, _ = probed
    if platform.machine() != "x86_64":
        pytest.skip("the seccomp filter is written for x86_64")
    for call in ("keyctl", "add_key", "unshare_user", "io_uring"):
        assert seen[call].startswith("refused"), (call, seen[call])


def test_no_process_outlives_the_sandbox(probed: tuple[dict, Path]) -> None:
    """A double-forked, setsid daemon dies with the sandbox (the PID namespace ends with its first process)."""
    _, marker = probed
    assert not (marker / "daemon.txt").exists()


def test_memory_limit_is_enforced_by_the_kernel(tmp_path: Path) -> None:
    """A runaway allocation ends at the limit within seconds, not at the deadline, and is reported as such."""
    script = tmp_path / "hog.py"
    script.write_text("b = []\nwhile True:\n    b.append(bytearray(64 << 20))\n")
    child = Child.start(["{work}/hog.py"], "cpu", Limits(memory_mb=256), ro_files={"hog.py": str(script)})
    t0 = time.monotonic()
    try:
        outcome = child.wait(time.monotonic() + 60)
    finally:
        child.close()
    assert time.monotonic() - t0 < 20
    assert outcome.memory_exceeded or outcome.returncode not in (0, None), outcome
    assert child.info["memory_limit"] in ("cgroup-v2", "cgroup-v1", "rlimit-data")


def test_output_flood_is_bounded(tmp_path: Path) -> None:
    """A gigabyte of output costs the orchestrator a bounded buffer and no disk."""
    script = tmp_path / "flood.py"
    script.write_text("import os\nblock = b'A' * (1 << 20)\nfor _ in range(1024):\n    os.write(1, block)\n"
                      "os.write(1, b'THE END')\n")
    child = Child.start(["{work}/flood.py"], "cpu", Limits(log_kb=16), ro_files={"flood.py": str(script)})
    try:
        child.wait(time.monotonic() + 120)
        log = child.log()
    finally:
        child.close()
    assert len(log) < 64 << 10 and log.endswith("THE END") and "bytes cut" in log


def test_redaction_covers_encodings() -> None:
    import base64

    secret = "sk-live-abcdefghijklmnop"
    for text in (secret, secret[::-1], base64.b64encode(secret.encode()).decode(), secret.encode().hex(),
                 "xx" + base64.b64encode(b"pad" + secret.encode()).decode()):
        out, hit = redact(f"leak: {text} end", [secret])
        assert hit and "[REDACTED]" in out, text


def _unprivileged_python() -> str | None:
    """setpriv to an ordinary uid, if that user can run this interpreter, read the package and start the
    interpreter again (what the sandbox launcher does). An interpreter under a root-only home (pyenv in a 0700
    /root) fails the last: setpriv's own exec gets through, a later one by that user is refused."""
    setpriv = shutil.which("setpriv")
    if os.getuid() != 0 or setpriv is None:
        return None
    code = "import subprocess, sys, torch, triton, kernelsmith; subprocess.run([sys.executable, '-c', ''], check=True)"
    probe = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
                           capture_output=True, timeout=120, cwd="/tmp")
    return setpriv if probe.returncode == 0 else None


@pytest.mark.skipif(_unprivileged_python() is None,
                    reason="not root, or this interpreter cannot be started again by an ordinary user")
def test_sandbox_holds_for_an_ordinary_user(tmp_path: Path) -> None:
    """The same probe, with the tests' process itself an ordinary user (unprivileged user namespaces)."""
    marker = tmp_path / "m"
    marker.mkdir(mode=0o777)
    os.chmod(marker, 0o777)
    here = str(Path(__file__).parent)
    code = (f"import json, sys; sys.path.insert(0, {here!r}); from test_sandbox import _probe; "
            f"from pathlib import Path; print('RESULT ' + json.dumps(_probe(Path({str(marker)!r}))))")
    env = {**os.environ, SECRET_NAME: SECRET}
    proc = subprocess.run([_unprivileged_python(), "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                          cwd="/tmp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[7:])
    time.sleep(1.5)
    assert seen["secret_in_proc"] == [] and not seen["env_secret"]
    assert seen["ppid"] == 1 and max(seen["processes"]) < 10
    assert seen["write_marker"].startswith("refused") and not (marker / "escaped.txt").exists()
    assert not (marker / "daemon.txt").exists()
    assert seen["connect"].startswith("refused")


def test_sandboxed_process_is_unprivileged_on_the_host() -> None:
    """Seen from the host, not from inside: the sandboxed interpreter runs as `nobody` when we are root (no user
    namespace that would map it back to root), and as our own uid otherwise — never as root."""
    child = Child.start(["-c", "import time; time.sleep(30)"], "cpu", Limits())
    try:
        deadline = time.monotonic() + 20
        uids: list[int] = []
        while time.monotonic() < deadline and not uids:
            for pid in descendants(child.proc.pid):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if b"time.sleep" in cmd and b"bwrap" not in cmd.split(b"\0")[0]:
                    uids = [int(x) for x in next(line for line in status.splitlines()
                                                 if line.startswith("Uid:")).split()[1:]]
            time.sleep(0.1)
    finally:
        child.close()
    assert uids, "the sandboxed process was not found"
    assert 0 not in uids
    assert set(uids) == ({65534} if os.getuid() == 0 else {os.getuid()})


def _run_forked(source: str, limits: Limits | None = None) -> tuple[Child, object]:
    child, sock = _forked(limits or Limits())
    channel.send(sock, {"op": "exec", "source": source, "argv": ["/job/script.py"]})
    return child, sock


def test_forked_sandbox_seen_from_the_host() -> None:
    """A candidate's sandbox forked from the template, seen from the host: nobody's uid and groups, no
    capability in any set, no new privileges, namespaces of its own (not ours, not a sibling's), no open file
    but its standard streams and its channel, and a memory cgroup of its own."""
    first, s1 = _run_forked("import time\ntime.sleep(30)\n")
    second, s2 = _run_forked("import time\ntime.sleep(30)\n")
    try:
        for child in (first, second):
            status = Path(f"/proc/{child.proc.pid}/status").read_text()
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            assert fields["Uid"].split() == ["65534"] * 4 and fields["Gid"].split() == ["65534"] * 4, status
            assert fields["Groups"].strip() == ""
            for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                assert int(fields[cap], 16) == 0, (cap, fields[cap])
            assert fields["NoNewPrivs"].strip() == "1"
            fds = sorted(int(fd) for fd in os.listdir(f"/proc/{child.proc.pid}/fd"))
            assert fds[:3] == [0, 1, 2] and len(fds) <= 4, fds  # stdin, log, log (and its channel, if held)
            assert child.info["started"] == "forked" and child.info["memory_limit"].startswith(("cgroup", "rlimit"))
        for ns in ("pid", "net", "mnt", "ipc", "uts"):
            mine = os.readlink(f"/proc/self/ns/{ns}")
            a, b = (os.readlink(f"/proc/{c.proc.pid}/ns/{ns}") for c in (first, second))
            assert a != mine and b != mine and a != b, ns
    finally:
        for child, sock in ((first, s1), (second, s2)):
            child.close()
            sock.close()  # type: ignore[attr-defined]
    assert first.proc.poll() is not None and second.proc.poll() is not None


def test_forked_sandbox_memory_limit_and_exit_status() -> None:
    """The kernel's limit ends a runaway allocation in a forked sandbox, and its death by a signal reads as
    such (the init of its PID namespace passes the candidate's end on)."""
    child, sock = _run_forked("b = []\nwhile True:\n    b.append(bytearray(64 << 20))\n", Limits(memory_mb=256))
    t0 = time.monotonic()
    try:
        outcome = child.wait(time.monotonic() + 60)
    finally:
        child.close()
        sock.close()  # type: ignore[attr-defined]
    assert time.monotonic() - t0 < 20
    assert outcome.memory_exceeded or outcome.returncode not in (0, None), outcome
    child, sock = _run_forked("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    try:
        outcome = child.wait(time.monotonic() + 30)
    finally:
        child.close()
        sock.close()  # type: ignore[attr-defined]
    assert outcome.signal_name == "SIGSEGV", outcome


def test_no_forked_sandboxes_for_cuda_where_a_forked_child_cannot_use_it() -> None:
    """The template for a GPU proves that a forked child can make a CUDA context before any candidate depends
    on it; where it cannot (here: no CUDA at all), candidates get sandboxes of their own."""
    import torch

    if zygote_for("cpu", None, Limits()) is None:
        pytest.skip("candidates are forked from a template only as root")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: tests/gpu covers the forked path there")
    assert zygote_for("cuda", None, Limits()) is None


def test_forked_sandboxes_do_not_share_terminals_and_reap_orphans() -> None:
    """Red team, 2026-12-03: sibling candidates shared the template's /dev/pts (one wrote into the other's
    terminal), and orphans piled up as zombies (PID 1 reaped only the candidate)."""
    holder, s1 = _run_forked("import os, time\nfd = os.open('/dev/ptmx', os.O_RDWR)\nos.grantpt = None\n"
                             "time.sleep(30)\n")
    looker, s2 = _run_forked(
        "import os, time\n"
        "for _ in range(50):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(0.2)\n"
        "            os._exit(0)\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)  # its own children it reaps; their orphans are PID 1's\n"
        "time.sleep(1.5)\n"
        "states = [open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[0] for p in os.listdir('/proc')"
        " if p.isdigit()]\n"
        "print('PTS', sorted(os.listdir('/dev/pts')), 'ZOMBIES', states.count('Z'), flush=True)\n")
    try:
        outcome = looker.wait(time.monotonic() + 60)
        log = looker.log()
    finally:
        for child, sock in ((holder, s1), (looker, s2)):
            child.close()
            sock.close()  # type: ignore[attr-defined]
    assert outcome.returncode == 0, log
    assert "PTS ['ptmx'] ZOMBIES 0" in log, log


def test_a_sandbox_outlives_the_thread_that_started_it() -> None:
    """Red team, 2026-12-03: a child dies with the *thread* that started it (PR_SET_PDEATHSIG), so a template or a
    kept judge started by an evaluation's thread died when that thread ended, killing other evaluations'
    candidates. Every sandbox is now started by one long-lived launcher thread."""
    import threading

    started: list[Child] = []
    t = threading.Thread(target=lambda: started.append(Child.start(["-c", "import time; time.sleep(30)"], "cpu",
                                                                   Limits())))
    t.start()
    t.join()
    try:
        time.sleep(1.0)
        assert started[0].proc.poll() is None, started[0].log()
    finally:
        started[0].close()
