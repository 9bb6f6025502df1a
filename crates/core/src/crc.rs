//! CRC-32C combination in O(log n) with a few hundred bit operations: the checksum of `A‖B` from
//! those of `A` and `B` and the length of `B`. A set of 100,000 small files combines one checksum
//! per file when it is written and again when it is opened, so this has to be cheap (the crc32c
//! crate's combination squares a 32×32 bit matrix per call, about 5 µs).
//!
//! Polynomial arithmetic modulo CRC-32C's (reflected) polynomial: appending `n` bytes to a message
//! multiplies its checksum by x^(8n); the pre- and post-conditioning of the checksum cancel out.

/// CRC-32C's polynomial, bit-reflected.
const POLY: u32 = 0x82F6_3B78;

/// `a × b mod POLY`, both reflected (bit 31 is x^0).
const fn mult_mod(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// x^(2^k) mod POLY for k = 0..67: a 64-bit byte length is 2^3 × up to 2^64 bits.
const fn powers() -> [u32; 67] {
    let mut t = [0u32; 67];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 67 {
        t[k] = mult_mod(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
}

const X2N: [u32; 67] = powers();

/// x^(8 × len) mod POLY.
fn x8n(len: u64) -> u32 {
    let (mut n, mut k) = (len, 3usize);
    let mut p = 1u32 << 31; // x^0
    while n != 0 {
        if n & 1 != 0 {
            p = mult_mod(X2N[k], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The CRC-32C of `A‖B`, given `crc_a`, `crc_b` and `len_b`.
pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    mult_mod(x8n(len_b), crc_a) ^ crc_b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_checksum_of_the_whole() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for cut in [0, 1, 7, 4096, 12_345, 69_999, 70_000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len() as u64), crc32c::crc32c(&data), "cut at {cut}");
            assert_eq!(combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len() as u64), crc32c::crc32c_combine(crc32c::crc32c(a), crc32c::crc32c(b), b.len()));
        }
        // Long lengths (holes of gigabytes) agree with the crate's slow combination.
        for len in [1u64 << 30, (1 << 32) + 5, 3 << 33] {
            assert_eq!(combine(0x1234_5678, 0x9abc_def0, len), crc32c::crc32c_combine(0x1234_5678, 0x9abc_def0, len as usize), "{len}");
        }
    }
}
