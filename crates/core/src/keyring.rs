//! A repository's keys, as envelopes: random data keys (the key ring), held only wrapped by the
//! repository's key-encryption keys, any one of which opens it.
//!
//! ```text
//!  passphrase ──Argon2id(record salt)──┐
//!  key file / --key-command key ───────┴──HKDF(record salt)──► X25519 secret s, public P = s·G
//!  REPO/keys/ID.key   id, kind, salt, Argon2id cost, P, ring id, generations,
//!                     E = e·G, AES-256-GCM(HKDF(e·P), ring)       one per key; in the clear
//!  ring = [(generation 1, 32 random bytes), (generation 2, ...), ..., (older master keys)]
//!  an object's data key = HKDF(ring generation G, its own data salt)   (crypto.rs, Kdf::Ring)
//! ```
//!
//! Why a key pair per key, where restic wraps one master key with each key symmetrically: so that
//! a rotation can wrap a new ring for every key holder without knowing their secrets (only their
//! public halves), and a key removed before the rotation learns nothing written after it. So:
//! - `add` seals the ring for one more key; `remove` deletes one record (never the last);
//! - `rotate` adds a generation, which everything written from then on uses, and writes every
//!   record again; what was written before keeps its generation, so no backup or WAL file is
//!   rewritten: the cost is one small object per key, whatever the repository holds;
//! - `adopt` brings a repository encrypted before rings (one passphrase or key file whose master
//!   key every object used) into this scheme by writing its first record: the old master key
//!   becomes an entry of the ring, so any key opens the old objects too. (The old secret still
//!   derives that master key by itself; what was written before cannot stop opening with it
//!   without being rewritten, and the docs say so.)
//!
//! Record files are written whole and without an Object Lock (they must be replaceable and
//! removable); a rotation cut short leaves some records a generation behind, which reads still
//! open and writers refuse, naming the fix (rotate again with an up-to-date key).
//!
//! The curve (x25519-dalek), the AEAD (ring), HKDF and Argon2id are libraries; this module only
//! decides which bytes go where. Secrets live in [`Zeroizing`] buffers or dalek's own, wiped on
//! drop.

use hkdf::Hkdf;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::crypto::{Kdf, Keys, SecretKind};
use crate::error::{Error, ErrorKind, Result};
use crate::text::{hex, unhex};

/// Where a repository keeps its key records.
pub const KEYS_DIR: &str = "keys/";
/// A key record's name ends so.
pub const KEY_SUFFIX: &str = ".key";
const RECORD_FORMAT: u32 = 1;
const ENTRY_LEN: usize = 64;

fn random<const N: usize>() -> Result<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| Error::new(ErrorKind::Io, format!("the system's random source failed: {e}")))?;
    Ok(b)
}

/// A key ring: its id and master keys (its generations, and what a repository used before it had
/// one). Never formatted.
pub struct Ring {
    id: [u8; 16],
    entries: Vec<(Kdf, Zeroizing<[u8; 32]>)>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ring({}, {} generations)", hex(&self.id), self.generations())
    }
}

impl Ring {
    /// A new ring with one generation.
    ///
    /// # Errors
    /// When the random source fails.
    pub fn new() -> Result<Ring> {
        let id = random()?;
        Ok(Ring { id, entries: vec![(Kdf::Ring { ring: id, generation: 1 }, Zeroizing::new(random()?))] })
    }

    /// A new ring for a repository that was encrypted under `kdf` with `master` before it had
    /// one: that master key, and a first generation for what is written from now on.
    ///
    /// # Errors
    /// When the random source fails.
    pub fn adopting(kdf: Kdf, master: Zeroizing<[u8; 32]>) -> Result<Ring> {
        let mut ring = Ring::new()?;
        ring.entries.insert(0, (kdf, master));
        Ok(ring)
    }

    /// This ring with one more generation.
    ///
    /// # Errors
    /// When the random source fails.
    pub fn rotated(&self) -> Result<Ring> {
        let mut entries: Vec<_> = self.entries.iter().map(|(k, m)| (*k, m.clone())).collect();
        entries.push((Kdf::Ring { ring: self.id, generation: self.generations() + 1 }, Zeroizing::new(random()?)));
        Ok(Ring { id: self.id, entries })
    }

    /// Its id, in hex.
    pub fn id(&self) -> String {
        hex(&self.id)
    }

    /// How many generations it has.
    pub fn generations(&self) -> u32 {
        self.entries.iter().filter_map(|(k, _)| if let Kdf::Ring { generation, .. } = k { Some(*generation) } else { None }).max().unwrap_or(0)
    }

    /// What new things are encrypted under: the newest generation.
    pub fn current(&self) -> Kdf {
        Kdf::Ring { ring: self.id, generation: self.generations() }
    }

    /// Its master keys, for [`Keys::install_ring`].
    pub fn entries(&self) -> &[(Kdf, Zeroizing<[u8; 32]>)] {
        &self.entries
    }

    fn encode(&self) -> Zeroizing<Vec<u8>> {
        let mut out = Zeroizing::new(Vec::with_capacity(self.entries.len() * ENTRY_LEN));
        for (kdf, key) in &self.entries {
            let mut e = [0u8; ENTRY_LEN];
            match *kdf {
                Kdf::KeyFile => e[0] = 1,
                Kdf::Argon2id { m_kib, t, p, salt } => {
                    e[0] = 2;
                    e[1..5].copy_from_slice(&m_kib.to_le_bytes());
                    e[5..9].copy_from_slice(&t.to_le_bytes());
                    e[9..13].copy_from_slice(&p.to_le_bytes());
                    e[13..29].copy_from_slice(&salt);
                }
                Kdf::Ring { ring, generation } => {
                    e[0] = 3;
                    e[1..17].copy_from_slice(&ring);
                    e[17..21].copy_from_slice(&generation.to_le_bytes());
                }
            }
            e[32..].copy_from_slice(key.as_ref());
            out.extend_from_slice(&e);
            zeroize::Zeroize::zeroize(&mut e);
        }
        out
    }

    fn decode(id: [u8; 16], plain: &[u8]) -> Result<Ring> {
        let bad = || Error::corrupt("key record: its ring does not decode (damaged, or written by a newer sheaf)");
        if plain.is_empty() || plain.len() % ENTRY_LEN != 0 {
            return Err(bad());
        }
        let mut entries = Vec::new();
        for e in plain.chunks_exact(ENTRY_LEN) {
            let word = |at: usize| u32::from_le_bytes(e[at..at + 4].try_into().expect("4 bytes"));
            let kdf = match e[0] {
                1 => Kdf::KeyFile,
                2 => Kdf::Argon2id { m_kib: word(1), t: word(5), p: word(9), salt: e[13..29].try_into().expect("16 bytes") },
                3 => Kdf::Ring { ring: e[1..17].try_into().expect("16 bytes"), generation: word(17) },
                _ => return Err(bad()),
            };
            let mut key = Zeroizing::new([0u8; 32]);
            key.copy_from_slice(&e[32..]);
            entries.push((kdf, key));
        }
        let ring = Ring { id, entries };
        if ring.generations() == 0 {
            return Err(bad());
        }
        Ok(ring)
    }
}

/// Argon2id's cost in a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cost {
    /// Memory in KiB.
    pub m_kib: u32,
    /// Passes.
    pub t: u32,
    /// Lanes.
    pub p: u32,
}

/// One key's record, `keys/ID.key`: everything in it is public (a public key, a wrapped ring).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// Layout version.
    pub format: u32,
    /// Its id (16 hex digits), what `sheaf key remove --key` takes.
    pub id: String,
    /// Which kind of secret opens it.
    pub kind: SecretKind,
    /// Argon2id's cost, for a passphrase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argon2: Option<Cost>,
    /// Salt of Argon2id and of the key-encryption key.
    pub salt: String,
    /// The key-encryption key's public half.
    pub public: String,
    /// The ring it wraps.
    pub ring: String,
    /// How many generations the ring it wraps has.
    pub generations: u32,
    /// The wrapping's ephemeral public key.
    pub ephemeral: String,
    /// The ring, sealed.
    pub sealed: String,
    /// When it was added, seconds since the epoch.
    pub created: i64,
    /// Who added it (user@host), for `sheaf key list`.
    pub added_by: String,
}

fn bytes<const N: usize>(text: &str, what: &str) -> Result<[u8; N]> {
    unhex(text.as_bytes()).and_then(|v| v.try_into().ok()).ok_or_else(|| Error::corrupt(format!("key record: its {what} is not {N} bytes of hex (damaged)")))
}

impl KeyRecord {
    /// The record's name in the repository.
    pub fn name(&self) -> String {
        format!("{KEYS_DIR}{}{KEY_SUFFIX}", self.id)
    }

    /// Which kind of secret opens it.
    pub fn secret_kind(&self) -> SecretKind {
        self.kind
    }

    fn kdf(&self) -> Result<Kdf> {
        Ok(match (self.secret_kind(), self.argon2) {
            (SecretKind::Key, _) => Kdf::KeyFile,
            (SecretKind::Passphrase, Some(Cost { m_kib, t, p })) => Kdf::Argon2id { m_kib, t, p, salt: bytes(&self.salt, "salt")? },
            (SecretKind::Passphrase, None) => return Err(Error::corrupt(format!("key record {}: a passphrase's record without its Argon2id cost (damaged)", self.id))),
        })
    }

    /// The key-encryption key `keys` makes for this record; `None` when `keys` is the other kind
    /// of secret (no Argon2id is run for it).
    fn secret_of(&self, keys: &Keys) -> Result<Option<StaticSecret>> {
        if keys.kind() != self.secret_kind() {
            return Ok(None);
        }
        let seed = keys.own_master(&self.kdf()?)?;
        let salt: [u8; 16] = bytes(&self.salt, "salt")?;
        let mut scalar = Zeroizing::new([0u8; 32]);
        Hkdf::<Sha256>::new(Some(&salt), seed.as_ref()).expand(b"sheaf/2 key-encryption key x25519", scalar.as_mut()).expect("32 bytes is a valid HKDF length");
        Ok(Some(StaticSecret::from(*scalar)))
    }

    /// The associated data that binds the sealed ring to the record's other fields.
    fn aad(&self) -> Vec<u8> {
        let mut a = b"sheaf key record 1\0".to_vec();
        for field in [self.id.as_str(), self.kind.name(), &self.salt, &self.public, &self.ring, &self.ephemeral] {
            a.extend_from_slice(field.as_bytes());
            a.push(0);
        }
        if let Some(c) = self.argon2 {
            for w in [c.m_kib, c.t, c.p] {
                a.extend_from_slice(&w.to_le_bytes());
            }
        }
        a.extend_from_slice(&self.generations.to_le_bytes());
        a
    }

    /// A record of a new key (`keys`) that opens `ring`.
    ///
    /// # Errors
    /// When the random source fails.
    pub fn seal(keys: &Keys, ring: &Ring, created: i64, added_by: &str) -> Result<KeyRecord> {
        let salt: [u8; 16] = random()?;
        let kind = keys.kind();
        let argon2 = match kind {
            SecretKind::Key => None,
            SecretKind::Passphrase => {
                let (m_kib, t, p) = keys.argon2_cost();
                Some(Cost { m_kib, t, p })
            }
        };
        let mut record = KeyRecord {
            format: RECORD_FORMAT,
            id: hex(&random::<8>()?),
            kind,
            argon2,
            salt: hex(&salt),
            public: String::new(),
            ring: String::new(),
            generations: 0,
            ephemeral: String::new(),
            sealed: String::new(),
            created,
            added_by: added_by.to_string(),
        };
        let secret = record.secret_of(keys)?.expect("the record is of the secret's kind");
        record.public = hex(PublicKey::from(&secret).as_bytes());
        record.wrap(ring)
    }

    /// The same record (id, key) wrapping `ring` instead: what a rotation writes for every key,
    /// knowing only its public half.
    ///
    /// # Errors
    /// When the random source fails; a damaged record.
    pub fn wrap(mut self, ring: &Ring) -> Result<KeyRecord> {
        let public = PublicKey::from(bytes::<32>(&self.public, "public key")?);
        let ephemeral = StaticSecret::from(random::<32>()?);
        self.ephemeral = hex(PublicKey::from(&ephemeral).as_bytes());
        self.ring = ring.id();
        self.generations = ring.generations();
        let shared = ephemeral.diffie_hellman(&public);
        if !shared.was_contributory() {
            return Err(Error::corrupt(format!("key record {}: its public key is not one a secret makes (damaged)", self.id)));
        }
        let aead = wrap_key(shared.as_bytes(), &self.ephemeral, &self.public);
        let mut buf = ring.encode();
        let tag = aead.seal_in_place_separate_tag(Nonce::assume_unique_for_key([0; 12]), Aad::from(self.aad()), buf.as_mut_slice()).expect("AES-GCM seals any buffer under 64 GiB");
        self.sealed = format!("{}{}", hex(&buf), hex(tag.as_ref()));
        Ok(self)
    }

    /// The ring, when `keys` is this record's secret; `None` when it is another one.
    ///
    /// # Errors
    /// A damaged record (its secret, but the ring does not open).
    pub fn open(&self, keys: &Keys) -> Result<Option<Ring>> {
        if self.format != RECORD_FORMAT {
            return Err(Error::invalid(format!("key record {}: layout {} is not known to this sheaf: upgrade sheaf", self.id, self.format)));
        }
        let Some(secret) = self.secret_of(keys)? else { return Ok(None) };
        if hex(PublicKey::from(&secret).as_bytes()) != self.public {
            return Ok(None);
        }
        let shared = secret.diffie_hellman(&PublicKey::from(bytes::<32>(&self.ephemeral, "ephemeral key")?));
        let aead = wrap_key(shared.as_bytes(), &self.ephemeral, &self.public);
        let mut buf = Zeroizing::new(unhex(self.sealed.as_bytes()).ok_or_else(|| Error::corrupt(format!("key record {}: its sealed ring is not hex (damaged)", self.id)))?);
        let damaged = || {
            Error::corrupt(format!(
                "key record {}: the ring does not open with its own key: the record was altered or damaged (another key may still open the repository)",
                self.id
            ))
        };
        let plain = aead.open_in_place(Nonce::assume_unique_for_key([0; 12]), Aad::from(self.aad()), buf.as_mut_slice()).map_err(|_| damaged())?;
        let ring = Ring::decode(bytes(&self.ring, "ring id")?, plain)?;
        if ring.generations() != self.generations {
            return Err(damaged());
        }
        Ok(Some(ring))
    }
}

/// The AEAD of one wrapping: its key is used once (a fresh ephemeral key each time).
fn wrap_key(shared: &[u8; 32], ephemeral: &str, public: &str) -> LessSafeKey {
    let salt = format!("{ephemeral}{public}");
    let mut key = Zeroizing::new([0u8; 32]);
    Hkdf::<Sha256>::new(Some(salt.as_bytes()), shared).expand(b"sheaf/2 key ring wrap", key.as_mut()).expect("32 bytes is a valid HKDF length");
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key.as_ref()).expect("a 32-byte key"))
}

/// Words for a record in messages: its id and kind.
pub fn describe(r: &KeyRecord) -> String {
    format!("{} ({})", r.id, r.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(p: &str) -> Keys {
        Keys::from_passphrase(p.as_bytes().to_vec()).unwrap().with_argon2(64, 1, 1).unwrap()
    }

    #[test]
    fn a_record_opens_with_its_secret_and_a_rotation_needs_none() {
        let ring = Ring::new().unwrap();
        let alice = pass("alice's passphrase");
        let bob = Keys::from_key([7; 32]);
        let ra = KeyRecord::seal(&alice, &ring, 1, "a@h").unwrap();
        let rb = KeyRecord::seal(&bob, &ring, 1, "b@h").unwrap();
        let json = serde_json::to_string(&ra).unwrap();
        assert!(!json.contains("alice"), "{json}");
        let ra: KeyRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(ra.open(&alice).unwrap().unwrap().current(), ring.current());
        assert!(ra.open(&bob).unwrap().is_none(), "another kind of secret");
        assert!(ra.open(&pass("alice's passphrasE")).unwrap().is_none(), "another passphrase");
        assert!(rb.open(&Keys::from_key([8; 32])).unwrap().is_none(), "another key");

        // Rotation wraps a new generation for bob without bob's key.
        let next = ring.rotated().unwrap();
        let rb2 = rb.clone().wrap(&next).unwrap();
        assert_eq!(rb2.id, rb.id);
        assert_ne!(rb2.ephemeral, rb.ephemeral);
        let opened = rb2.open(&bob).unwrap().unwrap();
        assert_eq!(opened.generations(), 2);
        assert_eq!(opened.entries().len(), 2, "the old generation is kept");

        // Altered fields are refused as damage, not taken for another key.
        let mut bad = rb2.clone();
        bad.generations = 1;
        assert_eq!(bad.open(&bob).unwrap_err().kind(), ErrorKind::Corrupt);
        let mut bad = rb2.clone();
        let mut s = bad.sealed.into_bytes();
        s[3] = if s[3] == b'0' { b'1' } else { b'0' };
        bad.sealed = String::from_utf8(s).unwrap();
        assert_eq!(bad.open(&bob).unwrap_err().kind(), ErrorKind::Corrupt);
    }

    #[test]
    fn an_adopted_ring_keeps_the_old_master_key() {
        let old = pass("old");
        let kdf = old.fresh_kdf().unwrap();
        let (block, _) = old.seal(kdf).unwrap();
        let ring = Ring::adopting(kdf, old.own_master(&kdf).unwrap()).unwrap();
        let new = Keys::from_key([1; 32]);
        assert!(new.open(&block).is_err(), "the new key alone does not open the old object");
        let rec = KeyRecord::seal(&new, &ring, 0, "x").unwrap();
        new.install_ring(rec.open(&new).unwrap().unwrap().entries());
        new.open(&block).expect("through the ring");
        let (nb, _) = new.seal(ring.current()).unwrap();
        assert!(matches!(nb.kdf, Kdf::Ring { generation: 1, .. }));
        assert!(old.open(&nb).is_err(), "the old secret alone does not open what the ring wrote");
    }
}
