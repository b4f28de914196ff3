"""sluice.TorchDataset: torch tensors that share memory with the client's buffers."""

import numpy as np
import pytest

import sluice
from conftest import FAST

torch = pytest.importorskip("torch")


def test_yields_torch_tensors_through_a_dataloader(service):
    spec = "source:\n  synthetic: {count: 4, shape: [2, 3], dtype: uint8}\nsteps:\n  - batch: {size: 2}\n"
    ds = sluice.TorchDataset(sluice.Dataset(service.address, pipeline=spec, **FAST))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    batches = list(loader)
    assert len(batches) == 4  # 2 batches x 2 workers (parallel epochs)
    for b in batches:
        assert isinstance(b["data"], torch.Tensor)
        assert b["data"].dtype == torch.uint8
        assert tuple(b["data"].shape) == (2, 2, 3)
        assert b["index"].dtype == torch.int64
    assert ds.stats()["elements"] == 4


def test_conversion_shares_memory():
    from sluice.torch_dataset import _to_torch

    arr = np.arange(6, dtype=np.int32)
    t = _to_torch(arr)
    t[0] = 42
    assert arr[0] == 42
    assert _to_torch(b"raw") == b"raw"
    strings = np.array([b"a", b"b"], dtype=object)
    assert _to_torch(strings) is strings


def test_accepts_dataset_arguments_and_rejects_mixtures(service):
    ds = sluice.TorchDataset(address=service.address, pipeline="source:\n  range: {stop: 3}\n", **FAST)
    assert sorted(int(e["value"]) for e in ds) == [0, 0, 1, 1, 2, 2]
    with pytest.raises(TypeError):
        sluice.TorchDataset(ds.dataset, address=service.address)
    with pytest.raises(TypeError):
        sluice.TorchDataset(object())
