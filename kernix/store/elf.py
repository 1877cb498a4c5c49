"""Structural checks of ELF files (objects and shared libraries) in pure Python.

A build output cut short, overwritten, or lacking the symbols kernix exports
is never linked, cached or loaded.  Only 64-bit little-endian ELF is read.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable

__all__ = ["ElfError", "check_elf", "check_library", "identity", "describe"]

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_SHT_DYNSYM = 11


class ElfError(ValueError):
    """A file that is not a whole ELF file, or lacks an expected symbol."""


def check_elf(path: Path, data: bytes | None = None) -> tuple[bytes, list[tuple[int, ...]]]:
    """Raise :class:`ElfError` unless ``path`` (whose bytes are ``data``, when
    read) is a whole ELF file: every table and section it names inside it;
    its bytes and its section headers."""
    if data is None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ElfError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) < _HEADER.size or data[:4] != b"\x7fELF":
        raise ElfError(f"{path} is not an ELF file (invalid ELF header, {len(data)} bytes)")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path} is not a 64-bit little-endian ELF file")
    (_, _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _) = _HEADER.unpack_from(data)
    if phoff + phentsize * phnum > len(data) or shoff + shentsize * shnum > len(data):
        raise ElfError(f"{path} is cut short ({len(data)} bytes; its tables reach past the end)")
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    for sec in sections:
        sh_type, sh_offset, sh_size = sec[1], sec[4], sec[5]
        if sh_type != 8 and sh_offset + sh_size > len(data):  # 8: SHT_NOBITS (.bss) has no bytes
            raise ElfError(f"{path} is cut short ({len(data)} bytes; a section reaches past the end)")
    return data, sections


def check_library(path: Path, symbols: Iterable[str]) -> None:
    """Raise :class:`ElfError` unless ``path`` is a whole shared library
    that exports every name in ``symbols`` (defines it in its dynamic symbol table)."""
    data, sections = check_elf(path)
    names: set[str] = set()
    for sec in sections:
        if sec[1] != _SHT_DYNSYM or sec[6] >= len(sections):
            continue
        strtab = sections[sec[6]]
        strings = data[strtab[4]:strtab[4] + strtab[5]]
        for off in range(sec[4], sec[4] + sec[5] - _SYMBOL.size + 1, _SYMBOL.size):
            st_name, _, _, st_shndx, _, _ = _SYMBOL.unpack_from(data, off)
            if st_shndx == 0:  # undefined here
                continue
            end = strings.find(b"\0", st_name)
            names.add(strings[st_name:end if end >= 0 else None].decode("ascii", "replace"))
    missing = sorted(set(symbols) - names)
    if missing:
        raise ElfError(f"{path} does not export {', '.join(missing)}")


_MACHINES = {3: "x86", 62: "x86-64", 40: "ARM", 183: "AArch64", 21: "PowerPC64", 243: "RISC-V", 22: "s390"}


def identity(header: bytes) -> tuple[int, int, int] | None:
    """``(class, byte order, machine)`` from the first 20 bytes of an ELF file
    (any: 32- or 64-bit, either byte order), or ``None`` if they are not one's."""
    if len(header) < 20 or header[:4] != b"\x7fELF" or header[5] not in (1, 2):
        return None
    return header[4], header[5], int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def describe(found: tuple[int, int, int]) -> str:
    """An :func:`identity` in words: ``"x86-64 (64-bit)"``."""
    machine = _MACHINES.get(found[2], f"ELF machine {found[2]}")
    return f"{machine} ({'64' if found[0] == 2 else '32'}-bit)"
