#!/usr/bin/env python3
"""Read TensorBoard event files with the standard library alone (no
TensorFlow, no protobuf): every record's framing and masked CRC32C checked,
each Event decoded, and the scalars printed as "step tag value" lines.

usage: tfevents_read.py FILE...  (exit 1 naming the file and offset of a
record that does not check out)"""
import struct
import sys

POLY = 0x82F63B78
TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ POLY if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field, wire type, value) of a protobuf message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(buf, i)
        elif w == 1:
            v, i = buf[i:i + 8], i + 8
        elif w == 5:
            v, i = buf[i:i + 4], i + 4
        elif w == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % w)
        yield f, w, v


def main():
    for path in sys.argv[1:]:
        data = open(path, "rb").read()
        off = first = 0
        while off < len(data):
            if off + 12 > len(data):
                sys.exit("%s: a record cut short at offset %d" % (path, off))
            (n,) = struct.unpack_from("<Q", data, off)
            (lc,) = struct.unpack_from("<I", data, off + 8)
            if lc != masked(data[off:off + 8]):
                sys.exit("%s: the length's CRC is wrong at offset %d" % (path, off))
            body = data[off + 12:off + 12 + n]
            (dc,) = struct.unpack_from("<I", data, off + 12 + n)
            if dc != masked(body):
                sys.exit("%s: the data's CRC is wrong at offset %d" % (path, off))
            step, version, scalars = 0, None, []
            for f, w, v in fields(body):
                if f == 2 and w == 0:
                    step = v
                elif f == 3 and w == 2:
                    version = v.decode()
                elif f == 5 and w == 2:
                    for vf, _, value in fields(v):
                        if vf != 1:
                            continue
                        tag = simple = None
                        for ff, _, x in fields(value):
                            if ff == 1:
                                tag = x.decode()
                            elif ff == 2:
                                (simple,) = struct.unpack("<f", x)
                        scalars.append((tag, simple))
            if first == 0 and version != "brain.Event:2":
                sys.exit("%s: the first record is not the file version (%r)" % (path, version))
            first = 1
            for tag, value in scalars:
                print(step, tag, repr(value))
            off += 12 + n + 4


main()
