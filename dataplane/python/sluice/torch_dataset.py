"""A torch.utils.data.IterableDataset over a Sluice data-service job (imports torch)."""

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from .dataset import Dataset


def _to_torch(value):
    # torch.from_numpy shares the array's memory (no copy). Types torch cannot hold (object
    # arrays of bytes, uint16) and bytes scalars stay as they are.
    if isinstance(value, np.ndarray) and value.dtype != object and value.dtype != np.uint16:
        return torch.from_numpy(value)
    return value


class TorchDataset(IterableDataset):
    """Wraps a sluice.Dataset (or the Dataset arguments) and yields dicts of torch tensors.

    Use it with DataLoader(ds, batch_size=None, num_workers=0): the data service does the work.
    Several DataLoader workers only make sense on a shared job (job_name set), where each element
    goes to exactly one of them; otherwise each worker would read the whole job.
    """

    def __init__(self, dataset=None, /, **kwargs):
        super().__init__()
        if dataset is None:
            dataset = Dataset(**kwargs)
        elif kwargs:
            raise TypeError("pass either a sluice.Dataset or Dataset arguments, not both")
        if not isinstance(dataset, Dataset):
            raise TypeError(f"expected a sluice.Dataset, got {type(dataset).__name__}")
        self.dataset = dataset

    def __iter__(self):
        info = get_worker_info()
        if info is not None and info.num_workers > 1 and not self.dataset.job_name:
            raise RuntimeError(
                "TorchDataset in a DataLoader with several workers needs job_name (a shared job); "
                "otherwise every worker reads the whole job. Use num_workers=0."
            )
        # In a DataLoader worker process, the dataset is a copy made for each epoch's workers (unless
        # persistent_workers): its pass count says nothing. Such readers join the name's current
        # iteration, or start the next once it finished, as clients without a pass number do.
        it = iter(self.dataset) if info is None else self.dataset._start(0)
        try:
            for element in it:
                yield {k: _to_torch(v) for k, v in element.items()}
        finally:
            it.close()

    def step(self):
        return self.dataset.step()

    def stats(self):
        return self.dataset.stats()
