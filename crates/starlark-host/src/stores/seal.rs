//! Sealing secrets at rest: the store key and XChaCha20-Poly1305.
//!
//! Every secret and provider key is stored as `nonce (24 bytes) ||
//! ciphertext+tag`, with a fresh random nonce per write (192-bit nonces
//! make collisions negligible without a counter kept anywhere) and the
//! row's identity as associated data, so a sealed value moved to another
//! row (another package's secret, say) no longer opens.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use super::fs_checks::{open_checked, Kind};
use super::StoreError;

/// The environment variable that holds the store key (64 hex digits),
/// read before any key file.
pub const STORE_KEY_ENV: &str = "CORDON_STORE_KEY";

const NONCE_BYTES: usize = 24;

/// The 256-bit key that seals a store's secrets. Never printed.
#[derive(Clone)]
pub struct StoreKey([u8; 32]);

impl std::fmt::Debug for StoreKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreKey(<redacted>)")
    }
}

impl StoreKey {
    /// A key from 64 hex digits.
    pub fn from_hex(hex_key: &str) -> Result<Self, StoreError> {
        let bytes = hex::decode(hex_key.trim())
            .ok()
            .filter(|b| b.len() == 32)
            .ok_or("a store key is 64 hex digits (32 bytes)")?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&bytes);
        Ok(StoreKey(key))
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, StoreError> {
        let mut key = [0u8; 32];
        getrandom::getrandom(&mut key).map_err(|e| format!("no randomness for a key: {e}"))?;
        Ok(StoreKey(key))
    }

    /// The key from [`STORE_KEY_ENV`] if it is set, else from `file`. A
    /// missing file is created (mode 0600, with a fresh key) only when
    /// `create` — for a new database: a database whose key is lost must
    /// not get a new one silently. A key file that is a symlink, that
    /// another user could read or write, that is not this user's, or whose
    /// directory others could write, is refused (`fs_checks.rs`).
    pub fn from_env_or_file(file: &Path, create: bool) -> Result<(Self, KeyOrigin), StoreError> {
        if let Some(v) = std::env::var_os(STORE_KEY_ENV) {
            let v = v
                .into_string()
                .map_err(|_| format!("{STORE_KEY_ENV} is not valid text"))?;
            let key = Self::from_hex(&v).map_err(|e| format!("{STORE_KEY_ENV}: {e}"))?;
            return Ok((key, KeyOrigin::Env));
        }
        let hint = |e: String| format!("{e} (or set {STORE_KEY_ENV})");
        match open_checked(file, Kind::Key, false).map_err(hint)? {
            Some(mut checked) => {
                let mut text = String::new();
                Read::by_ref(&mut checked.file)
                    .take(1024)
                    .read_to_string(&mut text)
                    .map_err(|e| format!("cannot read the key file {}: {e}", file.display()))?;
                let key = Self::from_hex(&text)
                    .map_err(|e| format!("the key file {}: {e}", file.display()))?;
                Ok((key, KeyOrigin::File(checked.path)))
            }
            None if !create => Err(format!(
                "the store key file {} is missing, and the database exists: restore the key \
                 file, or set {STORE_KEY_ENV} to its key (a new key cannot open the secrets)",
                file.display()
            )),
            None => {
                let key = Self::generate()?;
                let mut checked = open_checked(file, Kind::Key, true)
                    .map_err(hint)?
                    .ok_or_else(|| format!("cannot create the key file {}", file.display()))?;
                writeln!(checked.file, "{}", hex::encode(key.0))
                    .and_then(|_| checked.file.sync_all())
                    .map_err(|e| format!("cannot write the key file {}: {e}", file.display()))?;
                Ok((key, KeyOrigin::Created(checked.path)))
            }
        }
    }

    /// The key that authenticates the store's rows: derived from this key
    /// for that one purpose (BLAKE3's key derivation, with a context string
    /// no other use shares), so the sealing key is never used for a second
    /// algorithm.
    pub(super) fn row_mac_key(&self) -> [u8; 32] {
        blake3::derive_key("cordon store 2026 row MAC v1", &self.0)
    }

    pub(super) fn sealer(&self) -> Sealer {
        Sealer(XChaCha20Poly1305::new((&self.0).into()))
    }
}

/// Where a [`StoreKey`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOrigin {
    /// [`STORE_KEY_ENV`].
    Env,
    /// An existing key file.
    File(PathBuf),
    /// A key file created now, with a fresh key.
    Created(PathBuf),
}

pub(super) struct Sealer(XChaCha20Poly1305);

impl Sealer {
    /// `nonce || ciphertext`, bound to `aad` (the row it is stored in).
    pub(super) fn seal(&self, aad: &str, plaintext: &[u8]) -> Result<Vec<u8>, StoreError> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::getrandom(&mut nonce).map_err(|e| format!("no randomness for a nonce: {e}"))?;
        let ct = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| "sealing failed".to_owned())?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Opens what [`Sealer::seal`] made for the same `aad`; fails on any
    /// other key, row or change.
    pub(super) fn open(&self, aad: &str, sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        if sealed.len() < NONCE_BYTES {
            return Err("a sealed value is too short".into());
        }
        let (nonce, ct) = sealed.split_at(NONCE_BYTES);
        self.0
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: ct,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| {
                format!(
                    "cannot open the sealed value of {aad}: the store key differs from the one it \
                     was written with, or the database was changed"
                )
            })
    }
}
