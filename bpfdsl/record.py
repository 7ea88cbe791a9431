"""Leaf: cheap stand-ins for ``@dataclass(slots=True)`` on the load path.

Creating a dataclass exec()s generated ``__init__``/``__repr__``/``__eq__`` source
(0.3-0.7 ms per class at import, ~25 classes between ``bpfdsl attach FILE.o`` and the
kernel).  A :class:`Record` subclass declares ``__slots__`` (the field order) and writes its
own ``__init__``; it gets the dataclass behaviour users and tests see: ``repr`` as
``Name(a=1, b='x')``, ``==`` by fields for the same class, unhashable; a
:class:`FrozenRecord` is hashable by its fields (frozen-ness is by convention: not enforced).
Fields listed in ``_hidden`` are left out of repr, ``==`` and hash (``field(repr=False,
compare=False)``).  :meth:`Record.replace` is ``dataclasses.replace``; the ``dataclasses``
module's own ``replace``/``fields``/``asdict``/``is_dataclass`` work on records too (their
``__dataclass_fields__`` is built on first use, so only code that asks pays for it).
"""

from __future__ import annotations

from operator import attrgetter

_ALL_SLOTS: dict[type, list[str]] = {}  # class -> its slot names, base classes first
_VALUES: dict[type, attrgetter] = {}  # class -> getter of its compared fields, as one tuple


class _DataclassFields:
    """Class attribute ``__dataclass_fields__`` computed on first access (per class), so
    ``dataclasses.replace(record, ...)`` & co. accept records like dataclass instances."""

    def __get__(self, obj, cls) -> dict:
        import dataclasses  # noqa: PLC0415 (only for callers of the dataclasses module)

        fields = {}
        for name in Record._all_slots_of(cls):
            hidden = name in cls._hidden
            f = dataclasses.field(repr=not hidden, compare=not hidden)
            f.name, f._field_type = name, dataclasses._FIELD  # as dataclass() sets them
            fields[name] = f
        cls.__dataclass_fields__ = fields  # cached on the class itself from now on
        return fields


class Record:
    """Base of a plain ``__slots__`` class with dataclass-style repr / eq (see module)."""

    __slots__ = ()
    _hidden: tuple[str, ...] = ()
    __dataclass_fields__ = _DataclassFields()

    def _fields(self) -> list[str]:
        return [n for n in self._all_slots() if n not in self._hidden]

    def _values(self) -> tuple:
        get = _VALUES.get(type(self))
        if get is None:
            names = self._fields()
            # attrgetter of one name returns the value itself: add a dummy to keep a tuple
            get = _VALUES[type(self)] = attrgetter(*names, *names[:1] if len(names) < 2 else ())
        return get(self)

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields())
        return f"{type(self).__qualname__}({args})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  (mutable, like an unfrozen dataclass)

    def replace(self, **changes):
        """A copy with ``changes`` applied (``dataclasses.replace``); fields by name."""
        kw = {n: getattr(self, n) for n in self._all_slots()}
        kw.update(changes)
        return type(self)(**kw)

    def _all_slots(self) -> list[str]:
        return Record._all_slots_of(type(self))

    @staticmethod
    def _all_slots_of(klass: type) -> list[str]:
        names = _ALL_SLOTS.get(klass)
        if names is None:
            names = _ALL_SLOTS[klass] = [
                n for c in reversed(klass.__mro__) for n in c.__dict__.get("__slots__", ())
            ]
        return names


class FrozenRecord(Record):
    """A :class:`Record` that is hashable by its fields (``@dataclass(frozen=True)``)."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())
