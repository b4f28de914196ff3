"""Python consumers as processes of their own against real sluice-dispatcher and sluice-worker
processes: coordinated reads by two trainer processes, and interpreters that exit with an open,
half-read iterator (they must exit promptly and cleanly, not hang; cf. tf.data issue 56490)."""

import json
import os
import subprocess
import sys
import textwrap
import time

from conftest import DataService

# Generous: a hang at exit is what these tests look for, not a slow start on a loaded machine.
DEADLINE_S = 90


def run_python(code, *args, timeout=DEADLINE_S):
    """Runs `code` with this interpreter (and this PYTHONPATH); returns (returncode, stdout, stderr,
    seconds). A process still running at `timeout` is killed and fails the test."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the Python process did not exit within {timeout} s (hung?)\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err, time.monotonic() - start


def write_worker_data(directory, worker, lines):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "data.jsonl"), "w") as f:
        for i in range(lines):
            f.write(json.dumps({"w": worker, "i": i}) + "\n")


CONSUMER = """
    import json, sys
    import sluice
    address, index = sys.argv[1], int(sys.argv[2])
    ds = sluice.Dataset(address, pipeline="source: {jsonl: {files: data.jsonl}}\\n", job_name="coordinated",
                        num_consumers=2, consumer_index=index, heartbeat_interval_s=0.1, create_timeout_s=30.0)
    got = [[int(e["w"]), int(e["i"])] for e in ds]
    print(json.dumps({"got": got, "rounds_skipped": ds.stats()["rounds_skipped"]}))
    ds.close()
"""


def test_coordinated_reads_by_two_python_processes(tmp_path):
    """Two trainer processes, consumer_index 0 and 1 of num_consumers=2: round r is served by one
    worker for both (the task at position r mod 2 by task id), consumer c taking its c-th element."""
    lines = 24  # per worker: 12 rounds of 2 elements
    dirs = [str(tmp_path / f"worker{w}") for w in range(2)]
    for w, d in enumerate(dirs):
        write_worker_data(d, w, lines)
    # The dispatcher lists the splits of its own file at that relative path.
    write_worker_data(str(tmp_path / "dispatcher"), 0, lines)
    svc = DataService(workers=2, worker_flags=["--round_timeout_ms=20000"], worker_dirs=dirs,
                      dispatcher_dir=str(tmp_path / "dispatcher"))
    try:
        procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(CONSUMER), svc.address, str(c)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in range(2)]
        results = []
        for c, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AssertionError(f"consumer {c} did not finish within {DEADLINE_S} s\n" + svc.logs())
            assert p.returncode == 0, f"consumer {c} failed:\n{err}\n{svc.logs()}"
            results.append(json.loads(out.strip().splitlines()[-1]))

        # Each worker's task, from its "task started" log line.
        task_worker = {}
        for index, worker in enumerate(svc.workers):
            line = worker.wait_for_line('msg="task started"')
            task_id = [part.split("=", 1)[1] for part in line.split() if part.startswith("task_id=")]
            task_worker[int(task_id[0])] = index
        assert len(task_worker) == 2
        serving = [task_worker[t] for t in sorted(task_worker)]

        got = [r["got"] for r in results]
        rounds = len(got[0])
        assert len(got[1]) == rounds
        assert rounds >= 2 * (lines // 2) - 1, results  # the first worker to run out ends the job
        for r in range(rounds):
            worker, worker_round = serving[r % 2], r // 2
            for c in range(2):
                assert got[c][r] == [worker, worker_round * 2 + c], f"round {r} consumer {c}: {got[c][r]}"
        assert [r["rounds_skipped"] for r in results] == [0, 0]
    finally:
        svc.close()


# A job of 6000 elements of 4 KiB read through a small client buffer: after 50 elements the
# client's readers wait on backpressure, its streams are full and the workers are stalled.
HALF_READ = """
    import sys
    import sluice
    spec = ("source:\\n  range: {stop: 6000, split_size: 50}\\n"
            "steps:\\n  - map: {ops: [{reshape: {field: value, shape: [1]}}, {pad: {field: value, length: 512}}]}\\n")
    ds = sluice.Dataset(sys.argv[1], pipeline=spec, processing_mode="distributed_epoch", compression="none",
                        max_buffered_bytes=32 << 10, heartbeat_interval_s=0.1, create_timeout_s=30.0)
    it = iter(ds)
    for _ in range(50):
        next(it)
    print("read", ds.stats()["elements"], flush=True)
    MODE
"""

EXITS = {
    # The interpreter finalizes the module-level iterator on its way out.
    "falls off the end": "",
    # sys.exit from the main thread with the iterator open.
    "sys.exit": "sys.exit(0)",
    # A daemon thread is blocked inside next() of a second iterator, whose job has no worker (so
    # its data never comes), when the main thread returns.
    "daemon thread blocked in next()": """
import threading
waiting = iter(sluice.Dataset(sys.argv[2], pipeline="source: {range: {stop: 10}}\\n", processing_mode="distributed_epoch",
                              heartbeat_interval_s=0.1, create_timeout_s=30.0))
started = threading.Event()
def block():
    started.set()
    next(waiting)
threading.Thread(target=block, daemon=True).start()
started.wait()
""",
    # The same, and the blocked next() is woken while the interpreter finalizes (an object's
    # __del__ closes the iterator): Python ends a daemon thread that takes the GIL back then, with
    # pthread_exit. Unwinding that through the GIL guard's destructor used to abort the process
    # ("terminate called without an active exception"); without this object that happened by
    # chance, when finalization outlasted next()'s 100 ms wake-up.
    "daemon thread in next() woken during finalization": """
import threading, time
waiting = iter(sluice.Dataset(sys.argv[2], pipeline="source: {range: {stop: 10}}\\n", processing_mode="distributed_epoch",
                              heartbeat_interval_s=0.1, create_timeout_s=30.0))
def block():
    next(waiting)
threading.Thread(target=block, daemon=True).start()
deadline = time.monotonic() + 60
while waiting.stats()["waiting"] < 1:  # the thread is inside next()
    assert time.monotonic() < deadline, "the thread never entered next()"
    time.sleep(0.01)
class CloseWhenFinalized:
    def __init__(self, it):
        self.it = it
    def __del__(self):
        self.it.close()
closer = CloseWhenFinalized(waiting)
""",
}


def test_python_exits_promptly_with_a_half_read_iterator(dataservice):
    idle = DataService(workers=0)  # a dispatcher without workers: its jobs' data never comes
    try:
        for name, mode in EXITS.items():
            code = textwrap.dedent(HALF_READ).replace("MODE", textwrap.dedent(mode).strip())
            returncode, out, err, seconds = run_python(code, dataservice.address, idle.address)
            print(f"{name}: exited with {returncode} after {seconds:.2f} s")
            assert "read 50" in out, f"{name}:\n{out}\n{err}"
            assert returncode == 0, f"{name}: exit status {returncode}\nstderr:\n{err}"
            for bad in ("Traceback", "terminate called", "Fatal Python error", "Segmentation fault"):
                assert bad not in err, f"{name}: {bad!r} in stderr:\n{err}"
    finally:
        idle.close()
