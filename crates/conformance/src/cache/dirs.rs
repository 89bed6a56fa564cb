//! Where the cache is: the dir this run uses, and those a later run of
//! this user with another environment would use (which no sandbox may
//! write either).

use std::ffi::{CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::euid;

/// Where cache files live: `$XDG_CACHE_HOME/cordon`, else
/// `$HOME/.cache/cordon`. A relative value is ignored, as the XDG base
/// directory spec asks; with neither variable usable there is no cache.
pub fn default_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|h| h.join(".cache")))
        .map(|d| d.join("cordon"))
}

/// Where a later run of this user with another environment would look:
/// `$HOME/.cache/cordon` and the account's home's (from the password
/// database), whatever `XDG_CACHE_HOME` says now.
pub(super) fn other_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .into_iter()
        .collect();
    // SAFETY: getpwuid_r with buffers of ours; the result points into them.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let r = libc::getpwuid_r(euid(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out);
        if r == 0 && !out.is_null() && !pw.pw_dir.is_null() {
            let dir = CStr::from_ptr(pw.pw_dir);
            v.push(PathBuf::from(OsStr::from_bytes(dir.to_bytes())));
        }
    }
    v.into_iter().map(|h| h.join(".cache/cordon")).collect()
}
