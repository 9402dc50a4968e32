"""Training across two real hosts (namespaces with their own hostname, address and sshd: multihost.py),
one rank per host, with each launcher: what test_training.py checks on one host, plus that the ranks
ran on different hosts and talked over the chosen interface, and that only rank 0 wrote the run; and an
elastic run that loses the worker of one host and takes it back.

Skips with the reason where the hosts cannot be made (not root, no sshd, no network namespaces).
"""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfcnn import checkpoints

from launchers import logged_steps, mpi_missing, wait_for
from multihost import multihost_missing, two_hosts
from testnet import TRAIN_PY

pytestmark = [pytest.mark.multihost, pytest.mark.slow]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(REPO, "tests", "scripts", "host_probe.py")
STEPS = 4
CONFIG = dict(model="testnet", image_size=32, batch_size=8, display_every=2, warmup_epochs=0, lr=0.5,
              benchmark_warmup_steps=2, num_iter=STEPS, iter_unit="batch")
RUN_FILES = {"checkpoints", "config.json", "metrics.jsonl", "tensorboard"}  # what rank 0 writes in --log_dir


def skip_unless_possible(launcher):
    missing = multihost_missing() or (mpi_missing() if launcher == "mpiexec" else None)
    if missing:
        pytest.skip(missing)


def start(hosts, launcher, config, out_dir, timeout=240):
    """Runs the probe from hosta with `launcher`, as a user on that host would."""
    prefix = hosts.horovodrun() if launcher == "horovodrun-gloo" else hosts.mpiexec()
    return hosts.run("hosta", prefix + [sys.executable, PROBE, json.dumps(config), str(out_dir)], timeout=timeout)


def launch(hosts, launcher, config, out_dir):
    """start(), which must succeed; returns its stdout."""
    done = start(hosts, launcher, config, out_dir)
    assert done.returncode == 0, (f"{launcher} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done.stdout


@pytest.mark.parametrize("launcher", ["horovodrun-gloo", "mpiexec"])
def test_two_hosts_train_one_model(stripes, tmp_path, launcher):
    skip_unless_possible(launcher)
    shared = tmp_path / "shared"  # the log dir's parent, on storage both hosts see
    shared.mkdir()
    config = dict(CONFIG, data_dir=stripes, log_dir=str(shared / "run"))
    with two_hosts(tmp_path / "hosts") as hosts:
        # Any write by a process of hostb under `shared` (rank 1 writing a checkpoint, a metric, the log
        # dir itself) now fails the run with EROFS; rank 0 on hosta writes there as usual.
        hosts.mount_readonly("hostb", str(shared))
        out = launch(hosts, launcher, config, tmp_path / "out")
    assert "2 rank(s) x batch 8 = global batch 16" in out
    where = [json.loads((tmp_path / "out" / f"host{rank}.json").read_text()) for rank in (0, 1)]

    # One rank per host, each seeing its own hostname and address on eth1 (not loopback).
    for rank, name in enumerate(["hosta", "hostb"]):
        assert where[rank]["rank"] == rank and where[rank]["size"] == 2
        assert where[rank]["hostname"] == name
        assert where[rank]["address"] == hosts.addresses[name]
        assert where[rank]["interfaces"]["eth1"] == [hosts.addresses[name]]
    # The launcher's interface choice reached the ranks, and they did talk to each other over it.
    a, b = hosts.addresses["hosta"], hosts.addresses["hostb"]
    for record in where:
        env = record["env"]
        if launcher == "horovodrun-gloo":
            assert env["HOROVOD_GLOO_IFACE"] == "eth1" and env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == a
        else:
            assert env["OMPI_MCA_btl_tcp_if_include"] == env["OMPI_MCA_oob_tcp_if_include"] == "eth1"
    assert [a, b] in where[0]["tcp"], where[0]["tcp"]
    assert [b, a] in where[1]["tcp"], where[1]["tcp"]

    # Gradients averaged across the hosts: every rank ends with the same weights, and they did train.
    r0, r1 = np.load(tmp_path / "out" / "rank0.npz"), np.load(tmp_path / "out" / "rank1.npz")
    assert r0["steps"][-1] == r1["steps"][-1] == STEPS
    weights = [k for k in r0.files if k.startswith("w")]
    assert weights
    for key in weights:
        np.testing.assert_array_equal(r0[key], r1[key], err_msg=key)
    assert not np.array_equal(r0["digests"][0], r0["digests"][-1])
    summary = json.loads((tmp_path / "out" / "summary0.json").read_text())
    assert summary["global_batch"] == 16 and summary["ranks"] == 2

    # Only rank 0 wrote the run: rank 1 saw the log dir's parent read-only and still succeeded, and
    # what is there is rank 0's (its TensorBoard file carries the writer's hostname).
    assert (where[0]["log_parent_read_only"], where[1]["log_parent_read_only"]) == (False, True)
    run = shared / "run"
    assert set(os.listdir(run)) == RUN_FILES
    assert any(name.startswith("ckpt-") for name in os.listdir(run / "checkpoints"))
    events = os.listdir(run / "tensorboard")
    assert events and all(".hosta." in name for name in events), events
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [2, 4]


@pytest.mark.parametrize("launcher", ["horovodrun-gloo", "mpiexec"])
def test_an_unreachable_host_fails_the_launch_at_once(stripes, tmp_path, launcher):
    """hostb's sshd is down: the launcher says which host it could not reach and ends, nothing trains."""
    skip_unless_possible(launcher)
    config = dict(CONFIG, data_dir=stripes, log_dir=str(tmp_path / "run"))
    with two_hosts(tmp_path / "hosts") as hosts:
        hosts.stop_sshd("hostb")
        done = start(hosts, launcher, config, tmp_path / "out", timeout=60)
    assert done.returncode != 0
    assert f"ssh: connect to host hostb port {hosts.ssh_port}: Connection refused" in done.stdout + done.stderr
    assert done.seconds < 30
    assert not (tmp_path / "run").exists() and not (tmp_path / "out").exists()


def test_an_elastic_run_survives_a_killed_worker_and_takes_it_back(stripes, tmp_path):
    """horovodrun --min-np 1 --max-np 2 over hosta and hostb, one worker each: hostb's worker killed with
    SIGKILL; the survivor rolls back to the last commit and goes on alone; the discovery script offers
    hostb again after the blacklist cooldown (10 s: long enough that the survivor re-forms alone first), a
    new worker joins there and receives the state; the run ends at its planned length with exit 0.
    (Two hosts: Horovod blacklists a failed worker's whole host, so one host with two slots could not
    survive a kill.)"""
    skip_unless_possible("horovodrun-gloo")
    discovery = tmp_path / "hosts.sh"
    discovery.write_text("#!/bin/sh\necho hosta:1\necho hostb:1\n")
    discovery.chmod(0o755)
    log_dir = tmp_path / "run"
    # examples/train.py with tests/testnet.py's models: testnet_slow's steps take long enough to kill one mid-run
    args = [*TRAIN_PY, "--elastic", "--model=testnet_slow", f"--data_dir={stripes}", "--image_size=32",
            "--batch_size=8", "--num_iter=6", "--elastic_commit_every=4", "--display_every=4",
            "--warmup_epochs=0", "--seed=1", f"--log_dir={log_dir}"]
    output = tmp_path / "job.log"
    with two_hosts(tmp_path / "hosts") as hosts, output.open("w") as log:
        job = hosts.start("hosta", hosts.horovodrun_elastic(str(discovery)) + [sys.executable] + args, log,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        wait_for(lambda: max(logged_steps(log_dir), default=0) >= 12, "step 12")
        victims = hosts.workers("hostb")
        assert len(victims) == 1, victims
        victims[0].send_signal(signal.SIGKILL)
        try:
            job.wait(timeout=400)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the elastic job did not end within 400 s after the kill:\n{output.read_text()[-3000:]}")
    out = output.read_text()
    assert job.returncode == 0, out[-3000:]
    assert "world size 2 -> 1: resuming at step" in out and "world size 1 -> 2: resuming at step" in out, out[-3000:]
    steps = logged_steps(log_dir)
    total = 6 * 192  # images; 16 per step with two workers, 8 with one
    assert steps == sorted(set(steps)) and steps[0] == 4 and max(steps) >= 12  # before the kill ...
    final = checkpoints.latest_checkpoint(str(log_dir))  # ... and after, to the end
    reader = tf.train.load_checkpoint(final)
    assert reader.get_tensor("images_seen/.ATTRIBUTES/VARIABLE_VALUE") >= total
    assert int(final.rsplit("-", 1)[1]) == steps[-1] > total // 16
    for name in reader.get_variable_to_shape_map():
        if name.startswith("model/") and "OPTIMIZER" not in name:
            assert np.all(np.isfinite(reader.get_tensor(name))), name
