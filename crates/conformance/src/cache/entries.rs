//! What one backend's cache file holds: a report per key (tier, uid
//! range, …), the newest first, at most [`MAX_ENTRIES`] and
//! [`MAX_CACHE_BYTES`].

use serde::Serialize;

use super::{CacheFile, MAX_CACHE_BYTES, MAX_ENTRIES};

/// What a backend's cache file holds: its reports, one per key.
#[derive(Serialize)]
pub(super) struct Stored {
    entries: Vec<CacheFile>,
}

/// The reports in a cache file's text: its `entries`, or the one report a
/// file written before there were several holds. (Not an untagged enum:
/// serde buffers those in a form without 128-bit integers, which the
/// binary's identity has.)
pub(super) fn parse(text: &str) -> serde_json::Result<Vec<CacheFile>> {
    let mut v: serde_json::Value = serde_json::from_str(text)?;
    match v.get_mut("entries") {
        Some(entries) => serde_json::from_value(entries.take()),
        None => Ok(vec![serde_json::from_value(v)?]),
    }
}

/// The file to write after a run that made `new`: it first, then the
/// reports of other keys of this boot and binary (the rest can never be
/// hit again), as many as fit.
pub(super) fn merged(cached: Vec<CacheFile>, new: CacheFile) -> Stored {
    let others: Vec<CacheFile> = cached
        .into_iter()
        .filter(|f| {
            f.key != new.key
                && f.key.boot_id == new.key.boot_id
                && f.key.exe_sha256 == new.key.exe_sha256
        })
        .take(MAX_ENTRIES - 1)
        .collect();
    let mut entries = vec![new];
    entries.extend(others);
    // A file past the read limit would be ignored whole: the oldest
    // reports go first.
    while entries.len() > 1
        && serde_json::to_vec_pretty(&entries)
            .map_or(true, |j| j.len() as u64 > MAX_CACHE_BYTES - 64)
    {
        entries.pop();
    }
    Stored { entries }
}
