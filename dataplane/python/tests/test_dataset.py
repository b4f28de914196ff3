"""sluice.Dataset against the fake data service (real pipelines run by fake workers)."""

import collections
import subprocess
import sys
import threading

import numpy as np
import pytest

import sluice
from conftest import FAST

RANGE = "source:\n  range: {stop: 20, split_size: 5}\n"


def values(ds, field="value"):
    out = []
    for element in ds:
        out.append(int(element[field]))
    return out


def test_parallel_epochs_every_worker_produces_the_whole_dataset(service):
    ds = sluice.Dataset(service.address, pipeline=RANGE, **FAST)
    got = values(ds)
    assert collections.Counter(got) == collections.Counter(list(range(20)) * 2)
    assert ds.stats()["elements"] == 40
    assert ds.stats()["job_finished"]
    job = service.state()["jobs"][0]
    assert job["sharding"] == "SHARDING_OFF"
    assert job["num_epochs"] == 1


def test_distributed_epoch_reads_each_element_once(service):
    ds = sluice.Dataset(service.address, pipeline=RANGE, processing_mode="distributed_epoch", **FAST)
    assert sorted(values(ds)) == list(range(20))
    assert service.state()["jobs"][0]["sharding"] == "SHARDING_DYNAMIC"


def test_sharding_overrides_processing_mode_and_options_reach_the_dispatcher(service):
    ds = sluice.Dataset(
        service.address,
        pipeline={"source": {"range": {"stop": 6}}},
        sharding="data",
        job_name="train",
        compression="zstd",
        target_workers="any",
        num_epochs=2,
        client_host="trainer-7",
        **FAST,
    )
    assert sorted(values(ds)) == sorted(list(range(6)) * 2)
    job = service.state()["jobs"][0]
    assert job == {
        "job_name": "train",
        "dataset_id": ds.pipeline.fingerprint,
        "sharding": "SHARDING_DATA",
        "num_consumers": 0,
        "cross_job_sharing": False,
        "num_epochs": 2,
        "compression": "COMPRESSION_ZSTD",
        "target_workers": "TARGET_WORKERS_ANY",
        "client_host": "trainer-7",
        "iteration": 1,
    }
    assert set(service.state()["codecs"]) == {"COMPRESSION_ZSTD"}
    assert ds.iterator.client_host == "trainer-7"


def test_each_iter_of_a_named_dataset_is_its_next_pass(service):
    # iter() number k of a named Dataset asks for the name's iteration k (a trainer's epoch loop);
    # an anonymous one has no iteration to ask for.
    named = sluice.Dataset(service.address, pipeline=RANGE, job_name="epochs", **FAST)
    for _ in range(3):
        iter(named).close()
    iter(sluice.Dataset(service.address, pipeline=RANGE, **FAST)).close()
    assert [j["iteration"] for j in service.state()["jobs"]] == [1, 2, 3, 0]
    # Another Dataset object is another reader: it counts its own passes.
    iter(sluice.Dataset(service.address, pipeline=RANGE, job_name="epochs", **FAST)).close()
    assert service.state()["jobs"][-1]["iteration"] == 1


def test_arrays_are_numpy_views_without_copies(service):
    spec = "source:\n  synthetic: {count: 3, shape: [4, 5], dtype: float32}\n"
    ds = sluice.Dataset(service.address, pipeline=spec, **FAST)
    seen = 0
    for element in ds:
        data = element["data"]
        assert isinstance(data, np.ndarray)
        assert data.dtype == np.float32 and data.shape == (4, 5)
        assert data.flags["C_CONTIGUOUS"]
        assert not data.flags["OWNDATA"]
        assert type(data.base).__name__ == "PyCapsule"
        # Both fields view the one decoded buffer of their element.
        index = element["index"]
        lo_d, hi_d = np.byte_bounds(data)
        lo_i, hi_i = np.byte_bounds(index)
        assert abs(lo_d - lo_i) < 4096
        seen += 1
    assert seen == 6


def test_strings_become_bytes_and_object_arrays(make_service, tmp_path):
    svc = make_service("--workers", "1")
    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "alpha", "n": 1}\n{"text": "beta", "n": 2}\n{"text": "gamma", "n": 3}\n')
    spec = {"source": {"jsonl": {"files": str(path)}}}
    rows = list(sluice.Dataset(svc.address, pipeline=spec, **FAST))
    assert [r["text"] for r in rows] == [b"alpha", b"beta", b"gamma"]
    spec["steps"] = [{"batch": {"size": 2}}]
    batches = list(sluice.Dataset(svc.address, pipeline=spec, **FAST))
    assert batches[0]["text"].dtype == object
    assert list(batches[0]["text"]) == [b"alpha", b"beta"]
    assert list(batches[0]["n"]) == [1, 2]


def test_step_marks_training_steps_and_stats_reach_the_dispatcher(service):
    ds = sluice.Dataset(service.address, pipeline=RANGE, **FAST)
    it = iter(ds)
    steps = 0
    while True:
        with ds.step():
            element = next(it, None)
            if element is None:
                break
            steps += 1
    stats = ds.stats()
    assert stats["steps"] == steps + 1  # the last step only met the end
    assert stats["elements"] == 40
    assert 0.0 <= stats["wait_seconds"] <= stats["step_seconds"]
    assert stats["bytes"] > 0
    # Per task received (reported to the dispatcher); nothing lost without a worker failure.
    assert sum(stats["elements_received_by_task"].values()) == 40
    assert all(isinstance(t, int) and t > 0 for t in stats["elements_received_by_task"])
    assert stats["elements_lost_estimate"] == 0
    state = service.wait_for(lambda s: s["metrics"]["elements_total"] == 40)
    assert state["metrics"]["bytes_total"] == stats["bytes"]
    assert state["metrics"]["wait_seconds_total"] <= state["metrics"]["step_seconds_total"]


def test_step_and_stats_need_an_iterator(service):
    ds = sluice.Dataset(service.address, pipeline=RANGE, **FAST)
    with pytest.raises(RuntimeError, match="iterate the dataset first"):
        ds.stats()


def test_coordinated_reads_give_each_consumer_its_share_of_every_round(make_service):
    svc = make_service("--workers", "2", "--rounds", "6")
    results = {}

    def consume(index):
        ds = sluice.Dataset(
            svc.address, pipeline=RANGE, job_name="coord", consumer_index=index, num_consumers=2, **FAST
        )
        results[index] = [(int(e["round"]), int(e["consumer"]), int(e["task"])) for e in ds]

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for index in range(2):
        assert [r for r, _, _ in results[index]] == list(range(6))
        assert all(c == index for _, c, _ in results[index])
        # Round r is served by the (r mod 2)-th task ordered by id (job 1: tasks 100 and 101).
        assert [t for _, _, t in results[index]] == [100 + r % 2 for r in range(6)]


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="processing_mode"):
        sluice.Dataset("127.0.0.1:1", pipeline=RANGE, processing_mode="fast")
    with pytest.raises(ValueError, match="sharding"):
        sluice.Dataset("127.0.0.1:1", pipeline=RANGE, sharding="round_robin")
    with pytest.raises(ValueError, match="consumer_index and num_consumers"):
        sluice.Dataset("127.0.0.1:1", pipeline=RANGE, consumer_index=0)
    ds = sluice.Dataset("127.0.0.1:1", pipeline=RANGE, compression="snappy")
    with pytest.raises(ValueError, match="compression: expected one of auto, none, lz4, zstd"):
        iter(ds)
    # Coordinated reads without a shared job: each client would be a job of its own, and round 1
    # would never complete (it hung after one element). Refused before connecting.
    with pytest.raises(ValueError, match="job_name: coordinated reads .*num_consumers=2.* need"):
        sluice.Dataset("127.0.0.1:1", pipeline=RANGE, consumer_index=0, num_consumers=2)
    ds = sluice.Dataset("127.0.0.1:1", pipeline=RANGE, job_name="coord", consumer_index=3, num_consumers=2)
    with pytest.raises(ValueError, match="options.consumer_index"):
        iter(ds)
    with pytest.raises(ValueError, match="options.dispatcher_timeout: must be > 0"):
        iter(sluice.Dataset("127.0.0.1:1", pipeline=RANGE, dispatcher_timeout_s=0))


def test_unreachable_dispatcher_is_a_data_service_error():
    ds = sluice.Dataset("127.0.0.1:1", pipeline=RANGE, create_timeout_s=0.2)
    with pytest.raises(sluice.DataServiceError, match="UNAVAILABLE"):
        iter(ds)


def test_no_pipeline_means_the_dispatchers_default():
    # Neither a pipeline nor a dataset_id: the job reads the dispatcher's --pipeline (the
    # end-to-end test reads one); nothing is parsed or registered on this side.
    ds = sluice.Dataset("127.0.0.1:1", job_name="default", create_timeout_s=0.2)
    assert ds.pipeline is None
    with pytest.raises(sluice.DataServiceError, match="UNAVAILABLE"):
        iter(ds)


def test_a_malformed_element_from_a_worker_raises(make_service):
    svc = make_service("--workers", "1", "--corrupt_first")
    ds = sluice.Dataset(svc.address, pipeline=RANGE, **FAST)
    with pytest.raises(sluice.DataServiceError, match="bad magic") as e:
        list(ds)
    assert svc.workers[0] in str(e.value)


def _wait_in_next(service):
    """An iterator whose next() waits: no worker is on this host and LOCAL is asked for, so it
    reads nothing until the job finishes. Returns (iterator, thread, outcome)."""
    ds = sluice.Dataset(service.address, pipeline=RANGE, target_workers="local", client_host="elsewhere", **FAST)
    it = iter(ds)
    outcome = {}
    t = threading.Thread(target=lambda: outcome.__setitem__("value", next(it, "end")))
    t.start()
    # This thread keeps running Python (polling the service) while the other waits inside next().
    service.wait_for(lambda s: s["heartbeats"] >= 3 and it.stats()["waiting"] == 1)
    return it, t, outcome


def test_waiting_releases_the_gil_until_the_job_finishes(service):
    it, t, outcome = _wait_in_next(service)
    service.finish()
    t.join(timeout=10)
    assert not t.is_alive()
    assert outcome["value"] == "end"


def test_close_from_another_thread_ends_a_waiting_next(service):
    it, t, outcome = _wait_in_next(service)
    job_client_id = it.job_client_id
    it.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert outcome["value"] == "end"
    assert it.closed
    assert service.wait_for(lambda s: len(s["released"]) == 1)["released"] == [job_client_id]


def test_iterator_context_manager_releases_the_job(service):
    ds = sluice.Dataset(service.address, pipeline=RANGE, **FAST)
    with iter(ds) as it:
        first = next(it)
        assert int(first["value"]) in range(20)
        job_client_id = it.job_client_id
    assert service.wait_for(lambda s: s["released"] == [job_client_id])
    assert list(it) == []


def test_import_does_not_import_torch():
    code = "import sys, sluice; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# Run in a fresh interpreter: the deadlock needed NumPy not imported yet when the first elements
# were converted, which pytest's process (that imports numpy above) can no longer show.
_THREADS_SCRIPT = r"""
import faulthandler, sys, threading
faulthandler.dump_traceback_later(float(sys.argv[2]), exit=True)  # stacks on stderr, exit code 1
assert "numpy" not in sys.modules
import sluice
spec = "source:\n  range: {stop: 200, split_size: 10}\n"
counts = [0] * 4
errors = []
def read(i):
    try:
        with iter(sluice.Dataset(sys.argv[1], pipeline=spec, heartbeat_interval_s=0.01)) as it:
            for element in it:
                counts[i] += int(element["value"]) >= 0
    except BaseException as e:
        errors.append(repr(e))
threads = [threading.Thread(target=read, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
faulthandler.cancel_dump_traceback_later()
print("counts", counts, "errors", errors)
"""


def test_threads_reading_their_own_datasets_in_a_fresh_interpreter_do_not_deadlock(service):
    # Four threads, four datasets, NumPy not imported by anyone before: the first conversions
    # used to freeze every thread (one inside NumPy's import, the others waiting on it).
    deadline_s = 60
    proc = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT, service.address, str(deadline_s)],
        capture_output=True, text=True, timeout=deadline_s + 30,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}; stacks at the deadline:\n{proc.stderr[-6000:]}"
    # Two workers, parallel epochs: each dataset reads the range twice.
    assert "counts [400, 400, 400, 400] errors []" in proc.stdout, proc.stdout + proc.stderr
