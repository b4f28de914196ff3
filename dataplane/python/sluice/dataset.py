"""The Python face of the Sluice data-service client (see docs/dataservice-client.md)."""

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass

from . import _sluice

_PROCESSING_MODES = {"parallel_epochs": "off", "distributed_epoch": "dynamic"}
_SHARDINGS = ("off", "dynamic", "file", "data")
_SPEC_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class PipelineSpec:
    """A pipeline spec checked by the C++ parser: the text to send and its canonical form."""

    text: str
    filename: str
    canonical_yaml: str
    fingerprint: str  # the dataset id the dispatcher will assign


def parse_pipeline(pipeline):
    """Parses a pipeline given as YAML/JSON text, a dict, or a path to a spec file.

    Parsing goes through the C++ spec parser, so errors are the same as everywhere else
    (they name the file, line, column and field). Raises ValueError on a bad spec.
    """
    if isinstance(pipeline, PipelineSpec):
        return pipeline
    if isinstance(pipeline, Mapping):
        text, filename = json.dumps(pipeline), "<dict>"
    elif isinstance(pipeline, os.PathLike):
        filename = os.fspath(pipeline)
        text = _read_spec_file(filename)
    elif isinstance(pipeline, bytes):
        text, filename = pipeline.decode("utf-8"), "<bytes>"
    elif isinstance(pipeline, str):
        looks_like_path = "\n" not in pipeline and (
            os.path.isfile(pipeline) or pipeline.strip().endswith(_SPEC_SUFFIXES)
        )
        if looks_like_path:
            filename = pipeline.strip()
            text = _read_spec_file(filename)
        else:
            text, filename = pipeline, "<string>"
    else:
        raise TypeError(
            f"pipeline: expected YAML text, a dict or a path, got {type(pipeline).__name__}"
        )
    canonical_yaml, fingerprint = _sluice.parse_pipeline(text, filename)
    return PipelineSpec(text, filename, canonical_yaml, fingerprint)


def _read_spec_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot open the pipeline spec ({e.strerror})") from None


class Dataset:
    """An iterable over a data-service job. Each iter() starts a client (a new job unless
    job_name names a shared one) and yields dicts of NumPy arrays.

    With job_name, each iter() is this reader's next pass (1, 2, ...) and reads the name's
    iteration of that number: the k-th passes of all readers sharing the name share iteration k,
    whose elements go to one of them each (`for epoch in range(3): for x in ds` on two trainers
    reads the data three times between them). A pass that begins after the others finished its
    iteration is empty.

    pipeline: YAML/JSON text, a dict or a path; None (with no dataset_id): the dispatcher's own
    default pipeline (its --pipeline; the DataService's spec.pipeline).
    processing_mode: 'parallel_epochs' (sharding off) or 'distributed_epoch' (dynamic);
    sharding: 'off' | 'dynamic' | 'file' | 'data' overrides processing_mode.
    consumer_index/num_consumers (both or neither): coordinated reads; they need job_name.
    compression: 'auto' | 'none' | 'lz4' | 'zstd'; target_workers: 'auto' | 'any' | 'local'.
    dispatcher_timeout_s: how long iteration goes on without the dispatcher before deciding alone:
    the end if every task read has ended, else DataServiceError UNAVAILABLE once nothing has
    arrived for as long (None: wait for the dispatcher forever).
    """

    def __init__(
        self,
        address,
        pipeline=None,
        *,
        dataset_id=None,
        job_name=None,
        processing_mode="parallel_epochs",
        sharding=None,
        consumer_index=None,
        num_consumers=None,
        compression="auto",
        target_workers="auto",
        num_epochs=1,
        cross_job_sharing=None,
        client_host=None,
        tls_ca=None,
        tls_cert=None,
        tls_key=None,
        tls_server_name=None,
        max_outstanding_requests=None,
        max_buffered_bytes=256 << 20,
        heartbeat_interval_s=0.5,
        create_timeout_s=60.0,
        dispatcher_timeout_s=120.0,
    ):
        if not isinstance(address, str) or not address:
            raise ValueError("address: expected the dispatcher's 'host:port'")
        if sharding is None:
            if processing_mode not in _PROCESSING_MODES:
                raise ValueError(
                    f"processing_mode: expected one of {', '.join(_PROCESSING_MODES)}; got {processing_mode!r}"
                )
            sharding = _PROCESSING_MODES[processing_mode]
        elif str(sharding).lower() not in _SHARDINGS:
            raise ValueError(f"sharding: expected one of {', '.join(_SHARDINGS)}; got {sharding!r}")
        if (consumer_index is None) != (num_consumers is None):
            raise ValueError("consumer_index and num_consumers: give both (coordinated reads) or neither")
        if num_consumers is not None and not job_name:
            raise ValueError(
                f"job_name: coordinated reads (num_consumers={num_consumers}) need a job_name shared by all "
                "consumers; without one each client is a job of its own and no round ever completes"
            )
        self._spec = parse_pipeline(pipeline) if pipeline is not None else None
        self._kwargs = dict(
            address=address,
            spec_text=self._spec.text if self._spec else None,
            spec_filename=self._spec.filename if self._spec else "<string>",
            dataset_id=dataset_id or "",
            job_name=job_name or "",
            sharding=str(sharding).lower(),
            num_consumers=int(num_consumers or 0),
            consumer_index=-1 if consumer_index is None else int(consumer_index),
            cross_job_sharing=None if cross_job_sharing is None else bool(cross_job_sharing),
            num_epochs=int(num_epochs),
            compression=compression,
            target_workers=target_workers,
            client_host=client_host or "",
            tls_ca=tls_ca or "",
            tls_cert=tls_cert or "",
            tls_key=tls_key or "",
            tls_server_name=tls_server_name or "",
            max_outstanding_requests=None if max_outstanding_requests is None else int(max_outstanding_requests),
            max_buffered_bytes=int(max_buffered_bytes),
            heartbeat_interval_s=float(heartbeat_interval_s),
            create_timeout_s=float(create_timeout_s),
            dispatcher_timeout_s=None if dispatcher_timeout_s is None else float(dispatcher_timeout_s),
        )
        self._iterator = None
        self._passes = 0  # iter() calls so far: the next one reads iteration _passes + 1 (named jobs)

    @property
    def pipeline(self):
        """The parsed PipelineSpec (None when reading a registered dataset_id or the dispatcher's default)."""
        return self._spec

    @property
    def job_name(self):
        return self._kwargs["job_name"] or None

    def __iter__(self):
        iteration = 0
        if self._kwargs["job_name"]:
            self._passes += 1
            iteration = self._passes
        return self._start(iteration)

    def _start(self, iteration):
        """A new iterator reading `iteration` of the named job (0: the name's current iteration,
        or the next once it finished)."""
        self._iterator = Iterator(dict(self._kwargs, iteration=iteration))
        return self._iterator

    @property
    def iterator(self):
        """The iterator made by the latest iter(), or None."""
        return self._iterator

    def step(self):
        """Context manager marking one training step on the latest iterator."""
        return self._latest("step()").step()

    def stats(self):
        """Counters of the latest iterator: wait_seconds, step_seconds, steps, elements, bytes, ..."""
        return self._latest("stats()").stats()

    def close(self):
        if self._iterator is not None:
            self._iterator.close()

    def _latest(self, what):
        if self._iterator is None:
            raise RuntimeError(f"{what} needs an iterator: iterate the dataset first (for x in ds / iter(ds))")
        return self._iterator


class Iterator:
    """One client of the job. Yields dicts {field: numpy.ndarray | bytes}; the arrays view the
    element's own buffer (no copy). Close it (or use it as a context manager) to release the job."""

    def __init__(self, kwargs):
        self._client = _sluice.Client(**kwargs)

    def __iter__(self):
        return self

    def __next__(self):
        if self._client.closed:
            raise StopIteration
        element = self._client.next()
        if element is None:
            raise StopIteration
        return element

    @contextlib.contextmanager
    def step(self):
        """Marks one training step: the time inside counts as step time; time blocked in
        next() counts as wait time (also when it happens outside a step)."""
        self._client.begin_step()
        try:
            yield self
        finally:
            self._client.end_step()

    def stats(self):
        return self._client.stats()

    def close(self):
        self._client.close()

    @property
    def closed(self):
        return self._client.closed

    @property
    def job_id(self):
        return self._client.job_id

    @property
    def job_client_id(self):
        return self._client.job_client_id

    @property
    def iteration(self):
        """Which iteration (run) of the job name this iterator reads."""
        return self._client.iteration

    @property
    def dataset_id(self):
        return self._client.dataset_id

    @property
    def client_host(self):
        return self._client.client_host

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
