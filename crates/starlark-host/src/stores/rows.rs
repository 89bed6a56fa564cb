//! Row MACs: every package, grant and provider row of the store carries a
//! keyed BLAKE3 MAC (a key derived from the store key) over its table, its
//! identity and every column, so a row changed outside cordon — code, a
//! manifest, an allowlist, a grant's approval, a provider's URL — is
//! refused, and a row copied to another identity does not verify there.
//!
//! Keyed BLAKE3 rather than HMAC-SHA256: it is already in the dependency
//! tree (through the interpreter), its keyed mode is a MAC by design (no
//! HMAC construction around a plain hash), and its key derivation gives
//! the MAC a key of its own from the store key.

use super::StoreError;

/// One column's value, as the MAC sees it.
pub(super) enum Field<'a> {
    /// Text.
    Text(&'a str),
    /// Optional text (a NULL column).
    OptText(Option<&'a str>),
    /// An integer.
    Int(i64),
    /// An optional integer.
    OptInt(Option<i64>),
    /// Bytes.
    Bytes(&'a [u8]),
}

/// Computes and checks row MACs with one key.
pub(super) struct RowMac([u8; 32]);

impl RowMac {
    /// A MAC under `key` (the store key's derived MAC key).
    pub(super) fn new(key: [u8; 32]) -> Self {
        RowMac(key)
    }

    /// The MAC of a row of `table` with `fields` (identity first). Every
    /// field is length-prefixed and typed, so no two rows encode alike.
    pub(super) fn mac(&self, table: &str, fields: &[Field<'_>]) -> Vec<u8> {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        let put = |h: &mut blake3::Hasher, tag: u8, bytes: &[u8]| {
            h.update(&[tag]);
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        put(&mut h, b'T', table.as_bytes());
        for f in fields {
            match f {
                Field::Text(s) | Field::OptText(Some(s)) => put(&mut h, b's', s.as_bytes()),
                Field::OptText(None) | Field::OptInt(None) => put(&mut h, b'n', &[]),
                Field::Int(i) | Field::OptInt(Some(i)) => put(&mut h, b'i', &i.to_le_bytes()),
                Field::Bytes(b) => put(&mut h, b'b', b),
            }
        }
        h.finalize().as_bytes().to_vec()
    }

    /// Checks `mac` (a NULL one too: a row written before rows were
    /// authenticated) in constant time; `row` names it in the error, and
    /// `fix` says how to replace it.
    pub(super) fn check(
        &self,
        table: &str,
        fields: &[Field<'_>],
        mac: Option<&[u8]>,
        row: &str,
        fix: &str,
    ) -> Result<(), StoreError> {
        let want = blake3::Hash::from_bytes(
            self.mac(table, fields)
                .try_into()
                .map_err(|_| "internal: a MAC is not 32 bytes".to_owned())?,
        );
        let ok = mac
            .and_then(|m| <[u8; 32]>::try_from(m).ok())
            .is_some_and(|m| want == blake3::Hash::from_bytes(m));
        if ok {
            return Ok(());
        }
        Err(format!(
            "{row} was changed outside cordon (its MAC under the store key does not match, or \
             it has none), so it is not used: {fix}"
        ))
    }
}
