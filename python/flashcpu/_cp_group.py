"""What context parallelism over torch.distributed shares: the group, one
verdict per rank at each step (so that an error on any rank raises the same
flashcpu.Error on every rank, and no rank waits in a collective that the
others left), the signature every rank must agree on, and the exchanges."""

import ctypes
import hashlib

from . import _arrays, errors


def _as_error(error):
    """A flashcpu.Error for any exception a rank's own part raised."""
    if isinstance(error, errors.Error):
        return error
    if isinstance(error, MemoryError):
        return errors.OutOfMemoryError("OUT_OF_MEMORY", str(error))
    if isinstance(error, (TypeError, ValueError, IndexError)):
        return errors.InvalidArgumentError("INVALID_ARGUMENT",
                                           f"{type(error).__name__}: {error}")
    return errors.InternalError("INTERNAL", f"{type(error).__name__}: {error}")


class Group:
    """A torch.distributed process group whose collectives take CPU tensors
    (gloo): its rank and size, and the exchanges a call makes."""

    def __init__(self, group):
        try:
            import torch
            import torch.distributed as dist
        except ImportError as error:
            raise errors.UnsupportedError(
                "UNSUPPORTED", f"flashcpu.distributed needs torch: {error}") from None
        if not dist.is_available() or not dist.is_initialized():
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", "torch.distributed is not initialized: call "
                "torch.distributed.init_process_group(\"gloo\", ...) first")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.rank < 0:
            raise errors.InvalidArgumentError(
                "INVALID_ARGUMENT", "this process is not a member of the group")

    def agree(self, error=None, signature=None):
        """Every rank's (verdict, signature). Raises, on every rank, the
        first failing rank's error; else returns the signatures."""
        verdict = None
        if error is not None:
            error = _as_error(error)
            verdict = (type(error).__name__, error.status, error.message)
        gathered = [None] * self.size
        self.dist.all_gather_object(gathered, (verdict, signature), group=self.group)
        for r, (other, _) in enumerate(gathered):
            if other is not None:
                cls = getattr(errors, other[0], errors.Error)
                raise cls(other[1], f"rank {r}: {other[2]}")
        return [s for _, s in gathered]

    def agree_on(self, call, error, fields, extra=None):
        """agree() on a signature of (name, value) pairs and each rank's
        extra; then the same error on every rank where any rank's signature
        differs from rank 0's. Returns every rank's extra."""
        mine = None if error is not None else (tuple(v for _, v in fields), extra)
        signatures = self.agree(error, mine)
        for r in range(1, self.size):
            for i, (name, _) in enumerate(fields):
                if signatures[r][0][i] != signatures[0][0][i]:
                    cls, status = errors.InvalidArgumentError, "INVALID_ARGUMENT"
                    if name in SHAPE_FIELDS:
                        cls, status = errors.ShapeMismatchError, "SHAPE_MISMATCH"
                    raise cls(status,
                              f"{call}: the ranks disagree on {name}: rank 0 has "
                              f"{signatures[0][0][i]!r}, rank {r} has {signatures[r][0][i]!r}")
        return [s[1] for s in signatures]

    def exchange(self, own, records, root):
        """Every rank's records (float32 [n_r, floats] tensors, n_r =
        records[r]) concatenated in rank order on the ranks that receive
        (every rank when root is None); None on the others."""
        torch = self.torch
        floats = own.shape[1]
        most = max(records) if records else 0
        padded = torch.zeros((max(1, most), floats), dtype=torch.float32)
        padded[:own.shape[0]] = own
        if root is None:
            parts = [torch.empty_like(padded) for _ in range(self.size)]
            self.dist.all_gather(parts, padded, group=self.group)
        elif self.rank == root:
            parts = [torch.empty_like(padded) for _ in range(self.size)]
            self.dist.gather(padded, parts, dst=self._global(root), group=self.group)
        else:
            self.dist.gather(padded, None, dst=self._global(root), group=self.group)
            return None
        return torch.cat([parts[r][:records[r]] for r in range(self.size)])

    def _global(self, rank):
        """The default group's rank of this group's `rank` (gather's dst)."""
        if self.group is None:
            return rank
        c10d = self.dist.distributed_c10d
        find = getattr(c10d, "get_global_rank", None) or c10d._get_global_rank
        return find(self.group, rank)


SHAPE_FIELDS = {"q's batch (requests)", "q's seq (query rows)", "q's heads", "head_dim",
                "k and v heads", "v's head_dim", "q's dtype", "k's dtype", "v's dtype",
                "the block (half of q's rows)"}


def value_hash(x):
    """A digest of an array's or tensor's values in row-major order (None
    stays None): ranks compare what they pass without sending it."""
    if x is None:
        return None
    if isinstance(x, _arrays.bf16):
        x = x.array
    if _arrays.kind_of_or_none(x) == "torch":
        t = x.detach().contiguous()
        data = ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())
        return hashlib.blake2b(data + str(tuple(t.shape)).encode(), digest_size=8).hexdigest()
    import numpy
    array = numpy.ascontiguousarray(_arrays.raw(x) if not isinstance(x, (list, tuple))
                                    else numpy.asarray(x))
    return hashlib.blake2b(array.tobytes() + str(array.shape).encode(),
                           digest_size=8).hexdigest()
