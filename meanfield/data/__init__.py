"""Data for the experiments: real datasets from local files, synthetic teacher–student tasks, and seeded
minibatch order that checkpoints can save.

Every loader reads a folder (``root``, else [`default_root`][meanfield.data._paths.default_root]), never the network, and returns a
dataclass of tensors with a ``description`` of what was loaded. A missing dataset raises
[`DataNotFoundError`][meanfield.data._errors.DataNotFoundError] (a ``FileNotFoundError``) saying where to get it; a corrupt file raises
[`CorruptDataError`][meanfield.data._errors.CorruptDataError] (a ``ValueError``) naming the file.

* text: [`wikitext2`][meanfield.data.text.wikitext2] (word level), [`tiny_shakespeare`][meanfield.data.text.tiny_shakespeare] (character level) → [`TokenCorpus`][meanfield.data.text.TokenCorpus]
* images: [`fashion_mnist`][meanfield.data.fashion.fashion_mnist], [`cifar10`][meanfield.data.cifar.cifar10] → [`ImageDataset`][meanfield.data.images.ImageDataset]
* synthetic: [`teacher_student`][meanfield.data.teacher.teacher_student] → [`TeacherStudent`][meanfield.data.teacher.TeacherStudent]
* batching: [`Batches`][meanfield.data.batches.Batches], [`TokenBatches`][meanfield.data.batches.TokenBatches], [`iter_blocks`][meanfield.data.batches.iter_blocks]
* what is where: [`catalog`][meanfield.data.inventory.catalog], [`format_catalog`][meanfield.data.inventory.format_catalog]
"""

from ._cache import cache_dir
from ._errors import SOURCES, CorruptDataError, DataNotFoundError
from ._paths import default_root
from .batches import Batches, TokenBatches, iter_blocks
from .cifar import CIFAR10_CLASSES, cifar10
from .fashion import FASHION_CLASSES, fashion_mnist, read_idx
from .images import ImageDataset, channel_stats
from .inventory import DatasetInfo, FileInfo, catalog, format_catalog, git_blob_id, read_sha256sums, sha256
from .teacher import ACTIVATIONS, TeacherStudent, teacher_student
from .text import TokenCorpus, tiny_shakespeare, wikitext2

__all__ = [
    "ACTIVATIONS",
    "Batches",
    "CIFAR10_CLASSES",
    "CorruptDataError",
    "DataNotFoundError",
    "DatasetInfo",
    "FASHION_CLASSES",
    "FileInfo",
    "ImageDataset",
    "SOURCES",
    "TeacherStudent",
    "TokenBatches",
    "TokenCorpus",
    "cache_dir",
    "catalog",
    "channel_stats",
    "cifar10",
    "default_root",
    "fashion_mnist",
    "format_catalog",
    "git_blob_id",
    "iter_blocks",
    "read_idx",
    "read_sha256sums",
    "sha256",
    "teacher_student",
    "tiny_shakespeare",
    "wikitext2",
]
