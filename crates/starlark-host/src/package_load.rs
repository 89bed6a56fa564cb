//! Reading a package from disk: a directory with `package.toml` and its
//! `.star` files, or a single `.star` file, under caps on files, bytes and
//! depth.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use cordon_starlark_protocol::{normalize_load_path, Manifest, Package, Permission};

use crate::error::StarlarkHostError;

/// Caps applied while reading a package from disk.
const MAX_PACKAGE_FILES: usize = 256;
const MAX_PACKAGE_BYTES: u64 = 8 * 1024 * 1024;
const MAX_DIR_DEPTH: usize = 8;

/// Load a package from a directory (with `package.toml`) or from a single
/// `.star` file (id = file stem, no permissions).
///
/// Every `.star` file under the directory is read into memory (symlinks are
/// not followed), so `load()` later resolves only against those files.
pub fn load_package_from_path(path: impl AsRef<Path>) -> Result<Package, StarlarkHostError> {
    let path = path.as_ref();
    let io = |e: std::io::Error| StarlarkHostError::PackageIo {
        path: path.display().to_string(),
        source: e,
    };
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if meta.file_type().is_symlink() {
        return Err(StarlarkHostError::InvalidPackage(format!(
            "{} is a symlink: pass the package's own file or directory (links are not followed)",
            path.display()
        )));
    }
    if meta.is_file() {
        if path.extension().and_then(|e| e.to_str()) != Some("star") {
            return Err(StarlarkHostError::InvalidPackage(format!(
                "{} is not a .star file; pass a .star script or a package directory with package.toml",
                path.display()
            )));
        }
        if meta.len() > MAX_PACKAGE_BYTES {
            return Err(StarlarkHostError::InvalidPackage(format!(
                "{} is larger than {MAX_PACKAGE_BYTES} bytes",
                path.display()
            )));
        }
        let src = read_regular_file(path).map_err(io)?;
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("script")
            .to_owned();
        let file = path
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("main.star")
            .to_owned();
        let manifest = Manifest::minimal(id, file.clone());
        let mut sources = BTreeMap::new();
        sources.insert(file, src);
        return Ok(Package::new(manifest, sources));
    }
    let toml_path = path.join("package.toml");
    let text = read_regular_file(&toml_path).map_err(|e| StarlarkHostError::PackageIo {
        path: toml_path.display().to_string(),
        source: e,
    })?;
    let manifest = parse_manifest(&text)?;
    let mut sources = BTreeMap::new();
    let mut total = 0u64;
    collect_star_files(path, path, "", 0, &mut sources, &mut total)?;
    if !sources.contains_key(&manifest.script) {
        return Err(StarlarkHostError::InvalidPackage(format!(
            "package {:?}: script {:?} named in package.toml was not found in {}",
            manifest.id,
            manifest.script,
            path.display()
        )));
    }
    Ok(Package::new(manifest, sources))
}

/// Parse `package.toml` text.
pub fn parse_manifest(text: &str) -> Result<Manifest, StarlarkHostError> {
    let m: Manifest = toml::from_str(text).map_err(|e| {
        StarlarkHostError::InvalidPackage(format!(
            "package.toml is invalid: {e}; known permissions are {}",
            Permission::ALL.map(|p| p.as_str()).join(", ")
        ))
    })?;
    if m.id.is_empty()
        || !m
            .id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(StarlarkHostError::InvalidPackage(format!(
            "package id {:?} must be non-empty and use only letters, digits, '-', '_' or '.'",
            m.id
        )));
    }
    if normalize_load_path(&m.script).is_none() {
        return Err(StarlarkHostError::InvalidPackage(format!(
            "script {:?} must be a relative path inside the package",
            m.script
        )));
    }
    Ok(m)
}

/// Reads the `.star` files under `dir` (opened as named; `shown` is how
/// errors name it).
fn collect_star_files(
    dir: &Path,
    shown: &Path,
    prefix: &str,
    depth: usize,
    out: &mut BTreeMap<String, String>,
    total: &mut u64,
) -> Result<(), StarlarkHostError> {
    if depth > MAX_DIR_DEPTH {
        return Ok(());
    }
    let io = |e: std::io::Error| StarlarkHostError::PackageIo {
        path: shown.display().to_string(),
        source: e,
    };
    // Listed through the fd of the dir itself, opened without following a
    // link: a dir swapped for a symlink after its parent was listed is
    // refused, not entered.
    let dir_fd = open_nofollow(dir, libc::O_DIRECTORY).map_err(io)?;
    let pinned = PathBuf::from(format!("/dev/fd/{}", dir_fd.as_raw_fd()));
    let mut entries: Vec<_> = std::fs::read_dir(&pinned)
        .map_err(io)?
        .collect::<Result<_, _>>()
        .map_err(io)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let ft = entry.file_type().map_err(io)?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if ft.is_dir() {
            collect_star_files(
                &pinned.join(&name),
                &shown.join(&name),
                &rel,
                depth + 1,
                out,
                total,
            )?;
        } else if ft.is_file() && name.ends_with(".star") {
            if out.len() >= MAX_PACKAGE_FILES {
                return Err(StarlarkHostError::InvalidPackage(format!(
                    "package has more than {MAX_PACKAGE_FILES} .star files"
                )));
            }
            let src = read_regular_file(&pinned.join(&name)).map_err(|e| {
                StarlarkHostError::PackageIo {
                    path: shown.join(&name).display().to_string(),
                    source: e,
                }
            })?;
            *total += src.len() as u64;
            if *total > MAX_PACKAGE_BYTES {
                return Err(StarlarkHostError::InvalidPackage(format!(
                    "package sources exceed {MAX_PACKAGE_BYTES} bytes"
                )));
            }
            out.insert(rel, src);
        }
        // Symlinks and other file types are skipped on purpose.
    }
    Ok(())
}

/// Opens `path` read-only without following a link in its last component
/// (`ELOOP` if it is one), with `extra` flags.
fn open_nofollow(path: &Path, extra: i32) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | extra)
        .open(path)
}

/// The text of the regular file at `path`, checked and read on one fd: a
/// symlink (or a FIFO, a device) swapped in after the dir was listed is
/// refused, never read.
fn read_regular_file(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let f = open_nofollow(path, 0)?;
    let meta = f.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut text = String::new();
    f.take(MAX_PACKAGE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_PACKAGE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_PACKAGE_BYTES} bytes"),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the loader reads is what it checked, on one fd: a symlink (to
    /// a file only its reader may read) and a FIFO in place of a source are
    /// refused, never followed or waited on; a package path that is a
    /// symlink is refused too.
    #[test]
    fn the_loader_reads_no_link_and_no_fifo() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "KEY = 'the reader's own secret'\n").unwrap();
        let link = dir.path().join("link.star");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let e = read_regular_file(&link).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        let fifo = dir.path().join("fifo.star");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = read_regular_file(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = load_package_from_path(&link).unwrap_err().to_string();
        assert!(e.contains("is a symlink"), "{e}");
        // A package dir whose subdir is a link: not entered.
        let pkg = dir.path().join("pkg");
        std::fs::create_dir(&pkg).unwrap();
        std::fs::write(
            pkg.join("package.toml"),
            "id = \"p\"\nscript = \"main.star\"\n",
        )
        .unwrap();
        std::fs::write(pkg.join("main.star"), "def main():\n    return 1\n").unwrap();
        std::os::unix::fs::symlink(dir.path(), pkg.join("lib")).unwrap();
        let p = load_package_from_path(&pkg).unwrap();
        assert_eq!(p.sources.keys().collect::<Vec<_>>(), ["main.star"]);
    }

    #[test]
    fn manifest_parses_and_rejects_unknown_permissions() {
        let m = parse_manifest(
            r#"id = "hello"
version = "1.2.0"
script = "main.star"
permissions = ["api.http", "secrets.read"]
network_access = ["api.example.com", "http://127.0.0.1:8080"]
[requires_provider]
kind = "openai"
model = "gpt-x"
"#,
        )
        .unwrap();
        assert_eq!(
            m.permissions,
            vec![Permission::ApiHttp, Permission::SecretsRead]
        );
        assert_eq!(m.requires_provider.unwrap().model.as_deref(), Some("gpt-x"));
        let err = parse_manifest("id = \"x\"\npermissions = [\"root.all\"]\n").unwrap_err();
        assert!(err.to_string().contains("known permissions"), "{err}");
        assert!(parse_manifest("id = \"../x\"\n").is_err());
        assert!(parse_manifest("id = \"x\"\nscript = \"../evil.star\"\n").is_err());
    }
}
