//! Checking and canonicalising the paths a profile grants: absolute, no
//! NUL, UTF-8, resolved through the injected [`Canonicalize`].

use std::io;
use std::path::{Path, PathBuf};

use super::{Canonicalize, PathRole, ProfileError};

pub(super) fn check_raw(role: PathRole, path: &Path) -> Result<(), ProfileError> {
    if path.as_os_str().as_encoded_bytes().contains(&0) {
        return Err(ProfileError::ContainsNul {
            role,
            path: path.to_path_buf(),
        });
    }
    if !path.is_absolute() {
        return Err(ProfileError::NotAbsolute {
            role,
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

pub(super) fn utf8(role: PathRole, path: PathBuf) -> Result<String, ProfileError> {
    path.into_os_string()
        .into_string()
        .map_err(|raw| ProfileError::NotUtf8 {
            role,
            path: PathBuf::from(raw),
        })
}

/// Canonicalises a required path (scratch, package).
pub(super) fn required(
    role: PathRole,
    path: &Path,
    canon: &dyn Canonicalize,
) -> Result<PathBuf, ProfileError> {
    check_raw(role, path)?;
    // Reject non-UTF-8 input before touching the file system, so the error
    // names the path the user wrote.
    if path.to_str().is_none() {
        return Err(ProfileError::NotUtf8 {
            role,
            path: path.to_path_buf(),
        });
    }
    canon
        .canonicalize(path)
        .map_err(|source| ProfileError::Canonicalize {
            role,
            path: path.to_path_buf(),
            source,
        })
}

/// Canonicalises an optional extra grant: `None` if it does not exist.
pub(super) fn optional(
    role: PathRole,
    path: &Path,
    canon: &dyn Canonicalize,
) -> Result<Option<PathBuf>, ProfileError> {
    match required(role, path, canon) {
        Ok(p) => Ok(Some(p)),
        Err(ProfileError::Canonicalize { source, .. })
            if source.kind() == io::ErrorKind::NotFound =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
