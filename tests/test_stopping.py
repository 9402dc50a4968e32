"""Cluster-ready training: clean stops on a signal or a time limit (every rank at the same step, the
checkpoint of that step, exit status 75, an exact resume) and gradient accumulation (K micro-batches of
b are one step of K x b)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from tfcnn import checkpoints
from tfcnn.data import pipeline
from tfcnn.training import make_config, train
from tfcnn.training.stopping import PREEMPTED_EXIT_CODE, StopRequest, autograph_files

import testnet
from testnet import TRAIN_PY
from launchers import HOROVODRUN_GLOO, MPIEXEC, logged_steps, needs_mpi, wait_for, worker_processes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = os.path.join(REPO, "tests", "scripts", "train_probe.py")
# The stops need steps that take a while (testnet_slow's); accumulation, batch-norm free ones (testnet_nobn).
pytestmark = pytest.mark.usefixtures("testnet")
TINY = dict(model="testnet_slow", image_size=32, batch_size=8, warmup_epochs=0, lr=0.5, benchmark_warmup_steps=0,
            display_every=1, iter_unit="batch", seed=5, checkpoint_every=0)


# ------------------------------------------------------------------------------------------ flags

@pytest.mark.parametrize("overrides, match", [
    (dict(grad_accum_steps=0), r"--grad_accum_steps must be a positive integer, received: 0"),
    (dict(optimizer_batch_size=-8), r"--optimizer_batch_size must be a positive integer, received: -8"),
    (dict(stop_signals="TERM,KILL"), r"--stop_signals must be none or .* received: 'TERM,KILL' \(unknown: KILL\)"),
    (dict(stop_signals=""), r"--stop_signals must be none or"),
    (dict(max_minutes=-1.0), r"--max_minutes must be >= 0, received: -1.0"),
])
def test_bad_accumulation_and_stop_flags_name_the_flag(overrides, match):
    with pytest.raises(ValueError, match=match):
        make_config(**overrides)


def test_optimizer_batch_size_must_be_whole_micro_batches(stripes):
    with pytest.raises(ValueError, match=r"--optimizer_batch_size 100 must be a multiple of --batch_size 8 x 1 "
                                         r"rank\(s\) = 8"):
        train(make_config(**TINY, data_dir=stripes, num_iter=1, optimizer_batch_size=100))
    with pytest.raises(ValueError, match=r"--grad_accum_steps 3 contradicts --optimizer_batch_size 32 \(4 micro-batches"):
        train(make_config(**TINY, data_dir=stripes, num_iter=1, optimizer_batch_size=32, grad_accum_steps=3))


def test_signal_names_are_parsed_and_the_handlers_put_back_unless_stopping():
    from tfcnn.options import parse_signals

    assert parse_signals("sigterm, USR1,term") == ("TERM", "USR1") and parse_signals("NONE") == ()
    before = signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGINT)
    with StopRequest("USR1,INT", log=lambda *_: None) as request:
        assert request.reason() is None
    assert (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGINT)) == before  # no stop: put back
    try:
        with StopRequest("USR1,INT", log=lambda *_: None) as request:
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGUSR1)  # a second one changes nothing
            assert request.reason() == "SIGUSR1"
            with pytest.raises(KeyboardInterrupt):  # but Ctrl-C after that means: out, now
                os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGUSR1)  # stopping until the process exits: still noted, never fatal
        assert request.reason() == "SIGUSR1" and signal.getsignal(signal.SIGUSR1) == request._handle
    finally:
        signal.signal(signal.SIGUSR1, before[0])
        signal.signal(signal.SIGINT, before[1])
    with StopRequest("none", max_minutes=1e-6) as request:
        time.sleep(0.01)
        assert request.reason() == "the --max_minutes 1e-06 time limit"


def test_a_preempted_exit_is_75_whatever_stop_signals_follow(monkeypatch):
    """Python's finalization puts back the default handlers: a SIGTERM then would make the status 143. The
    exit itself is os._exit, past any teardown (its call is caught here; the processes of the stop tests
    below exit through it)."""
    from tfcnn.training import stopping

    def leave(code):
        raise SystemExit(code)

    monkeypatch.setattr(stopping.os, "_exit", leave)
    # the files of this worker's own functions stay (the time-limit test below sees a stopped run remove its own)
    monkeypatch.setattr(stopping, "remove_autograph_files", lambda: None)
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)}
    try:
        with pytest.raises(SystemExit) as exit:
            stopping.exit_preempted("TERM,USR1,INT")
        assert exit.value.code == PREEMPTED_EXIT_CODE == 75
        assert signal.getsignal(signal.SIGTERM) == signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is before[signal.SIGINT]  # Ctrl-C again still ends it at once
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


# -------------------------------------------------------------------------------- accumulation

def _train_recording_weights(config):
    """(summary, the trainable weights at the start, at the end)."""
    weights = []
    snapshot = lambda logs: weights.append([v.numpy() for v in grab.model.model.trainable_variables])  # noqa: E731
    grab = tf.keras.callbacks.LambdaCallback(on_train_begin=snapshot, on_train_end=snapshot)
    summary = train(make_config(**config), callbacks=[grab])
    return summary, *weights


@pytest.mark.slow
def test_accumulated_micro_batches_equal_one_large_batch(stripes, tmp_path):
    """4 micro-batches of 8 (asked for as --optimizer_batch_size 32) and one batch of 32: the same images,
    the same learning rate, the same weights after three optimizer steps."""
    init = testnet.write_checkpoint(tmp_path / "init", "testnet_nobn")  # no randomness but the data's
    common = dict(TINY, model="testnet_nobn", data_dir=stripes, num_iter=3, lr=0.4, init_weights=init,
                  weight_decay=1e-4, label_smoothing=0.1)
    large, initial, expected = _train_recording_weights(dict(common, batch_size=32))
    accumulated, _, weights = _train_recording_weights(dict(common, batch_size=8, optimizer_batch_size=32,
                                                            log_dir=str(tmp_path / "run")))
    assert large["global_batch"] == accumulated["global_batch"] == 32
    assert json.loads((tmp_path / "run" / "config.json").read_text())["grad_accum_steps"] == 4
    assert all(not np.allclose(a, b) for a, b in zip(initial, expected))  # every weight trained
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    lr = [json.loads(line)["lr"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert lr[0] == pytest.approx(0.4 * 32 / 256)  # the peak rate is that of the global batch of 32


def run_probe(launcher, config, out_dir, *extra, timeout=600):
    cmd = launcher + [sys.executable, PROBE, json.dumps(config), str(out_dir), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_two_ranks_accumulating_equal_two_ranks_with_the_larger_batch(stripes, tmp_path):
    """-np 2 x 2 micro-batches of 8 and -np 2 x 16 (one launch, one run after the other): one allreduce per
    optimizer step, the same weights."""
    init = testnet.write_checkpoint(tmp_path / "init", "testnet_nobn")  # no randomness but the data's
    common = dict(TINY, model="testnet_nobn", data_dir=stripes, num_iter=2, lr=0.4, init_weights=init)
    out = run_probe(HOROVODRUN_GLOO, [dict(common, batch_size=8, grad_accum_steps=2), dict(common, batch_size=16)],
                    tmp_path / "out")
    assert "2 rank(s) x batch 8 x 2 accumulated = global batch 32" in out
    assert "2 rank(s) x batch 16 = global batch 32" in out
    for rank in (0, 1):
        got, want = (np.load(tmp_path / "out" / run / f"rank{rank}.npz") for run in ("0", "1"))
        assert got["steps"].tolist() == want["steps"].tolist() == [1, 2]
        for key in (k for k in want.files if k.startswith("w")):
            np.testing.assert_allclose(got[key], want[key], rtol=2e-5, atol=2e-6, err_msg=key)


# ------------------------------------------------------------------------------------- stopping

def _start(launcher, config, out_dir, log_path, script=(PROBE,), extra=()):
    """The run in the background, its output to log_path, with the environment a user's has (horovodrun's
    grace before it kills its workers is the venv's default, tfcnn-env.pth's)."""
    args = [json.dumps(config), str(out_dir), *extra] if script == (PROBE,) else config
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(launcher + [sys.executable, *script, *args], stdout=open(log_path, "w"),
                            stderr=subprocess.STDOUT, cwd=REPO, env=env)


def _signal_repeatedly(process, sig, times=8, interval=0.25):
    """Sends `sig` to `process` now and again while it stops: a repeated signal must not spoil the stop."""
    def send():
        for _ in range(times):
            try:
                process.send_signal(sig)
            except Exception:  # gone: stopped already
                return
            time.sleep(interval)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _stopped_step(output):
    line = next(line for line in output.splitlines() if "stopped at step" in line)
    return int(line.split("stopped at step ")[1].split()[0])


@pytest.mark.slow
def test_stops_and_a_kill_then_resumes_end_with_every_variable_of_an_uninterrupted_run(stripes, tmp_path):
    """horovodrun -np 2 with a batch-norm model, interrupted three times on its way: SIGTERM (several, while
    it stops) to rank 1 alone; in the resumed run, SIGTERM to horovodrun (which passes it to every worker);
    then SIGKILL to both workers, as the OOM killer or a lost machine would, which loses the steps after the
    last checkpoint. Each stop ends both ranks after the same step, rank 0 writes that step's checkpoint,
    every rank exits 75 and so does horovodrun (patch 12). The run resumed to its end holds every variable of
    an uninterrupted one, bit for bit: weights, batch-norm moving statistics, optimizer slots and step, the
    data position (with RandAugment and MixUp on). The stop's checkpoint takes 6 s more than it would: past
    Horovod's own 5 s grace, which killed the workers before or during the save; the venv's default holds.
    The comparison itself fails when one moving statistic is one float step off. The uninterrupted run trains
    first in the launch that SIGTERM then interrupts (one launch, two runs one after the other)."""
    total = 40  # steps of 0.1 s or more: each interruption lands mid-run
    base = dict(TINY, data_dir=stripes, num_iter=total, augment="randaugment:2,9", mixup=0.2, checkpoint_every=5)
    log_dir, stop = tmp_path / "run", 0
    # the run's epoch, as its plan counts it: the stripes' train records over the 2 ranks' global batch
    train_records = pipeline.count_records(stripes, pipeline.list_shards(stripes, "train"))
    steps_per_epoch = train_records // (2 * base["batch_size"])

    def saved(step):  # the run's checkpoints: every checkpoint_every steps and at each epoch's end
        return step % base["checkpoint_every"] == 0 or step % steps_per_epoch == 0

    def just_past_a_checkpoint(step):
        """1 or 2 steps past a checkpoint, the next 3 or more away (steps take 0.1 s and more, the wait polls
        every 0.2 s): a kill there loses the steps since. (1 or 2 past a multiple of 5 alone killed at step 12
        once, just after that epoch's checkpoint, and lost nothing.)"""
        return (saved(step - 1) or saved(step - 2)) and not any(saved(s) for s in range(step, step + 3))

    for target in ("worker", "launcher", "kill"):
        log_path = tmp_path / f"{target}.log"
        config = dict(base, log_dir=str(log_dir))
        if target == "worker":
            config = [dict(base, log_dir=str(tmp_path / "straight")), config]
        job = _start(HOROVODRUN_GLOO, config, tmp_path / f"{target}_out", log_path, extra=["--slow_stop_save_s", "6"])
        wait_for(lambda: (step := max(logged_steps(log_dir), default=0)) >= stop + 3 and (
            target != "kill" or just_past_a_checkpoint(step)), f"3 steps of the run the {target} interrupts")
        signalled_at = max(logged_steps(log_dir))
        workers = worker_processes(job.pid)
        if target == "worker":
            _signal_repeatedly(next(p for (host, rank), p in workers.items() if rank == 1), signal.SIGTERM)
        elif target == "launcher":
            job.send_signal(signal.SIGTERM)
        else:
            for process in workers.values():
                process.send_signal(signal.SIGKILL)
        job.wait(timeout=120)
        out = log_path.read_text()
        if target == "kill":
            assert job.returncode not in (0, PREEMPTED_EXIT_CODE), out[-3000:]
            killed_at = max(logged_steps(log_dir))
            break
        assert job.returncode == PREEMPTED_EXIT_CODE, out[-3000:]
        assert "every process exited with status 75" in out and "[1]<stdout>:tfcnn: SIGTERM received" in out, \
            out[-3000:]
        stop = _stopped_step(out)
        assert signalled_at < stop < total, (signalled_at, stop)
        latest = checkpoints.latest_checkpoint(str(log_dir))
        assert latest.endswith(f"ckpt-{stop}") and checkpoints.describe(latest).step == stop  # complete
    reference = testnet.checkpoint_values(checkpoints.latest_checkpoint(str(tmp_path / "straight")))
    assert reference["step/.ATTRIBUTES/VARIABLE_VALUE"] == total
    restart = checkpoints.describe(checkpoints.latest_checkpoint(str(log_dir))).step
    assert stop <= restart < killed_at < total, (stop, restart, killed_at)  # the kill lost steps
    resumed = run_probe(HOROVODRUN_GLOO, dict(base, log_dir=str(log_dir)), tmp_path / "resumed")
    assert f"at step {restart}" in resumed
    steps = np.load(tmp_path / "resumed" / "rank0.npz")["steps"]
    assert steps[0] == restart + 1 and steps[-1] == total
    final = testnet.checkpoint_values(checkpoints.latest_checkpoint(str(log_dir)))
    assert final["step/.ATTRIBUTES/VARIABLE_VALUE"] == total
    testnet.assert_same_values(final, reference)
    statistic = next(name for name in final if "moving_mean" in name)
    final[statistic] = final[statistic].copy()
    first = final[statistic].flat[0]  # towards a float32 infinity: NumPy 1 (TF 2.15) steps a float64 otherwise,
    final[statistic].flat[0] = np.nextafter(first, first.dtype.type(np.inf))  # which rounds back to `first`
    with pytest.raises(AssertionError, match=f"1 of {len(reference)} variables differ .*{statistic}"):
        testnet.assert_same_values(final, reference)


@needs_mpi
@pytest.mark.slow
def test_sigusr1_to_mpiexec_stops_with_status_75(stripes, tmp_path):
    """OpenMPI's mpiexec forwards SIGUSR1 to every rank and returns the ranks' status: examples/train.py's 75."""
    log_dir, log_path = tmp_path / "run", tmp_path / "job.log"
    args = ["--model=testnet_slow", f"--data_dir={stripes}", "--image_size=32", "--batch_size=8", "--num_iter=500",
            "--iter_unit=batch", "--display_every=1", "--warmup_epochs=0", f"--log_dir={log_dir}"]
    job = _start(MPIEXEC, args, None, log_path, script=TRAIN_PY)
    wait_for(lambda: max(logged_steps(log_dir), default=0) >= 3, "step 3")
    job.send_signal(signal.SIGUSR1)
    job.wait(timeout=120)
    out = log_path.read_text()
    assert job.returncode == PREEMPTED_EXIT_CODE, out[-3000:]
    stop = _stopped_step(out)
    assert checkpoints.latest_checkpoint(str(log_dir)).endswith(f"ckpt-{stop}")
    assert out.count("SIGUSR1 received") == 2, out[-3000:]  # both ranks


def test_time_limit_stops_with_status_75_and_the_rerun_finishes_as_an_uninterrupted_run(stripes, tmp_path):
    """--max_minutes: a plain single-process run stops cleanly at the limit; the same command without it
    (or with a later limit) resumes and completes, with every variable of a run that was not stopped. The
    stopped process leaves none of TensorFlow's autograph files in its temporary directory (os._exit skips
    TensorFlow's own removal at exit)."""
    log_dir, temporary = tmp_path / "run", tmp_path / "tmp"
    temporary.mkdir()
    args = [sys.executable, *TRAIN_PY, "--model=testnet", f"--data_dir={stripes}", "--image_size=32",
            "--batch_size=8", "--num_iter=6", "--iter_unit=batch", "--warmup_epochs=0", "--display_every=1", "--seed=3",
            f"--log_dir={log_dir}", "--max_minutes=0.0001"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "TMPDIR": str(temporary)})
    assert done.returncode == PREEMPTED_EXIT_CODE, done.stdout[-2000:] + done.stderr[-2000:]
    stop = _stopped_step(done.stdout)
    assert "the --max_minutes 0.0001 time limit" in done.stdout and stop < 6
    assert checkpoints.latest_checkpoint(str(log_dir)).endswith(f"ckpt-{stop}")
    assert not list(temporary.glob("__autograph_generated_file*")), sorted(os.listdir(temporary))
    again = subprocess.run(args[:-1], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"done: steps {stop}-6" in again.stdout
    train(make_config(model="testnet", data_dir=stripes, image_size=32, batch_size=8, num_iter=6, iter_unit="batch",
                      warmup_epochs=0, display_every=1, seed=3, log_dir=str(tmp_path / "straight")))
    testnet.assert_same_values(testnet.checkpoint_values(checkpoints.latest_checkpoint(str(log_dir))),
                               testnet.checkpoint_values(checkpoints.latest_checkpoint(str(tmp_path / "straight"))))


def test_the_tests_temporary_files_are_in_the_sessions_directory(session_temporary_directory):
    """tests/conftest.py: this worker's autograph files and a started process's temporary directory are the
    session's, which the session removes before the worker exits, so that neither a training process a test
    kills nor a worker pytest-xdist kills while it exits leaves files in the system's temporary directory."""
    @tf.function
    def magnitude(x):
        if x < 0:  # a tensor's condition: autograph converts the function, writing its module to a file
            return -x
        return x

    before = autograph_files()
    assert float(magnitude(tf.constant(-2.0))) == 2.0
    written = autograph_files() - before
    assert written and {os.path.dirname(path) for path in written} == {session_temporary_directory}, written
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == session_temporary_directory
