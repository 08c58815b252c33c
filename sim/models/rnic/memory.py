"""The host memory of the RNIC model: regions backed by bytearrays, found by address or R_Key."""

import enum
from dataclasses import dataclass

__all__ = ["Access", "MemoryRegion", "Memory"]


class Access(enum.IntFlag):
    """Memory region access flags (values of ``ibv_access_flags``)."""
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


@dataclass(eq=False)
class MemoryRegion:
    addr: int
    length: int
    rkey: int
    access: Access
    buf: bytearray

    def contains(self, addr, length):
        return self.addr <= addr and addr + length <= self.addr + self.length


class Memory:
    """The registered memory regions (:attr:`regions`, in the order registered)."""

    def __init__(self):
        self.regions = []

    def register(self, addr, length, rkey, access, fill=0):
        """A region of ``length`` bytes at ``addr``, every byte ``fill``; ValueError if it
        overlaps another or its R_Key is taken."""
        if length < 0 or addr < 0 or addr + length > 1 << 64:
            raise ValueError("bad address range")
        for mr in self.regions:
            if mr.rkey == rkey:
                raise ValueError(f"R_Key {rkey:#x} already registered")
            if addr < mr.addr + mr.length and mr.addr < addr + length:
                raise ValueError(f"[{addr:#x}, +{length:#x}) overlaps the region at {mr.addr:#x}")
        mr = MemoryRegion(addr, length, rkey & 0xFFFFFFFF, Access(access),
                          bytearray([fill]) * length)
        self.regions.append(mr)
        return mr

    def deregister(self, rkey):
        self.regions = [mr for mr in self.regions if mr.rkey != rkey]

    def holds(self, mr):
        """``mr`` is still registered."""
        return any(m is mr for m in self.regions)

    def at(self, addr, length):
        """The region holding ``[addr, addr + length)``, or None."""
        for mr in self.regions:
            if mr.contains(addr, length):
                return mr
        return None

    def by_rkey(self, rkey):
        for mr in self.regions:
            if mr.rkey == rkey:
                return mr
        return None

    def read(self, addr, length):
        mr = self.at(addr, length)
        if mr is None:
            raise ValueError(f"[{addr:#x}, +{length}) is not inside one memory region")
        off = addr - mr.addr
        return bytes(mr.buf[off:off + length])

    def write(self, addr, data):
        data = bytes(data)
        mr = self.at(addr, len(data))
        if mr is None:
            raise ValueError(f"[{addr:#x}, +{len(data)}) is not inside one memory region")
        off = addr - mr.addr
        mr.buf[off:off + len(data)] = data
