//! One data key's AES-256-GCM: the keys HKDF expands from a data key (the cipher's, the key
//! check, the checksum mask), and sealing and opening under a nonce of a domain and a counter,
//! in place (frames) or as whole regions (an index, a manifest).

use hkdf::Hkdf;
use ring::aead::{Aad, LessSafeKey, Nonce, Tag, UnboundKey, AES_256_GCM};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::TAG_LEN;

/// What a data key expands to.
pub(super) struct Derived {
    pub(super) cipher: Cipher,
    pub(super) check: [u8; 16],
}

impl Derived {
    pub(super) fn new(master: &Zeroizing<[u8; 32]>, data_salt: &[u8; 32]) -> Derived {
        Derived::expand(&Hkdf::<Sha256>::new(Some(data_salt), master.as_ref()))
    }

    /// From a data key's PRK (a layout 2 block's, or HKDF-Extract of a layout 1 block's master
    /// key and data salt: the same keys).
    pub(super) fn from_prk(prk: &Zeroizing<[u8; 32]>) -> Derived {
        Derived::expand(&Hkdf::<Sha256>::from_prk(prk.as_ref()).expect("a 32-byte PRK"))
    }

    fn expand(hk: &Hkdf<Sha256>) -> Derived {
        let mut key = Zeroizing::new([0u8; 32]);
        let (mut check, mut mask) = ([0u8; 16], [0u8; 4]);
        hk.expand(b"sheaf/1 aes-256-gcm data key", key.as_mut()).expect("32 bytes is a valid HKDF length");
        hk.expand(b"sheaf/1 key check", &mut check).expect("16 bytes is a valid HKDF length");
        hk.expand(b"sheaf/1 content checksum mask", &mut mask).expect("4 bytes is a valid HKDF length");
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key.as_ref()).expect("a 32-byte key"));
        Derived { cipher: Cipher { aead, crc_mask: u32::from_le_bytes(mask) }, check }
    }
}

/// One data key's AES-256-GCM.
pub struct Cipher {
    aead: LessSafeKey,
    crc_mask: u32,
}

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(aes-256-gcm)")
    }
}

fn nonce(domain: u32, counter: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[0..4].copy_from_slice(&domain.to_le_bytes());
    n[4..12].copy_from_slice(&counter.to_le_bytes());
    n
}

impl Cipher {
    /// Encrypt `buf` in place under nonce `(domain, counter)` with `aad` authenticated alongside;
    /// returns the tag.
    pub fn seal(&self, domain: u32, counter: u64, aad: &[u8], buf: &mut [u8]) -> [u8; TAG_LEN] {
        let tag = self.aead.seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce(domain, counter)), Aad::from(aad), buf).expect("AES-GCM seals any buffer under 64 GiB");
        tag.as_ref().try_into().expect("a 16-byte tag")
    }

    /// Decrypt `buf` in place, checking `tag`.
    ///
    /// # Errors
    /// A short phrase when the bytes, the associated data or the tag were altered.
    pub fn open(&self, domain: u32, counter: u64, aad: &[u8], buf: &mut [u8], tag: &[u8]) -> std::result::Result<(), String> {
        let tag = Tag::try_from(tag).map_err(|_| "authentication tag missing".to_string())?;
        self.aead
            .open_in_place_separate_tag(Nonce::assume_unique_for_key(nonce(domain, counter)), Aad::from(aad), tag, buf, 0..)
            .map(drop)
            .map_err(|_| "authentication failed: the bytes were altered (or belong to another backup)".to_string())
    }

    /// Seal a whole region (`plain`) into a new buffer: ciphertext then tag.
    pub fn seal_region(&self, domain: u32, counter: u64, plain: &[u8]) -> Vec<u8> {
        self.seal_region_with(domain, counter, &[], plain)
    }

    /// [`Cipher::seal_region`] with associated data.
    pub fn seal_region_with(&self, domain: u32, counter: u64, aad: &[u8], plain: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(plain.len() + TAG_LEN);
        out.extend_from_slice(plain);
        let tag = self.seal(domain, counter, aad, &mut out);
        out.extend_from_slice(&tag);
        out
    }

    /// Open a region sealed by [`Cipher::seal_region`], in place; returns the plaintext's length.
    ///
    /// # Errors
    /// As [`Cipher::open`], and for a region shorter than a tag.
    pub fn open_region(&self, domain: u32, counter: u64, sealed: &mut [u8]) -> std::result::Result<usize, String> {
        self.open_region_with(domain, counter, &[], sealed)
    }

    /// [`Cipher::open_region`] with associated data.
    ///
    /// # Errors
    /// As [`Cipher::open_region`].
    pub fn open_region_with(&self, domain: u32, counter: u64, aad: &[u8], sealed: &mut [u8]) -> std::result::Result<usize, String> {
        let n = sealed.len().checked_sub(TAG_LEN).ok_or("shorter than its authentication tag")?;
        let (body, tag) = sealed.split_at_mut(n);
        self.open(domain, counter, aad, body, tag)?;
        Ok(n)
    }

    /// A keyed mask for a checksum that would otherwise fingerprint the plaintext in the clear
    /// (a repository object's whole-content crc): the value stored is `crc ^ mask`. Each object
    /// has its own data key, so the mask is used once.
    pub fn crc_mask(&self) -> u32 {
        self.crc_mask
    }
}
