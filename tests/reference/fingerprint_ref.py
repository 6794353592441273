#!/usr/bin/python3
"""Independent re-implementation of verify/fingerprint.hpp (docs/design.md section 5) with the
Python standard library only, run by tests/unit/test_fingerprint.cpp.

usage: fingerprint_ref.py KEY_HEX N SEED
Generates N float32 bit patterns with splitmix64 (state SEED; pattern = top 32 bits of
each output, with the exponent's low bit cleared when it would be 255 so there are no
Inf/NaN), then prints
  fp1  <hex64>   sum_i mix64_v1(KEY ^ i, bits_i) mod 2^64   (logical indices 0..N-1)
  fp2  <hex64>   the same with mix64_v2 (the default version)
  xor  <hex64>   torch.hash_tensor mode 0: xor of the float64 bit patterns
  mix1 <hex64>   mix64_v1(0x0123456789abcdef, 0xfedcba9876543210)
  mix2 <hex64>   mix64_v2(0x0123456789abcdef, 0x00000000fedcba98)
"""
import struct
import sys

M = (1 << 64) - 1


def splitmix64_next(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)


def fin(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def mix64_v1(a, b):
    return fin(fin((a + 0x9E3779B97F4A7C15) & M) ^ b)


def mix64_v2(a, b):
    # b is a 32-bit pattern: it goes to the high half, the index stays in the low half.
    return fin(a ^ ((b << 32) & M))


def data(n, seed):
    state, out = seed, []
    for _ in range(n):
        state, r = splitmix64_next(state)
        u = r >> 32
        if (u >> 23) & 0xFF == 0xFF:
            u &= ~(1 << 23)
        out.append(u)
    return out


def main():
    key, n, seed = int(sys.argv[1], 16), int(sys.argv[2]), int(sys.argv[3])
    bits = data(n, seed)
    fp1 = fp2 = 0
    for i, b in enumerate(bits):
        fp1 = (fp1 + mix64_v1(key ^ i, b)) & M
        fp2 = (fp2 + mix64_v2(key ^ i, b)) & M
    x = 0
    for b in bits:
        d = struct.unpack("<f", struct.pack("<I", b))[0]  # exact float32 -> float64
        x ^= struct.unpack("<Q", struct.pack("<d", d))[0]
    print("fp1  %016x" % fp1)
    print("fp2  %016x" % fp2)
    print("xor  %016x" % x)
    print("mix1 %016x" % mix64_v1(0x0123456789ABCDEF, 0xFEDCBA9876543210))
    print("mix2 %016x" % mix64_v2(0x0123456789ABCDEF, 0xFEDCBA98))


if __name__ == "__main__":
    main()
