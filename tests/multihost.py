"""Real hosts on one machine, so multi-host launches are tested without a cluster.

Each test host is a network namespace (its own `eth1` with a private address, loopback up), a UTS
namespace (its own hostname) and a mount namespace (its own /etc/hosts and ssh client config, bound
over the machine's), with an sshd of its own that accepts a key made for the test. Everything else
(/tmp, the repository, the venv) is the machine's, so the hosts share storage as a cluster's shared
filesystem would.

A network namespace per host is not enough: Horovod's Gloo context resolves the *hostname* (ignoring
HOROVOD_GLOO_IFACE), and with the machine's hostname everywhere it resolves to loopback and the job
dies in `gloo::IoException ... connect [127.0.0.1]: Connection refused`. Hence the hostnames and
/etc/hosts, as real machines have.

The hosts are joined by one veth pair (two hosts) or by a bridge in a namespace of its own (more), and
only their own addresses exist in them: no traffic can leave the machine. Teardown kills every
process left in the namespaces and deletes them, also when the test fails or is interrupted; names
carry the owning process id, so a later run removes what a crashed one left without touching a run
still going (pytest-xdist runs tests in parallel processes).

    with two_hosts(tmp_path) as hosts:
        done = hosts.run("hosta", hosts.horovodrun() + [sys.executable, script], timeout=120)
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time

from launchers import CYCLE_TIME_MS  # the tests' Horovod coordination cycle (launchers.py says why)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
PREFIX = "tfmh"  # every namespace the harness makes is named PREFIX-<owner pid>-<random>-<role>
IFACE = "eth1"
SUBNET = "10.99.0"  # host i gets SUBNET.(i+1)/24
SSH_PORT = 2222  # each host has its own network namespace, so the port is free in all of them
SBIN = "/usr/local/sbin:/usr/sbin:/sbin"
TOOLS = ("ip", "unshare", "nsenter", "mount", "hostname", "sshd", "ssh", "ssh-keygen")
# The ssh options of the launchers' ssh to the test hosts (mpiexec's plm_rsh_args; the hosts' ssh client
# config, which horovodrun's ssh reads): the host keys are new on every run, and a prompt must fail, not
# wait. The timeouts make a dead host end the launch: without ServerAlive*, a host cut off mid-run
# (no reset, packets just lost) left mpiexec and rank 0 waiting for over 300 s (measured); with them
# its ssh gives up after 15 s and the launcher ends the job.
SSH_CLIENT_OPTIONS = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                      "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                      "-o", "ServerAliveCountMax=3")


class MultihostError(RuntimeError):
    """Setting up, using or tearing down the test hosts failed; the message names the command."""


# ------------------------------------------------------------------------------------------ commands

def _which(tool: str) -> str | None:
    """Also looks in the sbin directories, which a non-login PATH may lack (ip and sshd live there)."""
    return shutil.which(tool) or shutil.which(tool, path=SBIN)


def _tool_env() -> dict:
    """The environment of the harness' own commands: the caller's, with the sbin directories on PATH."""
    return dict(os.environ, PATH=os.pathsep.join(filter(None, [os.environ.get("PATH"), SBIN])))


def _tail(text: str | bytes | None, lines: int = 15) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _sh(*cmd: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
    """Runs a set-up or teardown command; a failure names the command and its stderr tail."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_tool_env())
    except subprocess.TimeoutExpired as error:
        raise MultihostError(f"`{' '.join(cmd)}` did not end within {timeout} s") from error
    if check and done.returncode != 0:
        output = _tail(done.stderr) or _tail(done.stdout)
        raise MultihostError(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {output}")
    return done


def _kill_session(sid: int) -> list[str]:
    """SIGKILLs every process of session `sid` and returns their command lines. A session, not a
    process group: a launcher's children may leave its group (mpiexec's ssh does), and outlive it."""
    killed = []
    for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                session = int(f.read().rsplit(")", 1)[1].split()[3])  # after "comm)": state ppid pgrp session
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            if session == sid:
                os.kill(pid, signal.SIGKILL)
                if command:  # else a zombie, waiting for its parent
                    killed.append(f"{pid} {command[:80]}")
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return killed


def _rest_of_output(process: subprocess.Popen, timeout: float = 10) -> tuple[str, str]:
    """What a killed command printed; gives up (closing the pipes) when something outside its session
    still holds them, rather than waiting for it."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as error:
        for pipe in (process.stdout, process.stderr):
            pipe.close()
        process.wait(timeout=timeout)
        return _text(error.stdout), _text(error.stderr)


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


@functools.lru_cache(maxsize=None)
def multihost_missing() -> str | None:
    """Why this machine cannot make test hosts, or None when it can. Tries what setup needs (a network
    namespace, a veth pair in it, UTS and mount namespaces) rather than guessing from the environment."""
    if os.geteuid() != 0:
        return "the multi-host tests need root (network, UTS and mount namespaces, an sshd per host)"
    missing = [tool for tool in TOOLS if not _which(tool)]
    if missing:
        return (f"{', '.join(missing)} not found: the multi-host tests need iproute2, util-linux, openssh-server and "
                f"openssh-client (`apt-get install iproute2 openssh-server openssh-client`)")
    name = _unique_name("probe")
    try:
        for cmd in (["ip", "netns", "add", name],
                    ["ip", "-n", name, "link", "add", "tfmh0", "type", "veth", "peer", "name", "tfmh1"],
                    ["ip", "netns", "exec", name, "unshare", "--uts", "--mount", "--propagation", "private",
                     "sh", "-c", "hostname probe && mount --bind /etc/hosts /etc/hosts"]):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, env=_tool_env())
            if done.returncode != 0:
                return f"`{' '.join(cmd)}` is not permitted here: {_tail(done.stderr, 3)}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, env=_tool_env())
    return None


# ------------------------------------------------------------------------------------ namespaces

def _unique_name(role: str) -> str:
    return f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-{role}"


def _netns_names() -> list[str]:
    """The harness' namespaces on this machine (`ip netns list` prints `name (id: N)` lines)."""
    listed = _sh("ip", "netns", "list").stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(PREFIX + "-")]


def _alive(pid: int) -> bool:
    """Whether the process exists (a reused pid keeps a stale namespace until that process ends too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(netns: str, grace: float = 3.0) -> None:
    """SIGTERM to every process in the namespace, SIGKILL to those still there after `grace` s. Only
    processes this harness started can be in there: sshds, the hosts' anchors, launched commands."""
    sig, deadline = signal.SIGTERM, time.monotonic() + grace
    while True:
        pids = [int(p) for p in _sh("ip", "netns", "pids", netns, check=False).stdout.split()]
        if not pids:
            return
        if time.monotonic() > deadline:
            if sig == signal.SIGKILL:
                raise MultihostError(f"processes {pids} in network namespace {netns} survived SIGKILL")
            sig, deadline = signal.SIGKILL, time.monotonic() + grace
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(0.1)


def _delete_namespace(netns: str) -> None:
    """Kills what runs in it, deletes its links (the veth ends; a peer goes with its end) and the namespace."""
    _kill_namespace_processes(netns)
    links = _sh("ip", "-n", netns, "-o", "link", "show", check=False).stdout.splitlines()
    for name in (line.split(":")[1].strip().split("@")[0] for line in links if ":" in line):
        if name != "lo":
            _sh("ip", "-n", netns, "link", "del", name, check=False)
    _sh("ip", "netns", "del", netns)


def remove_stale() -> list[str]:
    """Deletes the namespaces of harness runs whose process is gone (a crash, a SIGKILL); returns them."""
    stale = []
    for netns in _netns_names():
        match = re.match(rf"{PREFIX}-(\d+)-", netns)
        if match and not _alive(int(match.group(1))):
            _delete_namespace(netns)
            stale.append(netns)
    return stale


# ----------------------------------------------------------------------------------------- hosts

@dataclasses.dataclass
class Host:
    name: str
    address: str
    netns: str
    anchor: subprocess.Popen | None = None  # `sleep` holding the host's UTS and mount namespaces
    sshd: subprocess.Popen | None = None


class Hosts:
    """The test hosts of one test: `names`, `addresses` (name -> address on `iface`), `ssh_port`, `key`
    (the private key every host accepts for root), and commands to run on them."""

    def __init__(self, directory: str, names: tuple[str, ...]):
        self.dir = directory
        self.names = list(names)
        self.addresses = {name: f"{SUBNET}.{i + 1}" for i, name in enumerate(names)}
        self.iface, self.ssh_port = IFACE, SSH_PORT
        self.key = os.path.join(directory, "id_ed25519")
        self.hosts = {name: Host(name, self.addresses[name], _unique_name(name)) for name in names}
        self.switch = _unique_name("switch") if len(names) > 2 else None
        self.setup_seconds = self.teardown_seconds = None

    # -------------------------------------------------------------------------------- use

    def enter(self, host: str, cwd: str = REPO) -> list[str]:
        """The command prefix that runs in `host`'s network, UTS and mount namespaces, in `cwd`."""
        return [_which("nsenter") or "nsenter", "-t", str(self.hosts[host].anchor.pid), "--net", "--uts", "--mount",
                f"--wd={cwd}", "--"]

    def run(self, host: str, cmd: list[str], timeout: float, cwd: str = REPO,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """Runs `cmd` on `host` (as its own shell would: its hostname, /etc/hosts and network), capturing
        stdout and stderr; `.seconds` is how long it took. Past `timeout` every process of the command's
        session is killed and MultihostError raised with its output: a launch that hangs is a failure."""
        start = time.monotonic()
        process = subprocess.Popen(self.enter(host, cwd) + list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, env=env, start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            state = "still running" if process.poll() is None else f"exited {process.returncode}"
            left = _kill_session(process.pid)
            stdout, stderr = _rest_of_output(process)
            raise MultihostError(f"`{' '.join(cmd)}` on {host} did not end within {timeout} s ({cmd[0]} {state}; "
                                 f"killed its session: {left}); stdout:\n{_tail(stdout, 30)}\nstderr:\n"
                                 f"{_tail(stderr, 30)}") from None
        done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        done.seconds = time.monotonic() - start
        return done

    def start(self, host: str, cmd: list[str], output, cwd: str = REPO, env: dict | None = None) -> subprocess.Popen:
        """Starts `cmd` on `host` in the background, stdout and stderr to the file object `output`. Teardown
        kills it with everything else in the host's namespaces."""
        return subprocess.Popen(self.enter(host, cwd) + list(cmd), stdout=output, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def workers(self, host: str) -> list:
        """The Horovod workers running on `host` (psutil.Process of each Python process whose environment
        has a HOROVOD_RANK), wherever they were started from: the launcher's own or one an ssh session began."""
        import psutil

        found = []
        for pid in _sh("ip", "netns", "pids", self.hosts[host].netns, check=False).stdout.split():
            try:
                process = psutil.Process(int(pid))
                if "HOROVOD_RANK" in process.environ() and "python" in os.path.basename(process.cmdline()[0]):
                    found.append(process)
            except (psutil.Error, OSError, IndexError):
                continue  # gone meanwhile, or not ours to read
        return found

    def ssh(self, host: str, target: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """`command` run on `target` through ssh from `host`, as the launchers do."""
        return self.run(host, ["ssh", *self.ssh_args(), target, command], timeout=timeout)

    def ssh_args(self) -> list[str]:
        return ["-p", str(self.ssh_port), "-i", self.key, *SSH_CLIENT_OPTIONS]

    def host_list(self, names=None) -> str:
        return ",".join(f"{name}:1" for name in (names or self.names))

    def horovodrun(self, names=None) -> list[str]:
        """horovodrun with Gloo, one rank per host, over `iface`."""
        names = names or self.names
        return self._horovodrun_to_hosts() + ["--gloo", "-np", str(len(names)), "-H", self.host_list(names)]

    def horovodrun_elastic(self, discovery_script: str, min_np: int = 1, cooldown=(10, 12)) -> list[str]:
        """horovodrun in elastic mode over all hosts, up to one worker each, the hosts offered by
        `discovery_script`; a failed host is offered again after `cooldown` seconds (Horovod's blacklist
        range). One slot per host: Horovod blacklists a failed worker's whole host."""
        return self._horovodrun_to_hosts() + [
            "-np", str(len(self.names)), "--min-np", str(min_np), "--max-np", str(len(self.names)),
            "--host-discovery-script", discovery_script, "--blacklist-cooldown-range", *map(str, cooldown)]

    def _horovodrun_to_hosts(self) -> list[str]:
        """horovodrun's options for reaching these hosts. --disable-cache: horovodrun otherwise skips its
        ssh check for an hour after one succeeded with the same arguments (~/.horovod)."""
        return [os.path.join(VENV_BIN, "horovodrun"), "--disable-cache", "--ssh-port", str(self.ssh_port),
                "--ssh-identity-file", self.key, "--network-interface", self.iface, "--cycle-time-ms", CYCLE_TIME_MS]

    def mpiexec(self, names=None) -> list[str]:
        """OpenMPI's mpiexec, one rank per host, its daemons (oob) and messages (btl) over `iface`."""
        names = names or self.names
        return ["mpiexec", "--allow-run-as-root", "-x", f"HOROVOD_CYCLE_TIME={CYCLE_TIME_MS}", "-np", str(len(names)),
                "-H", self.host_list(names),
                "--mca", "plm_rsh_args", " ".join(self.ssh_args()),
                "--mca", "btl_tcp_if_include", self.iface, "--mca", "oob_tcp_if_include", self.iface]

    def stop_sshd(self, host: str) -> None:
        """Makes `host` unreachable by ssh (its other processes keep running)."""
        sshd = self.hosts[host].sshd
        if sshd is not None and sshd.poll() is None:
            sshd.terminate()
            sshd.wait(timeout=10)

    def mount_readonly(self, host: str, path: str) -> None:
        """Makes `path` read-only on `host` alone (a bind mount in its mount namespace): a write there by
        a process of that host fails with EROFS, while the other hosts still write to the shared path."""
        prefix = self.enter(host, "/")
        _sh(*prefix, "mount", "--bind", path, path)
        _sh(*prefix, "mount", "-o", "remount,bind,ro", path)

    # ------------------------------------------------------------------------ set up / tear down

    def setup(self) -> None:
        start = time.monotonic()
        os.makedirs(self.dir, exist_ok=True)
        self._write_files()
        for host in self.hosts.values():
            _sh("ip", "netns", "add", host.netns)
        self._link()
        for host in self.hosts.values():
            self._start_anchor(host)
            self._start_sshd(host)
        self._check_ssh()
        self.setup_seconds = time.monotonic() - start

    def teardown(self) -> None:
        """Kills everything in the namespaces and deletes them; raises only after trying all of them."""
        start, errors = time.monotonic(), []
        for netns in [host.netns for host in self.hosts.values()] + [self.switch]:
            if netns and netns in _netns_names():
                try:
                    _delete_namespace(netns)
                except MultihostError as error:
                    errors.append(str(error))
        for host in self.hosts.values():
            for process in (host.sshd, host.anchor):
                if process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=10)  # reaped: killed with its namespace
                    if process.stdout:
                        process.stdout.close()
        self.teardown_seconds = time.monotonic() - start
        if errors:
            raise MultihostError("teardown of the test hosts failed: " + "; ".join(errors))

    def _write_files(self) -> None:
        """/etc/hosts and the ssh client config every host binds over the machine's, the host key, and a
        root key pair whose public half every sshd accepts."""
        with open(os.path.join(self.dir, "hosts"), "w") as f:
            f.write("127.0.0.1\tlocalhost\n" + "".join(f"{a}\t{n}\n" for n, a in self.addresses.items()))
        with open(os.path.join(self.dir, "ssh_config"), "w") as f:
            f.write("Host *\n" + "".join(f"    {o.replace('=', ' ', 1)}\n" for o in SSH_CLIENT_OPTIONS[1::2]))
        for key in ("ssh_host_ed25519_key", "id_ed25519"):
            _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"tfcnn multihost {key}", "-f",
                os.path.join(self.dir, key))
        shutil.copyfile(self.key + ".pub", os.path.join(self.dir, "authorized_keys"))

    def _link(self) -> None:
        """eth1 in every host: the two ends of one veth pair, or each a veth to a bridge in a switch namespace."""
        hosts = list(self.hosts.values())
        if self.switch is None:
            a, b = hosts
            _sh("ip", "link", "add", IFACE, "netns", a.netns, "type", "veth", "peer", "name", IFACE, "netns", b.netns)
        else:
            _sh("ip", "netns", "add", self.switch)
            _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
            for i, host in enumerate(hosts):
                _sh("ip", "link", "add", IFACE, "netns", host.netns, "type", "veth", "peer", "name", f"port{i}",
                    "netns", self.switch)
                _sh("ip", "-n", self.switch, "link", "set", f"port{i}", "master", "br0", "up")
        for host in hosts:
            _sh("ip", "-n", host.netns, "addr", "add", f"{host.address}/24", "dev", IFACE)
            _sh("ip", "-n", host.netns, "link", "set", IFACE, "up")
            _sh("ip", "-n", host.netns, "link", "set", "lo", "up")

    def _start_anchor(self, host: Host, timeout: float = 30) -> None:
        """A process that holds the host's UTS and mount namespaces (in its network namespace), with the
        hostname set and the host's files bound; every command on the host enters its namespaces."""
        binds = [(os.path.join(self.dir, "hosts"), "/etc/hosts")]
        if os.path.isfile("/etc/ssh/ssh_config"):  # else ssh has no system config to replace
            binds.append((os.path.join(self.dir, "ssh_config"), "/etc/ssh/ssh_config"))
        script = f'hostname {host.name} && ' + "".join(f'mount --bind "{s}" "{t}" && ' for s, t in binds)
        script += 'echo ready && exec sleep infinity'
        cmd = ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--propagation", "private",
               "sh", "-c", script]
        log_path = os.path.join(self.dir, f"anchor-{host.name}.log")
        with open(log_path, "w") as log:
            host.anchor = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=_tool_env())
        ready, _, _ = select.select([host.anchor.stdout], [], [], timeout)
        line = host.anchor.stdout.readline() if ready else ""
        if line.strip() != "ready":
            raise MultihostError(f"`{' '.join(cmd)}` did not make host {host.name} (exit {host.anchor.poll()}): "
                                 f"{_tail(open(log_path).read())}")

    def _start_sshd(self, host: Host, timeout: float = 30) -> None:
        """sshd in the host's namespaces, root by the test key only. Its sessions' PATH has the venv and
        OpenMPI first: horovodrun runs `cd {cwd} ; {command}` remotely, mpiexec runs `orted`."""
        path = [VENV_BIN] + [os.path.dirname(_which(t)) for t in ("mpiexec",) if _which(t)]
        path += ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        options = dict(PidFile=os.path.join(self.dir, f"sshd-{host.name}.pid"),
                       AuthorizedKeysFile=os.path.join(self.dir, "authorized_keys"),
                       PermitRootLogin="prohibit-password", PubkeyAuthentication="yes", PasswordAuthentication="no",
                       KbdInteractiveAuthentication="no", StrictModes="no", UsePAM="no",
                       SetEnv="PATH=" + ":".join(dict.fromkeys(path)))
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege-separation directory (its service makes it)
        cmd = [*self.enter(host.name, "/"), _which("sshd"), "-D", "-e", "-f", "/dev/null", "-p", str(self.ssh_port),
               "-h", os.path.join(self.dir, "ssh_host_ed25519_key")]
        cmd += [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]
        log_path = os.path.join(self.dir, f"sshd-{host.name}.log")
        with open(log_path, "w") as log:
            host.sshd = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while "Server listening" not in open(log_path).read():
            if host.sshd.poll() is not None or time.monotonic() > deadline:
                raise MultihostError(f"sshd of {host.name} did not start (`{' '.join(cmd)}`, exit "
                                     f"{host.sshd.poll()}): {_tail(open(log_path).read())}")
            time.sleep(0.05)

    def _check_ssh(self) -> None:
        """From the first host, ssh to every host must land on that host: a broken setup fails here, with
        ssh's message, rather than as a launcher's."""
        first = self.names[0]
        for name in self.names:
            done = self.ssh(first, name, "hostname")
            if done.returncode != 0 or done.stdout.strip() != name:
                raise MultihostError(f"ssh from {first} to {name} failed (exit {done.returncode}, printed "
                                     f"{done.stdout.strip()!r}): {_tail(done.stderr)}")


@contextlib.contextmanager
def two_hosts(directory, names: tuple[str, ...] = ("hosta", "hostb")):
    """Yields the set-up Hosts (files under `directory`), and tears them down however the block ends.
    More names make more hosts (on a bridge), e.g. for elastic runs."""
    remove_stale()
    hosts = Hosts(str(directory), tuple(names))
    try:
        hosts.setup()
        yield hosts
    finally:
        hosts.teardown()
