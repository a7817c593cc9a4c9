"""Data input: record files, the record pipeline, datasets and the DataLoader.

- :class:`RecordWriter` / :class:`RecordReader`: an indexed, checksummed
  container of byte strings (format in ``docs/data.md``);
  :func:`encode_example` / :func:`decode_example` store dicts of arrays.
- :class:`RecordPipeline`: reader processes -> transformer processes ->
  batches of tensors in the main process, sharded by (rank, world_size)
  and shuffled per epoch (``"none"``, ``"example"``, ``"chunk"``).
- :class:`Dataset`, :class:`TensorDataset`, :class:`DataLoader`: in-memory
  datasets with optional worker processes.
"""

from ._collate import default_collate
from ._errors import DataError, DataTimeoutError, RecordError, WorkerError
from ._example import decode_example, encode_example
from ._loader import DataLoader, Dataset, TensorDataset
from ._pipeline import RecordPipeline, RecordSource, Transformer
from ._records import RecordReader, RecordWriter
from ._sampling import SHUFFLE_MODES, epoch_order, resolve_shard


def get_worker_info():
    """In a worker process of a :class:`DataLoader` or :class:`RecordPipeline`:
    its ``WorkerInfo`` (``id``, ``num_workers``, ``stage``, ``seed``,
    ``item_seed``); in any other process: None."""
    import sys
    workers = sys.modules.get(__name__ + "._workers")
    return None if workers is None else workers.get_worker_info()
