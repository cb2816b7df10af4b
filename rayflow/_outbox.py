"""``Outbox``: everything a task sends, batched per destination task.

Data tuples and acker traffic are kept apart. Data goes out in batches of ``batch_size``
(sent as soon as one fills, otherwise on ``flush``). Acker traffic -- inits and acks to the
ackers, results to the spouts -- is sent on the control channel, which receivers serve ahead of
data and never hold back, so a full data path cannot starve the acker. Acks for one root from
one sender are XORed together while they wait, which is exact (XOR is associative) and means a
bolt sends the acker one number per tree per batch instead of one per tuple.

The wire format (see ``DataPayload``) is columnar: a data payload holds the values of its
tuples in one list and their trees in another, so that pickling it and reading it back cost a
few list operations per tuple and no per-tuple container. When every value of a batch is a
string -- the tuples of most one-field streams: words, lines, JSON -- the list is pickled as one
string, the values joined by a separator none of them contains (``ValueColumn``), and read back
as a list by one ``split``: pickle would write and read each string on its own. The outbox only builds payloads;
the link puts them on the wire (a frame on a stream in the runtime, a queue in tests) and pickles them.
A payload that will not pickle because of one tuple's values costs only that tuple: it is
dropped, its trees fail, the error is reported, and the rest of the batch goes on.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Callable
from operator import xor
from typing import Any, ClassVar, SupportsIndex

from ._acking.anchoring import ID_TYPECODE

__all__ = [
    "AckerMail",
    "AckerPayload",
    "DataBatch",
    "DataPayload",
    "Outbox",
    "SpoutMail",
    "SpoutPayload",
    "ValueColumn",
    "c_flat_mail",
    "flat_mail",
    "join_strings",
]

DataPayload = tuple[int, list[Any], "array[int]", list[str], list[int], list[dict[int, int]]]
"""``(source task, values, trees, streams, ends, joined)``, one entry per tuple in ``values``
(``len(payload[1])`` is the number of tuples):

- the tuples before ``ends[0]`` are on ``streams[0]``, those from there to ``ends[1]`` on
  ``streams[1]``, and so on;
- ``values[i]`` is tuple ``i``'s values, or its only value when its stream has one field
  (most streams: it saves a list per tuple on both sides of the wire);
- ``trees[2i], trees[2i+1]``, 64-bit unsigned, are its root and its ``Tuple._val``; root 0
  with value 0 is a tuple in no tree, root 0 with value ``k`` one in several trees, whose
  ``{root: edge}`` is ``joined[k - 1]``. (An array -- typecode ``anchoring.ID_TYPECODE`` --
  pickles at the cost of a copy; the same numbers in a list cost ten times more.)"""


AckerPayload = tuple[int, "array[int]", "array[int]", list[int], list[int]]
"""Acker traffic to an acker task: ``(sender task, inits, acks, fails, resets)``. ``inits``
(the sender's new trees: root, checksum, root, checksum, ...) and ``acks`` (root, value, ...,
one pair per root: a sender's acks of one root are XORed into one) are flat arrays of 64-bit
ids, typecode ``anchoring.ID_TYPECODE``, for the reason the data payload's trees are one: a
list or dict of 64-bit ints costs several times more to pickle and unpickle. ``fails`` and
``resets`` (rare) are lists of roots."""

SpoutPayload = tuple["array[int]", list[int], list[int]]
"""An acker's results to a spout task: ``(acked, failed, resets)``, roots; ``acked`` (one per
spout tuple) an array as above, the rare others lists."""


SEPARATOR = "\x1f"
"""What ``ValueColumn`` joins strings with (ASCII's unit separator)."""


def _split(joined: str) -> list[str]:
    return joined.split(SEPARATOR)


def join_strings(values: list[Any], sep: str) -> str | None:
    """``sep.join(values)`` where every value is a ``str`` (not a subclass, which the joined
    string would lose) and none contains ``sep``; ``None`` otherwise, and for no values.
    (Where the C kernel runs, ``ValueColumn`` uses its ``join_strings``, which checks the types
    without a call per value: ``kernel.py``.)"""
    if values and values[0].__class__ is str and list(map(type, values)).count(str) == len(values):
        joined = sep.join(values)
        if joined.count(sep) == len(values) - 1:
            return joined
    return None


class ValueColumn(list[Any]):
    """The values of a batch: a list, which pickles as one string when every value is a
    ``str`` (not a subclass, which the string would lose) and none contains ``SEPARATOR``, and
    as a plain list otherwise. Either way it unpickles as a plain list."""

    __slots__ = ()

    join_strings: ClassVar[Callable[[list[Any], str], str | None]] = staticmethod(join_strings)
    """How the joined form is made (``join_strings``, or the C kernel's)."""

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        joined = ValueColumn.join_strings(self, SEPARATOR)
        if joined is not None:
            return _split, (joined,)
        return list, (list(self),)


class DataBatch:
    """The tuples waiting for one destination task, in the order they were emitted."""

    __slots__ = ("values", "trees", "streams", "ends", "joined", "stream")

    new_ids: ClassVar[Callable[[], list[int]]] = list
    """What ``trees`` is made by: a list, or where the C kernel runs its ``IdBuffer``
    (``kernel.py`` sets it), which holds the ids as raw 64-bit numbers that the kernel appends
    without an int per id, and which the emit paths extend (``+=``), index and measure as they
    would a list."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.values: list[Any] = []
        self.trees: list[int] = DataBatch.new_ids()
        self.streams: list[str] = []
        self.ends: list[int] = []
        self.joined: list[dict[int, int]] = []
        self.stream: str | None = None
        """The stream of the last tuple added; the emit paths compare it by identity with the
        route's own stream name, and call ``switch`` when it differs."""

    def switch(self, stream: str) -> None:
        """The tuples added from now on are on ``stream``."""
        if self.values:
            self.ends.append(len(self.values))
        self.streams.append(stream)
        self.stream = stream

    def add_tree(self, tree: int | dict[int, int], val: int) -> None:
        """Add the tree of the tuple being added (the emit paths inline the one-root case)."""
        if tree.__class__ is int:
            self.trees += (tree, val)
        else:
            self.joined.append(tree)  # type: ignore[arg-type]
            self.trees += (0, len(self.joined))

    def take(self, task_id: int) -> DataPayload:
        """The payload of everything added so far, leaving the batch empty."""
        self.ends.append(len(self.values))
        values = ValueColumn(self.values)
        trees = self.trees
        if trees.__class__ is list:
            ids = id_array(trees)
        else:  # an IdBuffer: its ids, copied through the buffer protocol
            ids = array(ID_TYPECODE)
            ids.frombytes(trees)  # type: ignore[arg-type]
        payload = (task_id, values, ids, self.streams, self.ends, self.joined)
        self._reset()
        return payload


def id_array(ids: list[int]) -> array[int]:
    """``ids`` as an id array (typecode ``ID_TYPECODE``). ``fromlist`` converts a list with
    about a fifth fewer instructions per id than ``array``'s constructor, which fetches each
    item through the sequence protocol."""
    out = array(ID_TYPECODE)
    out.fromlist(ids)
    return out


def _flat_pairs(pairs: dict[int, int]) -> array[int]:
    """``key, value, key, value, ...`` as an id array: two slice assignments and a copy, all in
    C (iterating ``items()`` makes a tuple per pair)."""
    flat = [0] * (2 * len(pairs))
    flat[::2] = pairs
    flat[1::2] = pairs.values()
    return id_array(flat)


def flat_mail(inits: dict[int, int], acks: dict[int, int], raw_acks: Any = ()) -> tuple[array[int], array[int]]:
    """``AckerMail.take``'s id arrays, flat ``root, value`` pairs: each init, in the order of
    ``inits``, with every ack of its root folded in (from ``acks``, and from ``raw_acks``: flat
    ``root, value`` pairs as the C kernel appends them); then the acks of other roots, those of
    ``acks`` in its order and then those of ``raw_acks`` in theirs -- one pair per root (what
    the acker would make of them one by one: XOR is associative). May change the dicts: the
    mail is reset after."""
    rest: list[int] = []
    if raw_acks:
        folded: dict[int, int] = {}
        pairs = iter(raw_acks)
        for root, val in zip(pairs, pairs, strict=True):
            folded[root] = folded.get(root, 0) ^ val
        for root, val in folded.items():
            if root in inits:
                inits[root] ^= val
            elif root in acks:
                acks[root] ^= val
            else:
                rest += (root, val)
    if inits and acks:
        if acks.keys() <= inits.keys():  # a chained bolt acked only the host's new trees: fold all, in C
            inits.update(zip(acks, map(xor, map(inits.__getitem__, acks), acks.values()), strict=True))
            acks.clear()
        else:
            for root in inits.keys() & acks.keys():
                inits[root] ^= acks.pop(root)
    flat_acks = _flat_pairs(acks)
    if rest:
        flat_acks.fromlist(rest)
    return _flat_pairs(inits), flat_acks


def c_flat_mail(
    kernel_flat_mail: Callable[[dict[int, int], dict[int, int], Any], tuple[Any, Any]],
    id_buffer: type,
) -> Callable[[dict[int, int], dict[int, int], Any], tuple[array[int], array[int]]]:
    """``flat_mail`` from the C kernel's, which folds into raw ids without an int per pair: its
    two ``IdBuffer``s copied into id arrays. It takes the kernel's ``IdBuffer`` (``id_buffer``)
    as ``raw_acks``; a mail made before the kernel loaded, whose ``raw_acks`` is a list, is
    flattened by ``flat_mail``."""

    def flatten(inits: dict[int, int], acks: dict[int, int], raw_acks: Any) -> tuple[array[int], array[int]]:
        if raw_acks.__class__ is not id_buffer:
            return flat_mail(inits, acks, raw_acks)
        flat_inits, flat_acks = kernel_flat_mail(inits, acks, raw_acks)
        out_inits, out_acks = array(ID_TYPECODE), array(ID_TYPECODE)
        out_inits.frombytes(flat_inits)
        out_acks.frombytes(flat_acks)
        return out_inits, out_acks

    return flatten


class AckerMail:
    """Pending messages for one acker task: ``inits`` maps root -> checksum (a spout's new
    trees), ``acks`` root -> value, XORed as acks come, until ``take`` flattens both.

    An ack of a tree whose init still waits in the same mail is folded into the init when the
    mail is taken: the acker applies ``init(root, checksum ^ value)``, exactly what the init
    and then the ack would have left (XOR is associative), as one message. That happens when a
    bolt chained to a spout shares the spout's mail (``Outbox.share_acker_mails``) and executes
    the spout's tuples before the mail goes: the acker then gets two messages per word-count
    tree instead of three, and the chained actor sends it one frame instead of two."""

    __slots__ = ("inits", "acks", "fails", "resets", "raw_acks")

    new_ids: ClassVar[Callable[[], Any]] = list
    """What ``raw_acks`` is made by: a list, which stays empty (the Python paths fold their acks
    into ``acks``), or where the C kernel runs its ``IdBuffer`` (``kernel.py``), to which the
    kernel's run loop appends ``root, value`` pairs with no int or dict write per ack; ``take``
    folds them."""

    flatten: ClassVar[Callable[[dict[int, int], dict[int, int], Any], tuple[array[int], array[int]]]] = staticmethod(
        flat_mail
    )
    """How ``take`` makes its id arrays (``flat_mail``, or the C kernel's: ``kernel.py``)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.inits: dict[int, int] = {}
        self.acks: dict[int, int] = {}
        self.fails: list[int] = []
        self.resets: list[int] = []
        self.raw_acks = AckerMail.new_ids()

    def __len__(self) -> int:
        return len(self.inits) + len(self.acks) + len(self.fails) + len(self.resets) + len(self.raw_acks) // 2

    def take(self, task_id: int) -> AckerPayload:
        """The payload (``AckerPayload``) of everything pending, leaving the mail empty; the
        sender of inits owns their trees."""
        inits, acks = AckerMail.flatten(self.inits, self.acks, self.raw_acks)
        payload = (task_id, inits, acks, self.fails, self.resets)
        self._reset()
        return payload


class SpoutMail:
    """Pending results for one spout task: trees acked, failed, or whose timeout was reset."""

    __slots__ = ("acked", "failed", "resets")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.acked: list[int] = []
        self.failed: list[int] = []
        self.resets: list[int] = []

    def __len__(self) -> int:
        return len(self.acked) + len(self.failed) + len(self.resets)

    def take(self, task_id: int) -> SpoutPayload:
        payload = (id_array(self.acked), self.failed, self.resets)
        self._reset()
        return payload


Unsendable = Callable[[BaseException, object], None]
"""Told about each tuple dropped because its values would not pickle: the error, the values (a
list, or whatever the user emitted in its place)."""


class Outbox:
    """``batches``, ``ackers`` and ``spouts`` hand out one long-lived mail object per
    destination, so that the emit and ack paths can hold on to them: sending empties a mail
    object, it never replaces it."""

    def __init__(
        self,
        task_id: int,
        batch_size: int,
        send_data: Callable[[int, Any], None],
        send_control: Callable[[int, Any], None],
        acker_tasks: list[int],
        unsendable: Unsendable | None = None,
    ) -> None:
        self.task_id = task_id
        self.batch_size = batch_size
        self._send_data = send_data
        self._send_control = send_control
        self._unsendable = unsendable
        self._batches: dict[int, DataBatch] = {}
        self._ackers = {task: AckerMail() for task in acker_tasks}
        self.acker_mails = [self._ackers[task] for task in acker_tasks]
        """Mail per acker, indexed like ``acker_tasks``: a tree's acker is ``root % len``."""
        self._spouts: dict[int, SpoutMail] = {}
        self.transferred = 0
        """Tuples sent (a tuple sent to two tasks counts twice)."""
        self.urgent = False
        """Send what waits now, not after the control linger: checkpoint traffic is set so,
        since every stateful bolt's acks (and so its spouts' pending budgets) wait for the
        checkpoint's round trip, and it is a few messages a second."""

    # -- data ---------------------------------------------------------------------------------
    def batch(self, dest: int) -> DataBatch:
        batch = self._batches.get(dest)
        if batch is None:
            batch = self._batches[dest] = DataBatch()
        return batch

    def send_batch(self, dest: int) -> None:
        """Send what waits for ``dest`` (the emit paths call this when a batch is full)."""
        payload = self._batches[dest].take(self.task_id)
        count = len(payload[1])
        try:
            self._send_data(dest, payload)
        except Exception as exc:
            payload = self._without_unpicklable(payload, exc)
            count = len(payload[1])
            if not count:
                return
            self._send_data(dest, payload)
        self.transferred += count

    def _without_unpicklable(self, payload: DataPayload, exc: Exception) -> DataPayload:
        """``payload`` less the tuples whose values do not pickle, whose trees fail; re-raises
        ``exc`` if every tuple pickles alone (the failure was not the values')."""
        task_id, values, trees, streams, ends, joined = payload
        keep = DataBatch()
        segment = 0
        for i, vals in enumerate(values):
            while i >= ends[segment]:
                segment += 1
            root, val = trees[2 * i], trees[2 * i + 1]
            tree, tree_val = (root, val) if root or not val else (joined[val - 1], 0)
            try:
                pickle.dumps(vals, protocol=5)
            except Exception as error:
                self.fail_tree(tree)
                if self._unsendable is not None:
                    self._unsendable(error, vals)
                continue
            if keep.stream != streams[segment]:
                keep.switch(streams[segment])
            keep.values.append(vals)
            keep.add_tree(tree, tree_val)
        if len(keep.values) == len(values):
            raise exc
        return keep.take(task_id)

    # -- acker traffic ------------------------------------------------------------------------
    def share_acker_mails(self, host: Outbox) -> None:
        """Put this task's acker traffic in ``host``'s mails from now on, and leave sending it
        to ``host``: what a task chained to ``host`` does (``_runtime/chain_link.py``), so that
        its acks of the host's trees fold into the host's inits (``AckerMail``) and the actor
        sends each acker one frame per flush. The payloads name ``host`` as their sender, which
        owns the inits in them; a bolt's acks and fails name no owner."""
        if len(host.acker_mails) != len(self.acker_mails):
            raise ValueError(f"task {self.task_id} and task {host.task_id} see different ackers")
        self.acker_mails = host.acker_mails
        self._ackers = {}

    def acker(self, root: int) -> AckerMail:
        """The mail of the acker that tracks ``root``'s tree."""
        mails = self.acker_mails
        return mails[root % len(mails)]

    def ack(self, root: int, val: int) -> None:
        acks = self.acker(root).acks
        acks[root] = acks.get(root, 0) ^ val

    def fail_tree(self, tree: int | dict[int, int] | None) -> None:
        """Fail every tree of a tuple (given its ``Tuple._tree``)."""
        if tree:
            for root in (tree,) if tree.__class__ is int else tree:  # type: ignore[union-attr]
                self.acker(root).fails.append(root)

    def spout(self, spout_task: int) -> SpoutMail:
        mail = self._spouts.get(spout_task)
        if mail is None:
            mail = self._spouts[spout_task] = SpoutMail()
        return mail

    # -- sending ------------------------------------------------------------------------------
    def flush_control(self) -> None:
        for boxes in (self._ackers, self._spouts):
            for dest, mail in boxes.items():
                if len(mail):
                    self._send_control(dest, mail.take(self.task_id))

    def flush_data(self) -> None:
        """Send every partial data batch."""
        for dest, batch in self._batches.items():
            if batch.values:
                self.send_batch(dest)

    def control_size(self) -> int:
        """How many acker messages wait to be sent."""
        return sum(map(len, self._ackers.values())) + sum(map(len, self._spouts.values()))

    def flush(self) -> None:
        """Send everything that waits. (Order is free: any subset of a tree's messages short of
        all of them XORs to non-zero, so no arrival order can complete a tree early.)"""
        self.urgent = False
        self.flush_control()
        self.flush_data()

    def data_empty(self) -> bool:
        return not any(b.values for b in self._batches.values())

    def is_empty(self) -> bool:
        return not any(b.values for b in self._batches.values()) and not self.control_size()
