//! The profile generator, on any OS: golden files, escaping, and
//! canonicalisation with an injected resolver.
//!
//! Regenerate the golden files with
//! `UPDATE_GOLDEN=1 cargo test -p cordon-backend-macos --test profile`.

// The backend's own tests (availability, and on macOS the real
// `sandbox-exec`): one test binary for the crate.
mod backend;

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use cordon_backend_macos::{build_profile, PathRole, ProfileError, SeatbeltProfile};
use cordon_core::{Limits, SandboxPolicy};

/// Resolves like a typical Mac: `/tmp`, `/var` and `/etc` live under
/// `/private`, `/Users/a/link` is a symlink to `/Users/a/real`. Paths under
/// `/missing` do not exist; paths under `/locked` cannot be searched.
fn macos_like(p: &Path) -> io::Result<PathBuf> {
    if p.starts_with("/missing") {
        return Err(io::Error::new(io::ErrorKind::NotFound, "no such file"));
    }
    if p.starts_with("/locked") {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "permission denied",
        ));
    }
    for (from, to) in [
        ("/tmp", "/private/tmp"),
        ("/var", "/private/var"),
        ("/etc", "/private/etc"),
        ("/Users/a/link", "/Users/a/real"),
    ] {
        if let Ok(rest) = p.strip_prefix(from) {
            return Ok(Path::new(to).join(rest));
        }
    }
    Ok(p.to_path_buf())
}

fn policy(scratch: &str) -> SandboxPolicy {
    SandboxPolicy::new(scratch, Limits::probe())
}

fn param<'a>(profile: &'a SeatbeltProfile, key: &str) -> Option<&'a str> {
    profile
        .params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn values_with_prefix<'a>(profile: &'a SeatbeltProfile, prefix: &str) -> Vec<&'a str> {
    profile
        .params
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v.as_str())
        .collect()
}

fn check_golden(name: &str, profile: &SeatbeltProfile) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let sb = dir.join(format!("{name}.sb"));
    let params = dir.join(format!("{name}.params"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&sb, &profile.text).unwrap();
        std::fs::write(&params, profile.params_listing()).unwrap();
    }
    let hint = "run `UPDATE_GOLDEN=1 cargo test -p cordon-backend-macos --test profile` \
                to regenerate, then review the diff";
    let want_sb = std::fs::read_to_string(&sb)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {hint}", sb.display()));
    let want_params = std::fs::read_to_string(&params)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; {hint}", params.display()));
    assert_eq!(profile.text, want_sb, "{name}.sb differs; {hint}");
    assert_eq!(
        profile.params_listing(),
        want_params,
        "{name}.params differs; {hint}"
    );
}

#[test]
fn golden_minimal() {
    let p = build_profile(&policy("/tmp/cordon-scratch-1"), &macos_like).unwrap();
    check_golden("minimal", &p);
}

#[test]
fn golden_package_and_grants() {
    let mut pol = policy("/var/folders/ab/T/cordon-scratch-2");
    pol.package_dir = Some("/opt/pkg/bin".into());
    pol.read_only = vec!["/Users/a/link/data".into(), "/missing/ro".into()];
    pol.read_write = vec!["/Users/a/out".into()];
    let p = build_profile(&pol, &macos_like).unwrap();
    check_golden("package_and_grants", &p);
    assert_eq!(p.skipped, vec![PathBuf::from("/missing/ro")]);
}

#[test]
fn golden_protected_inside_writable() {
    let mut pol = policy("/tmp/s");
    pol.package_dir = Some("/tmp/s/pkg".into());
    pol.read_write = vec!["/Users/a/work".into()];
    pol.read_only = vec!["/Users/a/work/config/settings".into()];
    let p = build_profile(&pol, &macos_like).unwrap();
    check_golden("protected", &p);
}

#[test]
fn profile_starts_with_version_and_denies_by_default() {
    let p = build_profile(&policy("/tmp/x"), &macos_like).unwrap();
    assert!(p.text.starts_with("(version 1)\n"));
    assert!(p.text.contains("\n(deny default)\n"));
    assert!(p.text.contains("(deny network*)"));
    assert!(p.text.contains("(allow signal (target same-sandbox))"));
    assert!(p
        .text
        .contains("(allow process-info* (target same-sandbox))"));
    // Never the whole of /System: /System/Volumes/Data holds user homes.
    assert!(!p.text.contains("(subpath \"/System\")"));
    // Never broad grants.
    assert!(!p.text.contains("(allow default)"));
    assert!(!p.text.contains("(allow file-read*)"));
    assert!(!p.text.contains("(allow mach-lookup)"));
    assert!(!p.text.contains("(allow network"));
}

#[test]
fn odd_paths_never_reach_the_profile_text() {
    let odd_scratch = "/tmp/we\"ird (dir)\n;x\\y";
    let odd_ro = "/Users/a/q'\")(allow default)(\"";
    let mut odd = policy(odd_scratch);
    odd.read_only = vec![odd_ro.into()];
    let mut plain = policy("/tmp/plain");
    plain.read_only = vec!["/Users/a/plain".into()];

    let odd_p = build_profile(&odd, &macos_like).unwrap();
    let plain_p = build_profile(&plain, &macos_like).unwrap();
    // Same shape, same text: the paths live only in the parameters.
    assert_eq!(odd_p.text, plain_p.text);
    assert!(!odd_p.text.contains("we\"ird"));
    assert!(!odd_p.text.contains("(allow default)"));
    assert_eq!(
        param(&odd_p, "SCRATCH"),
        Some("/private/tmp/we\"ird (dir)\n;x\\y")
    );
    assert_eq!(param(&odd_p, "RO_0"), Some(odd_ro));

    // On the command line each parameter is one argument, byte for byte.
    let args = odd_p.sandbox_exec_args();
    assert_eq!(args[0], "-p");
    assert_eq!(args[1], OsString::from(&odd_p.text));
    assert_eq!(args.last().unwrap(), "--");
    assert!(args.contains(&OsString::from(
        "-DSCRATCH=/private/tmp/we\"ird (dir)\n;x\\y"
    )));
    assert!(args.contains(&OsString::from(format!("-DRO_0={odd_ro}"))));
    // -p, text, one -D per parameter, --.
    assert_eq!(args.len(), odd_p.params.len() + 3);
}

#[test]
fn non_utf8_paths_are_rejected_with_a_clear_error() {
    let mut pol = policy("/tmp/ok");
    pol.read_only = vec![PathBuf::from(OsString::from_vec(
        b"/Users/a/\xff\xfe".to_vec(),
    ))];
    let err = build_profile(&pol, &macos_like).unwrap_err();
    assert!(
        matches!(
            err,
            ProfileError::NotUtf8 {
                role: PathRole::ReadOnly,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("read-only grant"), "{msg}");
    assert!(msg.contains("not valid UTF-8"), "{msg}");
    assert!(msg.contains("rename it"), "{msg}");

    // A resolver that lands on a non-UTF-8 path is caught too.
    let to_bytes = |p: &Path| -> io::Result<PathBuf> {
        if p == Path::new("/Users/a/link") {
            Ok(PathBuf::from(OsString::from_vec(b"/Users/a/\xff".to_vec())))
        } else {
            Ok(p.to_path_buf())
        }
    };
    let mut pol = policy("/Users/a/link");
    pol.read_write = vec![];
    let err = build_profile(&pol, &to_bytes).unwrap_err();
    assert!(
        matches!(
            err,
            ProfileError::NotUtf8 {
                role: PathRole::Scratch,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn nul_and_relative_paths_are_rejected() {
    let mut pol = policy("/tmp/ok");
    pol.read_write = vec![PathBuf::from(OsString::from_vec(b"/a\0b".to_vec()))];
    let err = build_profile(&pol, &macos_like).unwrap_err();
    assert!(err.to_string().contains("NUL byte"), "{err}");

    let err = build_profile(&policy("scratch"), &macos_like).unwrap_err();
    assert!(
        matches!(
            err,
            ProfileError::NotAbsolute {
                role: PathRole::Scratch,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("absolute"), "{err}");
}

#[test]
fn canonicalisation_resolves_symlinked_roots() {
    let mut pol = policy("/tmp/s1");
    pol.package_dir = Some("/var/pkg".into());
    pol.read_only = vec!["/Users/a/link/docs".into(), "/etc/ssl".into()];
    let p = build_profile(&pol, &macos_like).unwrap();
    assert_eq!(param(&p, "SCRATCH"), Some("/private/tmp/s1"));
    assert_eq!(param(&p, "PACKAGE"), Some("/private/var/pkg"));
    assert_eq!(param(&p, "RO_0"), Some("/Users/a/real/docs"));
    assert_eq!(param(&p, "RO_1"), Some("/private/etc/ssl"));
    // No parameter keeps an unresolved form.
    for (_, v) in &p.params {
        assert!(!v.starts_with("/tmp") && !v.starts_with("/var/") && !v.contains("link"));
    }
}

#[test]
fn ancestors_get_metadata_only_and_skip_constant_ones() {
    let p = build_profile(&policy("/tmp/a/b"), &macos_like).unwrap();
    let ancestors = values_with_prefix(&p, "ANCESTOR_");
    assert_eq!(ancestors, vec!["/private/tmp", "/private/tmp/a"]);
    // `/` and `/private` are ancestors of system paths: written once, as
    // literals.
    assert!(p.text.contains("    (literal \"/private\")\n"));
    assert!(p.text.contains("    (literal \"/\")\n"));
    assert!(p
        .text
        .contains("(allow file-read-metadata\n    (literal (param \"ANCESTOR_0\"))"));
}

#[test]
fn duplicate_grants_collapse() {
    let mut pol = policy("/tmp/s");
    pol.read_only = vec!["/tmp/r".into(), "/private/tmp/r".into()];
    let p = build_profile(&pol, &macos_like).unwrap();
    assert_eq!(values_with_prefix(&p, "RO_"), vec!["/private/tmp/r"]);
}

#[test]
fn read_only_inside_writable_is_protected_with_its_ancestors() {
    let mut pol = policy("/tmp/s");
    pol.read_write = vec!["/Users/a/work".into()];
    pol.read_only = vec![
        "/Users/a/work/config/settings".into(),
        "/Users/a/other".into(),
    ];
    let p = build_profile(&pol, &macos_like).unwrap();
    assert_eq!(
        values_with_prefix(&p, "PROTECTED_")[..1],
        ["/Users/a/work/config/settings"]
    );
    assert_eq!(
        values_with_prefix(&p, "PROTECTED_ANCESTOR_"),
        vec!["/Users/a/work", "/Users/a/work/config"]
    );
    assert!(p
        .text
        .contains("(deny file-write* (subpath (param \"PROTECTED_0\")))"));
    assert!(p
        .text
        .contains("(deny file-write-unlink (literal (param \"PROTECTED_ANCESTOR_1\")))"));
    // The denials come after every allow (later rules win).
    let last_allow = p.text.rfind("(allow").unwrap();
    let first_deny = p.text.find("(deny file-write*").unwrap();
    assert!(first_deny > last_allow);
}

#[test]
fn package_equal_to_scratch_is_not_protected() {
    // A program written into scratch and run from there: scratch stays
    // writable.
    let mut pol = policy("/tmp/s");
    pol.package_dir = Some("/tmp/s".into());
    let p = build_profile(&pol, &macos_like).unwrap();
    assert!(values_with_prefix(&p, "PROTECTED").is_empty());
    assert!(!p.text.contains("(deny file-write*"));
}

#[test]
fn missing_required_paths_are_errors_missing_extras_are_skipped() {
    let err = build_profile(&policy("/missing/scratch"), &macos_like).unwrap_err();
    assert!(
        matches!(
            err,
            ProfileError::Canonicalize {
                role: PathRole::Scratch,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("make sure it exists"), "{err}");

    let mut pol = policy("/tmp/s");
    pol.package_dir = Some("/missing/pkg".into());
    assert!(matches!(
        build_profile(&pol, &macos_like),
        Err(ProfileError::Canonicalize {
            role: PathRole::Package,
            ..
        })
    ));

    let mut pol = policy("/tmp/s");
    pol.read_write = vec!["/missing/rw".into()];
    let p = build_profile(&pol, &macos_like).unwrap();
    assert_eq!(p.skipped, vec![PathBuf::from("/missing/rw")]);
    assert!(values_with_prefix(&p, "RW_").is_empty());

    // Any other resolver error is not "absent": fail.
    let mut pol = policy("/tmp/s");
    pol.read_only = vec!["/locked/x".into()];
    let err = build_profile(&pol, &macos_like).unwrap_err();
    assert!(
        matches!(
            err,
            ProfileError::Canonicalize {
                role: PathRole::ReadOnly,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn real_file_system_canonicaliser_resolves_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let p = build_profile(
        &SandboxPolicy::new(&link, Limits::default()),
        &cordon_backend_macos::FsCanonicalizer,
    )
    .unwrap();
    let want = real.canonicalize().unwrap();
    assert_eq!(param(&p, "SCRATCH"), want.to_str());
}
