"""Sluice: read a data-service job's elements from Python.

    import sluice
    ds = sluice.Dataset("dispatcher:5000", pipeline="pipeline.yaml", job_name="train")
    for batch in ds:                 # dicts of NumPy arrays (views, no copies)
        with ds.step():              # marks the training step: exact stall measurement
            train(batch)
    print(ds.stats())

`sluice.TorchDataset` (a torch.utils.data.IterableDataset) imports torch on first use.
"""

from ._sluice import DataServiceError
from .dataset import Dataset, Iterator, PipelineSpec, parse_pipeline

__all__ = ["Dataset", "Iterator", "PipelineSpec", "parse_pipeline", "DataServiceError", "TorchDataset"]


def __getattr__(name):
    # Lazy: importing sluice must not import torch.
    if name == "TorchDataset":
        from .torch_dataset import TorchDataset

        return TorchDataset
    raise AttributeError(f"module 'sluice' has no attribute '{name}'")
