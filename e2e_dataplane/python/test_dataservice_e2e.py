"""The Python client against real sluice-dispatcher and sluice-worker processes."""

import collections
import os
import sys
import threading

import numpy as np
import pytest

import sluice
from conftest import FAST, DataService, poll_until, self_signed_certificate


def range_spec(n, split_size):
    return f"source:\n  range: {{stop: {n}, split_size: {split_size}}}\n"


def test_distributed_epoch_reads_each_element_exactly_once(dataservice):
    ds = sluice.Dataset(dataservice.address, pipeline=range_spec(2000, 50), processing_mode="distributed_epoch", **FAST)
    got = [int(e["value"]) for e in ds]
    assert sorted(got) == list(range(2000)), dataservice.logs()
    stats = ds.stats()
    assert stats["elements"] == 2000
    assert stats["job_finished"]
    produced = sum(dataservice.metric(w, "sluice_worker_elements_produced_total") for w in dataservice.workers)
    assert produced == 2000
    ds.close()


def test_large_elements_from_a_same_host_worker_are_writable_arrays(dataservice):
    # 64 KiB elements: above the 16 KiB floor, so a same-host worker sends them through its
    # shared-memory ring, which the client maps read-only; the binding copies those tensors into
    # arrays of their own, so writing into them (or torch in-place ops) works as for any element.
    # 1024 of them (64 MB), more than a worker's task buffer holds: the stream cannot end before the
    # client has read its first message and attached the ring. With 64 (CI, 2026-11-29) one worker
    # produced all of them in 8.5 ms, the stream ended with every element sent as bytes, its unattached
    # ring file was removed with it, and the client found no ring to open (via_shm 0).
    n = 1024
    spec = (
        "source:\n  range: {stop: 1024, split_size: 64}\n"
        "steps:\n  - map: {ops: [{reshape: {field: value, shape: [1]}}, {pad: {field: value, length: 8192}}]}\n"
    )
    ds = sluice.Dataset(dataservice.address, pipeline=spec, processing_mode="distributed_epoch", compression="none",
                        **FAST)
    got = []
    for e in ds:
        a = e["value"]
        assert a.shape == (8192,) and a.flags.writeable
        got.append(int(a[0]))
        a[:] = -1  # would fault on a read-only view of the ring
        assert int(a[8191]) == -1
    assert sorted(got) == list(range(n)), dataservice.logs()
    ds.close()
    if os.access("/dev/shm", os.W_OK):
        via_shm = sum(dataservice.metric(w, "sluice_worker_shm_elements_total") for w in dataservice.workers)
        assert via_shm > 0, dataservice.logs()


def test_parallel_epochs_read_the_dataset_once_per_worker(dataservice):
    ds = sluice.Dataset(dataservice.address, pipeline=range_spec(300, 30), **FAST)
    got = [int(e["value"]) for e in ds]
    assert collections.Counter(got) == collections.Counter(list(range(300)) * 2)
    ds.close()


def test_two_iterators_of_one_job_share_its_epoch(dataservice):
    # 4 KiB elements: the first client's streams (flow-control windows of a few MiB) cannot swallow
    # the whole epoch before the second client starts reading.
    spec = (
        "source:\n  range: {stop: 6000, split_size: 50}\n"
        "steps:\n  - map: {ops: [{reshape: {field: value, shape: [1]}}, {pad: {field: value, length: 512}}]}\n"
    )
    kwargs = dict(
        pipeline=spec,
        processing_mode="distributed_epoch",
        job_name="shared",
        compression="none",
        max_outstanding_requests=1,
        max_buffered_bytes=1024,
        **FAST,
    )
    a = iter(sluice.Dataset(dataservice.address, **kwargs))
    b = iter(sluice.Dataset(dataservice.address, **kwargs))
    assert a.job_id == b.job_id and a.job_client_id != b.job_client_id
    got = {"a": [], "b": []}
    live = {"a": a, "b": b}
    while live:  # alternate: each next() blocks until that client has an element
        for name in list(live):
            try:
                got[name].append(int(next(live[name])["value"][0]))
            except StopIteration:
                del live[name]
    assert got["a"] and got["b"]
    assert not set(got["a"]) & set(got["b"])
    assert sorted(got["a"] + got["b"]) == list(range(6000))
    a.close()
    b.close()


def _passes(dataset, passes, out):
    """`for epoch in range(passes): for x in dataset` as a trainer writes it; appends (pass, value)."""
    for epoch in range(1, passes + 1):
        for element in dataset:
            out.append((epoch, int(element["value"])))


def test_two_readers_sharing_a_job_and_repeating_share_each_pass(dataservice):
    # Two trainers each loop `for epoch in range(3): for x in ds` over one named job: their k-th
    # passes share the name's iteration k, so between them they read the data three times — not
    # four with one pass of each empty (each iter() used to join whatever iteration was current,
    # and eager prefetch let one reader finish it alone).
    kwargs = dict(pipeline=range_spec(100, 10), processing_mode="distributed_epoch", job_name="epochs", **FAST)
    got = {"a": [], "b": []}
    errors = []

    def trainer(name):
        try:
            _passes(sluice.Dataset(dataservice.address, **kwargs), 3, got[name])
        except Exception as e:  # reported below
            errors.append(f"{name}: {e!r}")

    threads = [threading.Thread(target=trainer, args=(n,)) for n in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads), (errors, dataservice.logs())
    both = got["a"] + got["b"]
    assert len(both) == 300, collections.Counter(p for p, _ in both)
    for k in (1, 2, 3):
        assert sorted(v for p, v in both if p == k) == list(range(100)), f"pass {k}"


def test_a_pass_that_begins_after_the_others_finished_its_iteration_is_empty(dataservice):
    # The limit case, deterministic: reader A makes its three passes before reader B starts. A's
    # passes are iterations 1-3; B's passes come when each is over: empty (they used to start
    # iterations 4-6, reading the data three more times).
    kwargs = dict(pipeline=range_spec(100, 10), processing_mode="distributed_epoch", job_name="late", **FAST)
    a, b = [], []
    _passes(sluice.Dataset(dataservice.address, **kwargs), 3, a)
    late = sluice.Dataset(dataservice.address, **kwargs)
    _passes(late, 3, b)
    assert [sorted(v for p, v in a if p == k) for k in (1, 2, 3)] == [list(range(100))] * 3
    assert b == []
    assert late.iterator.iteration == 3 and late.stats()["job_finished"]
    # A fourth pass of B is the name's iteration 4: new, and B reads it whole.
    fourth = [int(e["value"]) for e in late]
    assert sorted(fourth) == list(range(100))


def _import_torch():
    try:
        import torch
    except ImportError as e:
        pytest.fail(f"torch is not importable by {sys.executable} ({e}): scripts/setup.sh installs Debian's "
                    "python3-torch for /usr/bin/python3; run this suite with that interpreter (ctest does)")
    return torch


def test_torch_dataloader_over_the_service(dataservice):
    torch = _import_torch()
    spec = (
        "source:\n  range: {stop: 640, split_size: 64}\n"
        "steps:\n  - map: {ops: [{cast: {field: value, dtype: float32}}]}\n  - batch: {size: 32}\n"
    )
    ds = sluice.TorchDataset(
        sluice.Dataset(dataservice.address, pipeline=spec, processing_mode="distributed_epoch", **FAST)
    )
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    seen = []
    for batch in loader:
        with ds.step():
            x = batch["value"]
            assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and tuple(x.shape) == (32,)
            seen.extend(int(v) for v in (x * 1.0).tolist())
    assert sorted(seen) == list(range(640))
    stats = ds.stats()
    assert stats["elements"] == 20
    # The first fetch happens before the first `with ds.step()`: until then steps are implicit
    # (delivery to delivery), so that wait counts as one step of its own.
    assert stats["steps"] == 21
    ds.dataset.close()


def test_step_contexts_measure_stalls_and_reach_the_dispatcher(dataservice):
    ds = sluice.Dataset(
        dataservice.address,
        pipeline=range_spec(100000, 1000),
        processing_mode="distributed_epoch",
        job_name="stall",
        **FAST,
    )
    it = iter(ds)
    work = np.arange(20000, dtype=np.float64)
    for _ in range(300):
        element = next(it)
        with ds.step():
            work += float(element["value"])  # the "training step"
    stats = ds.stats()
    assert stats["steps"] == 301  # one implicit step (the first fetch) + 300 bracketed ones
    assert stats["elements"] == 300
    assert 0 < stats["step_seconds"]
    assert 0 <= stats["wait_seconds"] <= stats["step_seconds"]
    assert 0 <= stats["stall_ratio"] <= 1
    # The heartbeats carry the totals to the dispatcher: the autoscaler's inputs.
    d = dataservice.dispatcher
    poll_until(
        lambda: dataservice.metric(d, "sluice_client_elements_total", job="stall") >= 300,
        what="sluice_client_elements_total reaching 300",
    )
    assert dataservice.metric(d, "sluice_client_step_seconds_total", job="stall") > 0
    wait = dataservice.metric(d, "sluice_client_wait_seconds_total", job="stall")
    step = dataservice.metric(d, "sluice_client_step_seconds_total", job="stall")
    assert 0 <= wait <= step
    it.close()


def test_a_reader_ends_when_its_dispatcher_is_gone_for_good():
    # As reported: one worker, parallel epochs; one element read, then kill -9 of the dispatcher for
    # good. Every element arrived in order and then next() blocked forever. Elements of 1 MiB and a
    # 2 MiB buffer keep the worker from handing out the whole epoch before the kill.
    svc = DataService(workers=1)
    try:
        spec = (
            "source:\n  range: {stop: 100, split_size: 10}\n"
            "steps:\n  - map: {ops: [{reshape: {field: value, shape: [1]}}, {pad: {field: value, length: 131072}}]}\n"
        )
        ds = sluice.Dataset(svc.address, pipeline=spec, compression="none", max_buffered_bytes=2 << 20,
                            dispatcher_timeout_s=1.0, **FAST)
        it = iter(ds)
        got = [int(next(it)["value"][0])]
        assert not it.stats()["job_finished"]
        svc.dispatcher.kill()
        done = threading.Event()

        def read_rest():
            got.extend(int(e["value"][0]) for e in it)
            done.set()

        threading.Thread(target=read_rest, daemon=True).start()
        assert done.wait(60), f"next() still blocked 60 s after the dispatcher was killed; got {len(got)}"
        assert got == list(range(100))
        stats = it.stats()
        assert stats["ended_without_dispatcher"] and not stats["job_finished"]
        it.close()
    finally:
        svc.close()


def test_bad_pipeline_and_mismatched_job_raise_clear_errors(dataservice):
    with pytest.raises(ValueError, match="stop"):
        sluice.Dataset(dataservice.address, pipeline="source:\n  range: {}\n")
    first = iter(sluice.Dataset(dataservice.address, pipeline=range_spec(10, 5), job_name="j",
                                processing_mode="distributed_epoch", **FAST))
    with pytest.raises(sluice.DataServiceError, match="job 'j' exists with sharding DYNAMIC, request has OFF"):
        iter(sluice.Dataset(dataservice.address, pipeline=range_spec(10, 5), job_name="j", **FAST))
    first.close()


def test_mutual_tls_from_python(tmp_path):
    """The Python client reads through a dispatcher and workers that require client certificates."""
    servers_cert, servers_key = self_signed_certificate(str(tmp_path), "servers")
    client_cert, client_key = self_signed_certificate(str(tmp_path), "trainer")
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(open(servers_cert).read() + open(client_cert).read())
    tls = [f"--tls_cert={servers_cert}", f"--tls_key={servers_key}", f"--tls_ca={bundle}", "--tls_require_client_cert"]
    svc = DataService(workers=1, worker_flags=tls, dispatcher_flags=tls)
    try:
        ds = sluice.Dataset(svc.address, pipeline=range_spec(500, 50), processing_mode="distributed_epoch",
                            tls_ca=servers_cert, tls_cert=client_cert, tls_key=client_key, **FAST)
        assert sorted(int(e["value"]) for e in ds) == list(range(500)), svc.logs()
        ds.close()
        # Without a client certificate the dispatcher refuses the connection.
        with pytest.raises(Exception) as refused:
            list(sluice.Dataset(svc.address, pipeline=range_spec(10, 10), tls_ca=servers_cert,
                                heartbeat_interval_s=0.1, create_timeout_s=2.0))
        assert "dispatcher" in str(refused.value), str(refused.value)
    finally:
        svc.close()
