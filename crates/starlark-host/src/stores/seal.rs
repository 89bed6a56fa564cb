//! Sealing secrets at rest: the store key and XChaCha20-Poly1305.
//!
//! Every secret and provider key is stored as `nonce (24 bytes) ||
//! ciphertext+tag`, with a fresh random nonce per write (192-bit nonces
//! make collisions negligible without a counter kept anywhere) and the
//! row's identity as associated data, so a sealed value moved to another
//! row (another package's secret, say) no longer opens.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

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
    /// not get a new one silently. A key file that another user could
    /// read or write, or that is not this user's, is refused.
    pub fn from_env_or_file(file: &Path, create: bool) -> Result<(Self, KeyOrigin), StoreError> {
        if let Some(v) = std::env::var_os(STORE_KEY_ENV) {
            let v = v
                .into_string()
                .map_err(|_| format!("{STORE_KEY_ENV} is not valid text"))?;
            let key = Self::from_hex(&v).map_err(|e| format!("{STORE_KEY_ENV}: {e}"))?;
            return Ok((key, KeyOrigin::Env));
        }
        match std::fs::symlink_metadata(file) {
            Ok(meta) => {
                // SAFETY: geteuid has no preconditions.
                let me = unsafe { libc::geteuid() };
                if !meta.is_file() || meta.uid() != me || meta.mode() & 0o077 != 0 {
                    return Err(format!(
                        "refusing the key file {}: it must be a regular file of uid {me} with \
                         mode 0600 (chmod 600 it, or set {STORE_KEY_ENV})",
                        file.display()
                    ));
                }
                let text = std::fs::read_to_string(file)
                    .map_err(|e| format!("cannot read the key file {}: {e}", file.display()))?;
                let key = Self::from_hex(&text)
                    .map_err(|e| format!("the key file {}: {e}", file.display()))?;
                Ok((key, KeyOrigin::File(file.to_path_buf())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => Err(format!(
                "the store key file {} is missing, and the database exists: restore the key \
                 file, or set {STORE_KEY_ENV} to its key (a new key cannot open the secrets)",
                file.display()
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate()?;
                if let Some(dir) = file.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        format!("cannot create the key file's dir {}: {e}", dir.display())
                    })?;
                }
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(file)
                    .map_err(|e| format!("cannot create the key file {}: {e}", file.display()))?;
                writeln!(f, "{}", hex::encode(key.0))
                    .and_then(|_| f.sync_all())
                    .map_err(|e| format!("cannot write the key file {}: {e}", file.display()))?;
                Ok((key, KeyOrigin::Created(file.to_path_buf())))
            }
            Err(e) => Err(format!("cannot read the key file {}: {e}", file.display())),
        }
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
