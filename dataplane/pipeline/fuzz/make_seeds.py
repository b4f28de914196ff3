# Regenerates the binary seed inputs of corpus/tfrecord_reader and corpus/example_parser with an
# independent (bit-at-a-time) CRC-32C and a hand-written protobuf encoder. Run: /usr/bin/python3 make_seeds.py
import struct, zlib, gzip, os
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82f63b78 if crc & 1 else crc >> 1
    return crc ^ 0xffffffff
def mask(c): return ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff
def rec(d):
    l = struct.pack('<Q', len(d))
    return l + struct.pack('<I', mask(crc32c(l))) + d + struct.pack('<I', mask(crc32c(d)))
def varint(v):
    v &= (1<<64)-1
    out=b''
    while v >= 0x80: out += bytes([(v & 0x7f) | 0x80]); v >>= 7
    return out + bytes([v])
def ld(field, payload): return varint((field<<3)|2) + varint(len(payload)) + payload
def feature_bytes(vals): return ld(1, b''.join(ld(1, v) for v in vals))
def feature_int64(vals, packed=True):
    if packed: return ld(3, ld(1, b''.join(varint(v) for v in vals)))
    return ld(3, b''.join(varint(8)+varint(v) for v in vals))
def feature_float(vals, packed=True):
    if packed: return ld(2, ld(1, b''.join(struct.pack('<f', v) for v in vals)))
    return ld(2, b''.join(bytes([0x0d])+struct.pack('<f', v) for v in vals))
def example(feats): return ld(1, b''.join(ld(1, ld(1, k.encode()) + ld(2, f)) for k, f in feats))
ex1 = example([('a', feature_bytes([b'x', b'yz'])), ('b', feature_int64([1, -5])), ('c', feature_float([1, 2, 3, 4]))])
ex2 = example([('a', feature_bytes([b''])), ('b', feature_int64([7, 300], packed=False)), ('c', feature_float([0.5, -2], packed=False))])
ex3 = varint(16) + varint(1) + example([('b', b'')]) + example([('b', feature_int64([2]))])  # unknown field, empty feature, merge
base = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
def put(sub, name, data):
    d = os.path.join(base, sub); os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), 'wb').write(data)
# tfrecord_reader: first byte is the mode
put('tfrecord_reader', 'two_records', b'\x00' + rec(b'hello') + rec(b''))
put('tfrecord_reader', 'example_records', b'\x30' + rec(ex1) + rec(ex2))
put('tfrecord_reader', 'no_crc_truncated', b'\x01' + (rec(b'abc') + rec(b'defgh'))[:-3])
put('tfrecord_reader', 'repair_crcs', b'\x58' + rec(b'one') + rec(b'two') + rec(b'three'))
put('tfrecord_reader', 'oversize', b'\x12' + rec(b'x' * 100) + rec(b'y'))
put('tfrecord_reader', 'gzip', b'\x0c' + gzip.compress(rec(b'a') + rec(b'bb'), mtime=0))
put('tfrecord_reader', 'zlib', b'\x04' + zlib.compress(rec(b'a') + rec(b'bb')))
# example_parser
put('example_parser', 'packed', ex1)
put('example_parser', 'unpacked', ex2)
put('example_parser', 'merged_unknown', ex3)
put('example_parser', 'empty', b'')
put('example_parser', 'truncated', ex1[:20])
