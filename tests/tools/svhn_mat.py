#!/usr/bin/python3
"""Write small SVHN-format MAT files with scipy.io.savemat for test_svhn.c.

Usage: svhn_mat.py DIR

Each NAME.mat is a MATLAB level-5 file as SVHN ships it (X uint8
H x W x C x N, y N x 1 labels 1..10, 10 meaning the digit 0); valid ones
come with NAME.x (the images NHWC, raw bytes, as numpy lays out
X.transpose(3, 0, 1, 2)) and NAME.y (labels with 10 mapped to 0), which
the C test compares with what nn_dataset_load_svhn returns. Exits 77
when scipy is missing (the test skips).
"""
import os
import sys

try:
    import numpy as np
    import scipy.io
except ImportError:
    sys.exit(77)


def images(rng, h, w, c, n):
    # Every byte value occurs, so a transposition error cannot hide.
    return rng.integers(0, 256, size=(h, w, c, n), dtype=np.uint8)


def labels(rng, n, dtype):
    y = rng.integers(1, 11, size=(n, 1)).astype(dtype)
    y[0, 0] = 10            # the digit 0 is always present
    return y


def save(path, variables, compress):
    scipy.io.savemat(path, variables, do_compression=compress, format='5',
                     oned_as='column')


def valid(out, name, x, y, compress, extra=None):
    variables = dict(extra or {})
    variables.update({'X': x, 'y': y})
    save(os.path.join(out, name + '.mat'), variables, compress)
    with open(os.path.join(out, name + '.x'), 'wb') as f:
        f.write(np.ascontiguousarray(x.transpose(3, 0, 1, 2)).tobytes())
    with open(os.path.join(out, name + '.y'), 'wb') as f:
        f.write((y.reshape(-1).astype(np.int64) % 10).astype(np.uint8).tobytes())


SIZES = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 9: 8, 12: 8, 13: 8}


def swap_elements(data, out):
    """Appends the big-endian form of the level-5 elements in data to out."""
    at = 0
    while at + 8 <= len(data):
        first = int.from_bytes(data[at:at + 4], 'little')
        if first >> 16:     # small format: one word of tag, one of data
            mdtype, nbytes = first & 0xffff, first >> 16
            out += first.to_bytes(4, 'big')
            out += swap_data(mdtype, data[at + 4:at + 4 + nbytes]).ljust(4, b'\0')
            at += 8
            continue
        nbytes = int.from_bytes(data[at + 4:at + 8], 'little')
        body = data[at + 8:at + 8 + nbytes]
        out += first.to_bytes(4, 'big') + nbytes.to_bytes(4, 'big')
        if first == 14:     # miMATRIX: its sub-elements
            swap_elements(body, out)
        else:
            out += swap_data(first, body)
        padded = nbytes + (8 - nbytes % 8) % 8
        out += data[at + 8 + nbytes:at + 8 + padded]
        at += 8 + padded


def swap_data(mdtype, body):
    size = SIZES[mdtype]
    return np.frombuffer(body, dtype='<u%d' % size).byteswap().tobytes() \
        if size > 1 else bytes(body)


def big_endian(src, dst):
    """Rewrites an uncompressed little-endian MAT file as MATLAB on a
    big-endian machine would have written it (scipy cannot)."""
    with open(src, 'rb') as f:
        data = f.read()
    out = bytearray(data[:124])
    out += (0x0100).to_bytes(2, 'big') + b'MI'
    swap_elements(data[128:], out)
    with open(dst, 'wb') as f:
        f.write(out)


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(20261125)
    # The shipped shape and types: double labels; plain (-v6) and zlib (-v7).
    valid(out, 'plain', images(rng, 32, 32, 3, 7), labels(rng, 7, np.float64), False)
    valid(out, 'zipped', images(rng, 32, 32, 3, 9), labels(rng, 9, np.float64), True)
    # Not square, so rows and columns cannot be swapped unnoticed; uint8
    # labels; other variables (a string, a struct, a double matrix) around
    # X and y are skipped.
    extra = {'a_note': 'house numbers', 'meta': {'k': np.arange(3.0)},
             'z': np.ones((2, 5))}
    for compress in (False, True):
        valid(out, 'oblong_' + ('zipped' if compress else 'plain'),
              images(rng, 5, 7, 3, 6), labels(rng, 6, np.uint8), compress, extra)
    # Big-endian: the plain file's bytes swapped, checked with scipy's reader.
    valid(out, 'bigendian', images(rng, 32, 32, 3, 5), labels(rng, 5, np.float64), False)
    mat = os.path.join(out, 'bigendian.mat')
    big_endian(mat, mat)
    back = scipy.io.loadmat(mat)
    assert back['__header__'] is not None and back['y'].dtype.byteorder == '>'
    with open(os.path.join(out, 'bigendian.x'), 'rb') as f:
        assert f.read() == back['X'].transpose(3, 0, 1, 2).tobytes()
    # Three uint8 labels fit in the tag (scipy's small data element).
    valid(out, 'small', images(rng, 32, 32, 3, 3), labels(rng, 3, np.uint8), False)
    # Malformed: each written both ways.
    x4 = images(rng, 32, 32, 3, 4)
    y4 = labels(rng, 4, np.float64)
    bad = {
        'label_zero': {'X': x4, 'y': np.where(np.arange(4) == 2, 0, y4[:, 0])[:, None]},
        'label_eleven': {'X': x4, 'y': np.where(np.arange(4) == 3, 11, y4[:, 0])[:, None]},
        'label_fraction': {'X': x4, 'y': y4 - 0.5},
        'x_double': {'X': x4.astype(np.float64), 'y': y4},
        'y_int16': {'X': x4, 'y': y4.astype(np.int16)},
        'y_matrix': {'X': x4, 'y': np.ones((2, 4))},
        'x_three_dims': {'X': x4.reshape(32, 32, 12), 'y': y4},
        'missing_x': {'y': y4},
        'missing_y': {'X': x4},
        'count_mismatch': {'X': x4, 'y': y4[:3]},
    }
    for name, variables in bad.items():
        save(os.path.join(out, name + '_plain.mat'), variables, False)
        save(os.path.join(out, name + '_zipped.mat'), variables, True)


if __name__ == '__main__':
    main()
