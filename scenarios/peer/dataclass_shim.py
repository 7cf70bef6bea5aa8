"""torch 1.13's DCP modules (torch.distributed._shard) declare a dataclass
field whose default is an unhashable dataclass instance, which Python 3.11
rejects ("mutable default ... is not allowed"). allow_unhashable_dataclass_defaults()
lets such defaults through as Python 3.10 did; call it before importing torch.
Shared by the peer tests (torch_peer.py) and the bench peer (bench/peer/dcp_peer.py);
idempotent, and a no-op before Python 3.11.
"""
import dataclasses
import sys


def allow_unhashable_dataclass_defaults():
    if sys.version_info < (3, 11) or getattr(dataclasses._get_field, "_distckpt", False):
        return
    original = dataclasses._get_field

    def get_field(cls, name, type_, *rest):
        default = cls.__dict__.get(name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            default = default.default
        kind = type(default)
        if default is not dataclasses.MISSING and kind.__hash__ is None and kind not in (list, dict, set):
            kind.__hash__ = object.__hash__
            try:
                return original(cls, name, type_, *rest)
            finally:
                kind.__hash__ = None
        return original(cls, name, type_, *rest)

    get_field._distckpt = True
    dataclasses._get_field = get_field
