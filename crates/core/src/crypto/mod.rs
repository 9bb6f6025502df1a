//! Encryption at rest: AES-256-GCM after compression, keys from a key file or a passphrase.
//!
//! ```text
//!  key file (32 bytes) ─────────────────────────┐
//!  passphrase ──Argon2id(kdf salt, m, t, p)─────┴─► master key          (a `--to` set; older repositories)
//!  repository key ring, generation G ─────────────► master key          (repositories: keyring.rs)
//!  master key ──HKDF-SHA256(data salt)──► data key (AES-256-GCM), key check, content-crc mask
//! ```
//!
//! Every stripe and every repository object carries a [`KeyBlock`] in the clear. Layout 1: how the
//! master key is made (the KDF, its salt and parameters), a fresh random 32-byte data salt, and a
//! key check (a key ring's generations use it). Layout 2 (sets and objects under one secret):
//! the data key's 32 random bytes (its HKDF PRK), sealed with a key-encryption key the secret
//! makes with a salt of the block's own, so that the secret only ever wraps a random key and a
//! set's secret can be changed by rewriting the block in place ([`Keys::rewrap`]). Layout 3 (a
//! set or object copied into another repository, `sheaf copy`): layout 2's sealed data key under a
//! key ring's generation, so that the copy opens with the target's keys and its frames stay as
//! stored ([`Keys::rekey`]). Layout 4: layout 2 under a passphrase with a random nonce of the
//! block's own, since a repository without a key ring seals every object's key under its one
//! Argon2id salt, so under one key-encryption key.
//! The data salt makes each backup's (and each object's) data key its own, so the nonces inside
//! one (a counter per frame, fixed numbers for the index and the manifest) can never repeat under
//! a key. The key check lets a wrong key be named before any byte is decrypted.
//!
//! Nothing here is hand-made cryptography: AES-256-GCM comes from ring, Argon2id and HKDF from
//! RustCrypto; this module only decides which bytes go where. Key bytes live in [`Zeroizing`]
//! buffers and are never formatted (`Debug` prints nothing of them); ring's expanded key schedule
//! is not wiped on drop.
//!
//! Here: the secrets ([`Keys`]) and the key block they open; in `cipher`, what one data key does
//! ([`Cipher`]: sealing and opening frames and regions).

use std::path::Path;
use std::sync::{Arc, Mutex};

use hkdf::Hkdf;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use sha2::Sha256;
use zeroize::Zeroizing;

use crate::error::{Error, ErrorKind, Result};

mod cipher;

pub use cipher::Cipher;
use cipher::Derived;

/// Cipher id in a header: none.
pub const CIPHER_NONE: u8 = 0;
/// Cipher id in a header: AES-256-GCM.
pub const CIPHER_AES256GCM: u8 = 1;
/// Length of an encoded [`KeyBlock`].
pub const KEY_BLOCK_LEN: usize = 96;
/// GCM tag length.
pub const TAG_LEN: usize = 16;
/// What sealing adds to a frame's payload: the nonce counter (8), the raw checksum (4), the tag.
pub const FRAME_OVERHEAD: usize = 8 + 4 + TAG_LEN;
/// Nonce domain of frames (the counter is stored in the frame).
pub const NONCE_FRAMES: u32 = 0;
/// Nonce domain of a stripe's index (the counter is the stripe number; from format 5, the piece
/// number above it: [`index_piece_nonce`]).
pub const NONCE_INDEX: u32 = 1;

/// The nonce counter and associated data of piece `p` of stripe `k`'s index (format 5): the
/// stripe in the low 16 bits, the piece above them; the last piece is bound as the last, so
/// that an index cut short at a piece's end does not open.
pub fn index_piece_nonce(k: u16, p: u64, last: bool) -> (u64, &'static [u8]) {
    ((p << 16) | u64::from(k), if last { b"last" } else { b"" })
}
/// Nonce domain of the manifest (counter 0).
pub const NONCE_MANIFEST: u32 = 2;

const KEY_BLOCK_MAGIC: &[u8; 4] = b"SKEY";
const KDF_KEY_FILE: u8 = 1;
const KDF_ARGON2ID: u8 = 2;
const KDF_RING: u8 = 3;
/// Argon2id cost for new passphrase-protected backups: 64 MiB, 3 passes, 1 lane (RFC 9106's
/// second recommendation, with one lane for small machines).
pub const ARGON2_DEFAULT: (u32, u32, u32) = (64 * 1024, 3, 1);
/// Bounds a reader accepts, so that a damaged or hostile header cannot ask for gigabytes or hours.
const ARGON2_MAX_M_KIB: u32 = 1 << 20;
const ARGON2_MAX_T: u32 = 16;
const ARGON2_MAX_P: u32 = 16;

/// How the master key is made.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kdf {
    /// The key file's 32 bytes are the master key.
    KeyFile,
    /// Argon2id over the passphrase.
    Argon2id {
        /// Memory in KiB.
        m_kib: u32,
        /// Passes.
        t: u32,
        /// Lanes.
        p: u32,
        /// Salt.
        salt: [u8; 16],
    },
    /// Generation `generation` of a repository's key ring (random keys, held only wrapped by the
    /// repository's keys: [`crate::keyring`]).
    Ring {
        /// The ring's id.
        ring: [u8; 16],
        /// The generation (from 1; a rotation adds one).
        generation: u32,
    },
}

impl Kdf {
    /// Words for messages: which kind of secret opens it.
    pub fn needs(&self) -> &'static str {
        match self {
            Kdf::KeyFile => "a key file (--encryption-key-file)",
            Kdf::Argon2id { .. } => "a passphrase (SHEAF_PASSPHRASE or --passphrase-file)",
            Kdf::Ring { .. } => "one of its keys (a passphrase, a key file or --key-command; `sheaf key list` names them)",
        }
    }
}

/// What a reader needs, besides the secret, to make and check the key; stored in the clear.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyBlock {
    /// How the master key is made.
    pub kdf: Kdf,
    /// This backup's (or object's) own salt for its data key (layout 1).
    pub data_salt: [u8; 32],
    /// A value derived from the keys, to tell a wrong secret from damage (layout 1).
    pub check: [u8; 16],
    /// Layout 2: the data key's PRK, sealed, and the salt of the key that seals it.
    pub wrapped: Option<Wrapped>,
}

/// A data key sealed in a key block (layout 2; 4 under a passphrase, with a nonce of its own; 3
/// under a key ring's generation).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Wrapped {
    /// Salt of the key-encryption key (Argon2id's own salt for a passphrase).
    pub salt: [u8; 16],
    /// AES-256-GCM of the 32-byte PRK, then its tag.
    pub sealed: [u8; 48],
    /// The low 8 bytes of the nonce it was sealed under (layout 4; 0 in layouts 2 and 3, whose
    /// key-encryption key is the block's own through its random salt).
    pub nonce: [u8; 8],
}

impl Wrapped {
    fn nonce(&self) -> Nonce {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&self.nonce);
        Nonce::assume_unique_for_key(n)
    }
}

impl KeyBlock {
    /// Layout 3: a key ring's generation seals the data key (its ring id and generation fill the
    /// bytes layout 2 keeps its salt in, so the salt and the sealed key come after them).
    fn ring_wrapped(&self) -> bool {
        self.wrapped.is_some() && matches!(self.kdf, Kdf::Ring { .. })
    }

    /// How many of [`KeyBlock::head`]'s bytes a sealed data key is bound to.
    fn bound_len(&self) -> usize {
        if self.ring_wrapped() {
            44
        } else {
            36
        }
    }

    /// Encode with its own checksum.
    pub fn encode(&self) -> [u8; KEY_BLOCK_LEN] {
        let mut b = self.head();
        if let Some(w) = &self.wrapped {
            let at = if self.ring_wrapped() { 44 } else { 36 };
            b[at..at + 48].copy_from_slice(&w.sealed);
            if !self.ring_wrapped() {
                b[84..92].copy_from_slice(&w.nonce);
            }
        } else {
            b[36..68].copy_from_slice(&self.data_salt);
            b[68..84].copy_from_slice(&self.check);
        }
        let crc = crc32c::crc32c(&b[..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Bytes 0..36 (magic, layout, cipher, KDF and its parameters; layout 2's salt), or 0..44
    /// (layout 3: a ring's id and generation, then the salt), the rest zero: what a sealed data
    /// key is bound to ([`KeyBlock::bound_len`]).
    fn head(&self) -> [u8; KEY_BLOCK_LEN] {
        let mut b = [0u8; KEY_BLOCK_LEN];
        b[0..4].copy_from_slice(KEY_BLOCK_MAGIC);
        b[4] = match (&self.wrapped, self.ring_wrapped()) {
            (None, _) => 1,
            (Some(_), true) => 3,
            (Some(w), false) if w.nonce != [0; 8] => 4,
            (Some(_), false) => 2,
        }; // layout version
        b[5] = CIPHER_AES256GCM;
        match self.kdf {
            Kdf::KeyFile => b[6] = KDF_KEY_FILE,
            Kdf::Argon2id { m_kib, t, p, salt } => {
                b[6] = KDF_ARGON2ID;
                b[8..12].copy_from_slice(&m_kib.to_le_bytes());
                b[12..16].copy_from_slice(&t.to_le_bytes());
                b[16..20].copy_from_slice(&p.to_le_bytes());
                b[20..36].copy_from_slice(&salt);
            }
            Kdf::Ring { ring, generation } => {
                b[6] = KDF_RING;
                b[8..24].copy_from_slice(&ring);
                b[24..28].copy_from_slice(&generation.to_le_bytes());
            }
        }
        match &self.wrapped {
            Some(w) if self.ring_wrapped() => b[28..44].copy_from_slice(&w.salt),
            // A passphrase's block has Argon2id's salt there already, which is this salt too.
            Some(w) => b[20..36].copy_from_slice(&w.salt),
            None => {}
        }
        b
    }

    /// Decode and check.
    ///
    /// # Errors
    /// [`ErrorKind::Corrupt`] for a damaged block or parameters no sheaf writes.
    pub fn decode(b: &[u8]) -> Result<KeyBlock> {
        if b.len() < KEY_BLOCK_LEN || &b[0..4] != KEY_BLOCK_MAGIC {
            return Err(Error::corrupt("key block: bad magic (the header is damaged)"));
        }
        if crc32c::crc32c(&b[..92]) != u32::from_le_bytes(b[92..96].try_into().expect("4 bytes")) {
            return Err(Error::corrupt("key block: checksum mismatch (the header is damaged)"));
        }
        if !(1..=4).contains(&b[4]) || b[5] != CIPHER_AES256GCM {
            return Err(Error::invalid(format!("key block: layout {} / cipher {} is not known to this sheaf: upgrade sheaf", b[4], b[5])));
        }
        let word = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let kdf = match b[6] {
            KDF_KEY_FILE => Kdf::KeyFile,
            KDF_ARGON2ID => {
                let (m_kib, t, p) = (word(8), word(12), word(16));
                if !(8..=ARGON2_MAX_M_KIB).contains(&m_kib) || !(1..=ARGON2_MAX_T).contains(&t) || !(1..=ARGON2_MAX_P).contains(&p) || m_kib < 8 * p {
                    return Err(Error::corrupt(format!("key block: Argon2id cost m={m_kib} KiB t={t} p={p} is outside what sheaf writes (damaged)")));
                }
                Kdf::Argon2id { m_kib, t, p, salt: b[20..36].try_into().expect("16 bytes") }
            }
            KDF_RING if word(24) >= 1 => Kdf::Ring { ring: b[8..24].try_into().expect("16 bytes"), generation: word(24) },
            KDF_RING => return Err(Error::corrupt("key block: key ring generation 0 (damaged)")),
            k => return Err(Error::corrupt(format!("key block: unknown key derivation {k} (damaged)"))),
        };
        if b[4] == 3 {
            if !matches!(kdf, Kdf::Ring { .. }) {
                return Err(Error::corrupt("key block: layout 3 without a key ring's generation (damaged)"));
            }
            let wrapped = Wrapped { salt: b[28..44].try_into().expect("16 bytes"), sealed: b[44..92].try_into().expect("48 bytes"), nonce: [0; 8] };
            return Ok(KeyBlock { kdf, data_salt: [0; 32], check: [0; 16], wrapped: Some(wrapped) });
        }
        if b[4] == 2 || b[4] == 4 {
            if matches!(kdf, Kdf::Ring { .. }) {
                return Err(Error::corrupt(format!("key block: a key ring's generation in layout {} (damaged)", b[4])));
            }
            let nonce: [u8; 8] = if b[4] == 4 { b[84..92].try_into().expect("8 bytes") } else { [0; 8] };
            if b[4] == 4 && nonce == [0; 8] {
                return Err(Error::corrupt("key block: layout 4 without its nonce (damaged)"));
            }
            let wrapped = Wrapped { salt: b[20..36].try_into().expect("16 bytes"), sealed: b[36..84].try_into().expect("48 bytes"), nonce };
            return Ok(KeyBlock { kdf, data_salt: [0; 32], check: [0; 16], wrapped: Some(wrapped) });
        }
        Ok(KeyBlock { kdf, data_salt: b[36..68].try_into().expect("32 bytes"), check: b[68..84].try_into().expect("16 bytes"), wrapped: None })
    }

    /// The AEAD that seals a layout 2 block's key: from the master key the secret makes under
    /// its KDF and the block's own salt (so each block has a key-encryption key of its own, and
    /// the nonce can be fixed).
    fn kek(master: &Zeroizing<[u8; 32]>, salt: &[u8; 16]) -> LessSafeKey {
        let mut key = Zeroizing::new([0u8; 32]);
        Hkdf::<Sha256>::new(Some(salt), master.as_ref()).expand(b"sheaf/2 key block key-encryption key", key.as_mut()).expect("32 bytes is a valid HKDF length");
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key.as_ref()).expect("a 32-byte key"))
    }
}

/// The secret a user gave.
enum Secret {
    Key(Zeroizing<[u8; 32]>),
    Passphrase(Zeroizing<Vec<u8>>),
}

/// The user's secret, and the master keys made from it so far (Argon2id runs once per salt and
/// parameters, however many stripes or objects share them), and those of the key rings it opened.
pub struct Keys {
    secret: Secret,
    argon2: (u32, u32, u32),
    masters: Mutex<Vec<(Kdf, Zeroizing<[u8; 32]>)>>,
    /// Master keys from the key rings this secret opened ([`Keys::install_ring`]): a ring's
    /// generations, and the master keys of what was written before a repository had a ring.
    ring_keys: Mutex<Vec<(Kdf, Zeroizing<[u8; 32]>)>>,
    /// Why a repository's key ring did not open, for the error of what then cannot be read.
    ring_failure: Mutex<Option<Error>>,
}

/// Which kind of secret; in records, `key` or `passphrase`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretKind {
    /// 32 random bytes.
    Key,
    /// A passphrase, stretched with Argon2id.
    Passphrase,
}

impl SecretKind {
    /// Its name: `key` or `passphrase`.
    pub fn name(self) -> &'static str {
        match self {
            SecretKind::Key => "key",
            SecretKind::Passphrase => "passphrase",
        }
    }
}

impl std::fmt::Display for SecretKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.secret {
            Secret::Key(_) => "Keys(key file)",
            Secret::Passphrase(_) => "Keys(passphrase)",
        })
    }
}

fn key_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Key, message)
}

/// The secret given does not open what `kdf` made.
fn wrong_secret(kdf: &Kdf) -> Error {
    key_error(match kdf {
        Kdf::KeyFile => "wrong key: the key given is not the one this was encrypted with",
        Kdf::Argon2id { .. } => "wrong passphrase: it is not the one this was encrypted with",
        Kdf::Ring { .. } => "the repository's key ring does not hold the key this was encrypted with (damaged, or from another repository)",
    })
}

fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| Error::new(ErrorKind::Io, format!("the system's random source failed: {e}")))?;
    Ok(b)
}

/// A 256-bit key from a file (`what` names it in errors): exactly 32 bytes, or 64 hex digits (a
/// newline after them is fine).
///
/// # Errors
/// [`ErrorKind::Key`] when the file cannot be read or holds anything else; the message never
/// quotes the file's content.
pub fn read_key_file(path: &Path, what: &str) -> Result<Zeroizing<[u8; 32]>> {
    let bytes = Zeroizing::new(std::fs::read(path).map_err(|e| Error::io(ErrorKind::Key, format!("cannot read the {what} {}", path.display()), e))?);
    let mut key = Zeroizing::new([0u8; 32]);
    let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if bytes.len() == 32 {
        key.copy_from_slice(&bytes);
    } else if let Some(decoded) = (text.len() == 64).then(|| crate::text::unhex(text)).flatten().map(Zeroizing::new) {
        key.copy_from_slice(&decoded);
    } else {
        return Err(key_error(format!(
            "the {what} {} holds {} bytes: a key is 32 random bytes (or 64 hex digits); make one with `head -c 32 /dev/urandom > {}` and keep a copy apart from the backups",
            path.display(),
            bytes.len(),
            path.display()
        )));
    }
    Ok(key)
}

impl Keys {
    fn with_secret(secret: Secret) -> Keys {
        Keys { secret, argon2: ARGON2_DEFAULT, masters: Mutex::new(Vec::new()), ring_keys: Mutex::new(Vec::new()), ring_failure: Mutex::new(None) }
    }

    /// Keys from what a program printed (`--key-command`): a key when it is 32 bytes, or 64 hex
    /// digits and a newline; else a passphrase (its first line). `what` names it in errors, which
    /// never quote it.
    ///
    /// # Errors
    /// [`ErrorKind::Key`] when it printed nothing.
    pub fn from_printed(printed: Vec<u8>, what: &str) -> Result<Keys> {
        let printed = Zeroizing::new(printed);
        if printed.len() == 32 {
            let mut key = Zeroizing::new([0u8; 32]);
            key.copy_from_slice(&printed);
            return Ok(Keys::with_secret(Secret::Key(key)));
        }
        let text = printed.strip_suffix(b"\n").unwrap_or(&printed);
        if let Some(decoded) = (text.len() == 64).then(|| crate::text::unhex(text)).flatten().map(Zeroizing::new) {
            let mut key = Zeroizing::new([0u8; 32]);
            key.copy_from_slice(&decoded);
            return Ok(Keys::with_secret(Secret::Key(key)));
        }
        let line = printed.split(|&b| b == b'\n').next().unwrap_or_default().to_vec();
        Keys::from_passphrase(line)
            .map_err(|_| key_error(format!("{what} printed no key or passphrase: it should print 32 bytes, 64 hex digits or a passphrase on its first line")))
    }

    /// Which kind of secret this is.
    pub fn kind(&self) -> SecretKind {
        match self.secret {
            Secret::Key(_) => SecretKind::Key,
            Secret::Passphrase(_) => SecretKind::Passphrase,
        }
    }

    /// The Argon2id cost new passphrase-protected things get (memory KiB, passes, lanes).
    pub fn argon2_cost(&self) -> (u32, u32, u32) {
        self.argon2
    }

    /// Master keys a key ring holds, from now on found by what needs them (a ring's
    /// generations, and the master keys of what was written before it).
    pub fn install_ring(&self, entries: &[(Kdf, Zeroizing<[u8; 32]>)]) {
        let mut held = self.ring_keys.lock().unwrap_or_else(|p| p.into_inner());
        for (kdf, key) in entries {
            if !held.iter().any(|(k, _)| k == kdf) {
                held.push((*kdf, key.clone()));
            }
        }
    }

    /// Why a repository's key ring did not open: the error of whatever then needs it.
    pub fn note_ring_failure(&self, e: Error) {
        *self.ring_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    fn ring_key(&self, kdf: &Kdf) -> Option<Zeroizing<[u8; 32]>> {
        self.ring_keys.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| k == kdf).map(|(_, m)| m.clone())
    }

    /// Keys from a key file: exactly 32 bytes, or 64 hex digits (a newline after them is fine).
    ///
    /// # Errors
    /// [`ErrorKind::Key`] when the file cannot be read or holds anything else; the message never
    /// quotes the file's content.
    pub fn from_key_file(path: &Path) -> Result<Keys> {
        Ok(Keys::with_secret(Secret::Key(read_key_file(path, "key file")?)))
    }

    /// Keys from a key held in memory (a library caller's own key management).
    pub fn from_key(key: [u8; 32]) -> Keys {
        Keys::with_secret(Secret::Key(Zeroizing::new(key)))
    }

    /// Keys from a passphrase (one trailing newline is dropped, as files and `echo` add one).
    ///
    /// # Errors
    /// [`ErrorKind::Key`] for an empty passphrase.
    pub fn from_passphrase(mut pass: Vec<u8>) -> Result<Keys> {
        if pass.last() == Some(&b'\n') {
            pass.pop();
        }
        let pass = Zeroizing::new(pass);
        if pass.is_empty() {
            return Err(key_error("the passphrase is empty: set SHEAF_PASSPHRASE or --passphrase-file to a non-empty one"));
        }
        Ok(Keys::with_secret(Secret::Passphrase(pass)))
    }

    /// The same keys with another Argon2id cost for what they encrypt from now on (memory KiB,
    /// passes, lanes). Readers take the cost from the key block, so any cost opens.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] outside the bounds readers accept.
    pub fn with_argon2(mut self, m_kib: u32, t: u32, p: u32) -> Result<Keys> {
        if !(8..=ARGON2_MAX_M_KIB).contains(&m_kib) || !(1..=ARGON2_MAX_T).contains(&t) || !(1..=ARGON2_MAX_P).contains(&p) || m_kib < 8 * p {
            return Err(Error::invalid(format!("Argon2id cost m={m_kib} KiB t={t} p={p}: memory 8 KiB·lanes .. 1 GiB, passes 1..16, lanes 1..16")));
        }
        self.argon2 = (m_kib, t, p);
        Ok(self)
    }

    /// A new way to make the master key: the key file itself, or Argon2id with a fresh salt.
    ///
    /// # Errors
    /// When the random source fails.
    pub fn fresh_kdf(&self) -> Result<Kdf> {
        Ok(match self.secret {
            Secret::Key(_) => Kdf::KeyFile,
            Secret::Passphrase(_) => {
                let (m_kib, t, p) = self.argon2;
                Kdf::Argon2id { m_kib, t, p, salt: random()? }
            }
        })
    }

    /// The master key this secret makes under `kdf` (a key file's bytes, or Argon2id's output;
    /// cached): what a key record's key-encryption key is made from.
    ///
    /// # Errors
    /// `kdf` needs the other kind of secret, or is a key ring's.
    pub fn own_master(&self, kdf: &Kdf) -> Result<Zeroizing<[u8; 32]>> {
        match (&self.secret, kdf) {
            (Secret::Key(k), Kdf::KeyFile) => Ok(k.clone()),
            (Secret::Passphrase(pass), Kdf::Argon2id { m_kib, t, p, salt }) => {
                let mut cache = self.masters.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((_, m)) = cache.iter().find(|(k, _)| k == kdf) {
                    return Ok(m.clone());
                }
                let params = argon2::Params::new(*m_kib, *t, *p, Some(32)).map_err(|e| Error::corrupt(format!("key block: Argon2id parameters: {e}")))?;
                let mut out = Zeroizing::new([0u8; 32]);
                argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
                    .hash_password_into(pass, salt, out.as_mut())
                    .map_err(|e| key_error(format!("Argon2id failed: {e}")))?;
                cache.push((*kdf, out.clone()));
                Ok(out)
            }
            (_, Kdf::Ring { .. }) => Err(self
                .ring_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .map(|e| Error::new(e.kind(), e.message()))
                .unwrap_or_else(|| key_error("it is encrypted with a repository's key ring, which was not opened: read it through its repository (--repo)"))),
            (_, kdf) => Err(key_error(format!("it was encrypted with {}, and that was not given", kdf.needs()))),
        }
    }
    /// A new key block under `kdf` (from [`Keys::fresh_kdf`], or a repository's) and its cipher.
    ///
    /// # Errors
    /// When the random source fails, or `kdf` needs the other kind of secret.
    pub fn seal(&self, kdf: Kdf) -> Result<(KeyBlock, Arc<Cipher>)> {
        if matches!(kdf, Kdf::Ring { .. }) {
            let data_salt = random()?;
            let derived = Derived::new(&self.ring_key(&kdf).map_or_else(|| self.own_master(&kdf), Ok)?, &data_salt);
            return Ok((KeyBlock { kdf, data_salt, check: derived.check, wrapped: None }, Arc::new(derived.cipher)));
        }
        // Under a secret of its own: a random data key, sealed.
        let prk = Zeroizing::new(random::<32>()?);
        let block = self.wrap_prk(kdf, &prk)?;
        Ok((block, Arc::new(Derived::from_prk(&prk).cipher)))
    }

    /// A block under `kdf` sealing `prk`: layout 2 under a secret of its own, layout 3 under a
    /// key ring's generation this secret opened.
    fn wrap_prk(&self, kdf: Kdf, prk: &Zeroizing<[u8; 32]>) -> Result<KeyBlock> {
        let salt = match kdf {
            Kdf::Argon2id { salt, .. } => salt,
            _ => random()?,
        };
        // Under a passphrase the salt is Argon2id's, which every block of a repository without a
        // key ring shares: the key-encryption key is then the same for all of them, so each
        // block's nonce is its own, random (layout 4). Other salts are random per block.
        let nonce = match kdf {
            Kdf::Argon2id { .. } => loop {
                let n: [u8; 8] = random()?;
                if n != [0; 8] {
                    break n;
                }
            },
            _ => [0; 8],
        };
        let mut block = KeyBlock { kdf, data_salt: [0; 32], check: [0; 16], wrapped: Some(Wrapped { salt, sealed: [0; 48], nonce }) };
        let master = match kdf {
            Kdf::Ring { .. } => self.ring_key(&kdf).map_or_else(|| self.own_master(&kdf), Ok)?,
            _ => self.own_master(&kdf)?,
        };
        let mut buf = prk.clone();
        let tag = KeyBlock::kek(&master, &salt)
            .seal_in_place_separate_tag(block.wrapped.as_ref().expect("set above").nonce(), Aad::from(&block.head()[..block.bound_len()]), buf.as_mut_slice())
            .expect("AES-GCM seals 32 bytes");
        let w = block.wrapped.as_mut().expect("set above");
        w.sealed[..32].copy_from_slice(buf.as_slice());
        w.sealed[32..].copy_from_slice(tag.as_ref());
        Ok(block)
    }

    /// The master keys that may be `kdf`'s: a key ring's entry (what a repository wrote before
    /// its ring), then this secret's own.
    fn masters_for(&self, kdf: &Kdf) -> Result<Vec<Zeroizing<[u8; 32]>>> {
        let mut out: Vec<_> = self.ring_key(kdf).into_iter().collect();
        match self.own_master(kdf) {
            Ok(m) => out.push(m),
            Err(e) if out.is_empty() => return Err(e),
            Err(_) => {}
        }
        Ok(out)
    }

    /// The data key's PRK of what `block` describes, when this secret (or a ring it opened)
    /// opens it: layout 2 unseals it; layout 1 derives it (HKDF-Extract of the master key that
    /// passes the key check, a ring's first: what a repository wrote before its ring opens with
    /// any of its keys).
    fn prk_of(&self, block: &KeyBlock) -> Result<Zeroizing<[u8; 32]>> {
        let masters = self.masters_for(&block.kdf)?;
        if let Some(w) = &block.wrapped {
            for m in &masters {
                let mut buf = Zeroizing::new(w.sealed);
                let kek = KeyBlock::kek(m, &w.salt);
                if let Ok(plain) = kek.open_in_place(w.nonce(), Aad::from(&block.head()[..block.bound_len()]), buf.as_mut_slice()) {
                    let mut prk = Zeroizing::new([0u8; 32]);
                    prk.copy_from_slice(plain);
                    return Ok(prk);
                }
            }
            return Err(wrong_secret(&block.kdf));
        }
        for m in &masters {
            if Derived::new(m, &block.data_salt).check == block.check {
                let (prk, _) = Hkdf::<Sha256>::extract(Some(&block.data_salt), m.as_ref());
                let mut out = Zeroizing::new([0u8; 32]);
                out.copy_from_slice(&prk);
                return Ok(out);
            }
        }
        Err(wrong_secret(&block.kdf))
    }

    /// `block` (a set's or an object's under one secret, any layout) as a layout 2 block (4 under
    /// a passphrase) that `new` opens (this secret again, with a fresh salt, or another one): the same data
    /// key, so nothing else changes. What [`crate`]'s callers write over a stripe's key block to
    /// move it to layout 2 or change its secret.
    ///
    /// # Errors
    /// This secret does not open `block`; `block` is a key ring's; the random source.
    pub fn rewrap(&self, block: &KeyBlock, new: &Keys) -> Result<KeyBlock> {
        if matches!(block.kdf, Kdf::Ring { .. }) {
            return Err(key_error("a repository's object: its keys are changed with `sheaf key` on the repository"));
        }
        let prk = self.prk_of(block)?;
        new.wrap_prk(new.fresh_kdf()?, &prk)
    }

    /// `block` (a set's or an object's, any layout, that these keys open) sealed for `to` (another
    /// repository's keys and its key ring's current generation, or a secret of its own): the same
    /// data key, so the frames, index and manifest it sealed stay as stored and only the block
    /// changes (`sheaf copy` between encrypted repositories).
    ///
    /// # Errors
    /// These keys do not open `block`, or `to`'s do not make its key; the random source.
    pub fn rekey(&self, block: &KeyBlock, to: &Encryption) -> Result<KeyBlock> {
        let prk = self.prk_of(block)?;
        to.keys.wrap_prk(to.kdf, &prk)
    }

    /// The cipher of what `block` describes, once the key check holds.
    ///
    /// # Errors
    /// [`ErrorKind::Key`]: the other kind of secret is needed, or this one is not the right one.
    pub fn open(&self, block: &KeyBlock) -> Result<Arc<Cipher>> {
        Ok(Arc::new(Derived::from_prk(&self.prk_of(block)?).cipher))
    }
}

/// What to encrypt with: the user's secret, and how the master key is made from it (a fresh KDF
/// per `--to` backup, the repository's own in a repository).
#[derive(Clone, Debug)]
pub struct Encryption {
    /// The user's secret.
    pub keys: Arc<Keys>,
    /// How the master key is made from it.
    pub kdf: Kdf,
}

/// The cipher of what `block` (if any) says is encrypted, with `keys`; `what` names it in errors.
/// Nothing encrypted: `None`, whatever keys were given.
///
/// # Errors
/// [`ErrorKind::Key`]: encrypted and no keys given, or the wrong ones.
pub fn cipher_for(block: Option<&KeyBlock>, keys: Option<&Keys>, what: &str) -> Result<Option<Arc<Cipher>>> {
    match (block, keys) {
        (None, _) => Ok(None),
        (Some(block), Some(keys)) => keys.open(block).map(Some).map_err(|e| e.context(what.to_string())),
        (Some(block), None) => Err(key_error(format!("{what} is encrypted: give {} to read it", block.kdf.needs()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passphrase(p: &str) -> Keys {
        Keys::from_passphrase(p.as_bytes().to_vec()).unwrap().with_argon2(64, 1, 1).unwrap()
    }

    #[test]
    fn a_sealed_block_opens_with_its_secret_only() {
        let keys = passphrase("correct horse");
        let kdf = keys.fresh_kdf().unwrap();
        let (block, cipher) = keys.seal(kdf).unwrap();
        assert_eq!(KeyBlock::decode(&block.encode()).unwrap(), block);
        let mut buf = b"pages and pages".to_vec();
        let tag = cipher.seal(NONCE_FRAMES, 7, b"hdr", &mut buf);
        assert_ne!(&buf[..], b"pages and pages");

        let again = keys.open(&block).unwrap();
        let mut copy = buf.clone();
        again.open(NONCE_FRAMES, 7, b"hdr", &mut copy, &tag).unwrap();
        assert_eq!(&copy[..], b"pages and pages");
        // Another nonce, other associated data, a flipped byte: all refused.
        assert!(again.open(NONCE_FRAMES, 8, b"hdr", &mut buf.clone(), &tag).is_err());
        assert!(again.open(NONCE_FRAMES, 7, b"hdx", &mut buf.clone(), &tag).is_err());
        let mut flipped = buf.clone();
        flipped[3] ^= 1;
        assert!(again.open(NONCE_FRAMES, 7, b"hdr", &mut flipped, &tag).is_err());

        let wrong = passphrase("correct hors3").open(&block).unwrap_err();
        assert_eq!(wrong.kind(), ErrorKind::Key);
        assert!(wrong.message().contains("wrong passphrase"), "{wrong}");
        let d = tempfile::tempdir().unwrap();
        let kf = d.path().join("k");
        std::fs::write(&kf, [9u8; 32]).unwrap();
        let other_kind = Keys::from_key_file(&kf).unwrap().open(&block).unwrap_err();
        assert!(other_kind.message().contains("passphrase"), "{other_kind}");
    }

    #[test]
    fn key_files_are_32_bytes_or_64_hex_digits_and_never_quoted() {
        let d = tempfile::tempdir().unwrap();
        let raw = d.path().join("raw");
        std::fs::write(&raw, [0xabu8; 32]).unwrap();
        let hex = d.path().join("hex");
        std::fs::write(&hex, format!("{}\n", "ab".repeat(32))).unwrap();
        let (a, b) = (Keys::from_key_file(&raw).unwrap(), Keys::from_key_file(&hex).unwrap());
        let (block, _) = a.seal(Kdf::KeyFile).unwrap();
        b.open(&block).expect("the same key written two ways");
        let short = d.path().join("short");
        std::fs::write(&short, b"hunter2-secret").unwrap();
        let e = Keys::from_key_file(&short).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Key);
        assert!(e.message().contains("32 random bytes") && !e.to_string().contains("hunter2"), "{e}");
        assert!(!format!("{a:?}").contains("ab"), "Debug shows no key bytes");
        assert!(Keys::from_passphrase(b"\n".to_vec()).is_err());
    }

    #[test]
    fn every_backup_gets_its_own_data_key() {
        let keys = passphrase("p");
        let kdf = keys.fresh_kdf().unwrap();
        let (b1, c1) = keys.seal(kdf).unwrap();
        let (b2, c2) = keys.seal(kdf).unwrap();
        assert_ne!(b1.wrapped.unwrap().sealed, b2.wrapped.unwrap().sealed, "a random data key each");
        let (mut x, mut y) = (vec![0u8; 32], vec![0u8; 32]);
        c1.seal(NONCE_FRAMES, 0, &[], &mut x);
        c2.seal(NONCE_FRAMES, 0, &[], &mut y);
        assert_ne!(x, y, "same nonce, different keys");
        assert_eq!(keys.masters.lock().unwrap().len(), 1, "Argon2id ran once for one salt");
    }

    #[test]
    fn a_set_s_block_is_rewrapped_in_place_with_the_same_data_key() {
        let d = tempfile::tempdir().unwrap();
        let kf = d.path().join("k");
        std::fs::write(&kf, [9u8; 32]).unwrap();
        let (old, new, other) = (passphrase("old"), Keys::from_key_file(&kf).unwrap(), passphrase("other"));
        // A layout 1 block under one secret, as sheaf wrote them before layout 2.
        let kdf = old.fresh_kdf().unwrap();
        let data_salt = [3u8; 32];
        let derived = Derived::new(&old.own_master(&kdf).unwrap(), &data_salt);
        let v1 = KeyBlock { kdf, data_salt, check: derived.check, wrapped: None };
        assert_eq!(KeyBlock::decode(&v1.encode()).unwrap(), v1);
        let mut text = b"written before".to_vec();
        let tag = derived.cipher.seal(NONCE_FRAMES, 1, b"", &mut text);

        // Moved to layout 2 under the same secret, then to another: the same data key opens it.
        let v2 = old.rewrap(&v1, &old).unwrap();
        assert_eq!(KeyBlock::decode(&v2.encode()).unwrap(), v2);
        assert_eq!(v2.encode()[4], 4, "layout 4: a passphrase's salt may be shared, so the nonce is the block's own");
        let v2b = old.rewrap(&v2, &new).unwrap();
        for (keys, block) in [(&old, &v1), (&old, &v2), (&new, &v2b)] {
            let mut copy = text.clone();
            keys.open(block).unwrap().open(NONCE_FRAMES, 1, b"", &mut copy, &tag).unwrap();
            assert_eq!(&copy[..], b"written before");
        }
        assert!(new.open(&v2).is_err() && old.open(&v2b).is_err(), "each opens with its own secret only");
        let e = other.open(&v2).unwrap_err();
        assert!(e.message().contains("wrong passphrase"), "{e}");
        assert!(other.rewrap(&v2, &other).is_err(), "only its secret rewraps it");
        // The parameters are bound to the sealed key: another salt does not open.
        let mut b = v2.encode();
        b[21] ^= 1;
        let crc = crc32c::crc32c(&b[..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
        assert!(old.open(&KeyBlock::decode(&b).unwrap()).is_err());
    }

    #[test]
    fn a_ring_s_older_master_key_does_not_hide_the_secret_s_own() {
        // A process that opened a migrated repository (its ring holds the key file it used
        // before) also reads a set under its own key file.
        let keys = Keys::from_key([1; 32]);
        keys.install_ring(&[(Kdf::KeyFile, Zeroizing::new([2; 32]))]);
        let (v2, cipher) = keys.seal(Kdf::KeyFile).unwrap();
        let mut text = b"own".to_vec();
        let tag = cipher.seal(NONCE_FRAMES, 0, b"", &mut text);
        keys.open(&v2).unwrap().open(NONCE_FRAMES, 0, b"", &mut text.clone(), &tag).unwrap();
        Keys::from_key([1; 32]).open(&v2).expect("sealed under the secret's own key, so it opens without the ring").open(NONCE_FRAMES, 0, b"", &mut text, &tag).unwrap();
        assert_eq!(&text[..], b"own");
        let own = Derived::new(&Zeroizing::new([1; 32]), &[5; 32]);
        let v1 = KeyBlock { kdf: Kdf::KeyFile, data_salt: [5; 32], check: own.check, wrapped: None };
        let moved = keys.rewrap(&v1, &keys).unwrap();
        let mut t = b"v1".to_vec();
        let tag = own.cipher.seal(NONCE_FRAMES, 3, b"", &mut t);
        keys.open(&moved).unwrap().open(NONCE_FRAMES, 3, b"", &mut t, &tag).expect("the same data key as the secret's own");
        // And the ring's entry still opens what it made.
        let ring_made = Derived::new(&Zeroizing::new([2; 32]), &[6; 32]);
        keys.open(&KeyBlock { kdf: Kdf::KeyFile, data_salt: [6; 32], check: ring_made.check, wrapped: None }).unwrap();
    }

    #[test]
    fn damaged_key_blocks_are_refused() {
        let keys = passphrase("p");
        let (block, _) = keys.seal(keys.fresh_kdf().unwrap()).unwrap();
        let b = block.encode();
        for i in 0..KEY_BLOCK_LEN {
            let mut bad = b;
            bad[i] ^= 4;
            assert!(KeyBlock::decode(&bad).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn a_block_rekeyed_for_another_ring_opens_there_only_with_the_same_data_key() {
        let ring = |id: u8, generation: u32| Kdf::Ring { ring: [id; 16], generation };
        let holding = |kdf: Kdf, master: u8| {
            let k = Keys::from_key([master ^ 0x5a; 32]);
            k.install_ring(&[(kdf, Zeroizing::new([master; 32]))]);
            k
        };
        let (a, b) = (ring(1, 1), ring(2, 3));
        let (source, target) = (holding(a, 7), holding(b, 9));
        let (block, cipher) = source.seal(a).unwrap();
        assert!(block.wrapped.is_none(), "a ring's own blocks are layout 1");
        let mut sealed = b"a frame's stored bytes".to_vec();
        let tag = cipher.seal(NONCE_FRAMES, 3, b"aad", &mut sealed);

        let moved = source.rekey(&block, &Encryption { keys: Arc::new(target), kdf: b }).unwrap();
        let bytes = moved.encode();
        assert_eq!(bytes[4], 3, "layout 3");
        assert_eq!(KeyBlock::decode(&bytes).unwrap(), moved);
        // The target's ring opens it, to the same data key: the frame opens as stored.
        let target = holding(b, 9);
        let opened = target.open(&moved).unwrap();
        let mut plain = sealed.clone();
        opened.open(NONCE_FRAMES, 3, b"aad", &mut plain, &tag).unwrap();
        assert_eq!(&plain[..], b"a frame's stored bytes");
        // The source's keys do not (they hold no generation of the target's ring), nor does a
        // block whose generation, ring or salt was changed (each is bound to the sealed key).
        assert_eq!(holding(a, 7).open(&moved).unwrap_err().kind(), ErrorKind::Key);
        for at in [10, 25, 30] {
            let mut other = bytes;
            other[at] ^= 1;
            let crc = crc32c::crc32c(&other[..92]);
            other[92..96].copy_from_slice(&crc.to_le_bytes());
            let decoded = KeyBlock::decode(&other).unwrap();
            let target = holding(b, 9);
            target.install_ring(&[(decoded.kdf, Zeroizing::new([9; 32]))]);
            assert!(target.open(&decoded).is_err(), "byte {at} changed and it still opens");
        }
        // A block under a secret of its own (a `--to` set) moves the same way.
        let own = Keys::from_key([4; 32]);
        let (block, cipher) = own.seal(Kdf::KeyFile).unwrap();
        let moved = own.rekey(&block, &Encryption { keys: Arc::new(holding(b, 9)), kdf: b }).unwrap();
        let mut x = b"pages".to_vec();
        let tag = cipher.seal(NONCE_FRAMES, 1, b"", &mut x);
        holding(b, 9).open(&moved).unwrap().open(NONCE_FRAMES, 1, b"", &mut x, &tag).unwrap();
        assert_eq!(&x[..], b"pages");
    }

    #[test]
    fn blocks_under_one_passphrase_salt_are_sealed_under_nonces_of_their_own() {
        // A repository without a key ring seals every object's key under its one Argon2id salt:
        // one key-encryption key, so each block gets a random nonce (layout 4).
        let keys = passphrase("one salt for all");
        let kdf = keys.fresh_kdf().unwrap();
        let (a, _) = keys.seal(kdf).unwrap();
        let (b, _) = keys.seal(kdf).unwrap();
        let (wa, wb) = (a.wrapped.unwrap(), b.wrapped.unwrap());
        assert_eq!(wa.salt, wb.salt, "the same Argon2id salt");
        assert_ne!(wa.nonce, wb.nonce, "but a nonce of each block's own");
        for block in [a, b] {
            let bytes = block.encode();
            assert_eq!(bytes[4], 4);
            assert_eq!(KeyBlock::decode(&bytes).unwrap(), block);
            keys.open(&block).unwrap();
            // The nonce is what the key was sealed under: another one does not open it.
            let mut other = bytes;
            other[90] ^= 1;
            let crc = crc32c::crc32c(&other[..92]);
            other[92..96].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(keys.open(&KeyBlock::decode(&other).unwrap()).unwrap_err().kind(), ErrorKind::Key);
        }
        // A layout 2 block (nonce 0, as written before) still opens.
        let mut old = KeyBlock { kdf, data_salt: [0; 32], check: [0; 16], wrapped: Some(Wrapped { salt: wa.salt, sealed: [0; 48], nonce: [0; 8] }) };
        let master = keys.own_master(&kdf).unwrap();
        let prk = Zeroizing::new([3u8; 32]);
        let mut buf = prk.clone();
        let tag = KeyBlock::kek(&master, &wa.salt).seal_in_place_separate_tag(Nonce::assume_unique_for_key([0; 12]), Aad::from(&old.head()[..36]), buf.as_mut_slice()).unwrap();
        let w = old.wrapped.as_mut().unwrap();
        w.sealed[..32].copy_from_slice(buf.as_slice());
        w.sealed[32..].copy_from_slice(tag.as_ref());
        assert_eq!(old.encode()[4], 2);
        assert_eq!(keys.prk_of(&KeyBlock::decode(&old.encode()).unwrap()).unwrap(), prk);
    }
}
