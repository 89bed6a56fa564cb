//! Tests of mask patterns and their resolution on real trees.
use super::*;

#[test]
fn patterns_match_as_documented() {
    let p = MaskPattern::new("/h/**/.env").unwrap();
    assert!(p.matches(Path::new("/h/.env")));
    assert!(p.matches(Path::new("/h/a/b/.env")));
    assert!(!p.matches(Path::new("/h/a/.envrc")));
    assert!(!p.matches(Path::new("/x/.env")));
    let q = MaskPattern::new("/h/*.pem").unwrap();
    assert!(q.matches(Path::new("/h/key.pem")));
    assert!(!q.matches(Path::new("/h/a/key.pem")));
    assert_eq!(q.literal_prefix(), Path::new("/h"));
    assert!(MaskPattern::new("h/x").is_err());
    assert!(MaskPattern::new("/h/../x").is_err());
    assert!(MaskPattern::new("/h/a**").is_err());
    assert!(MaskPattern::new("/").is_err());
}

#[test]
fn resolve_finds_what_exists_and_refuses_what_it_cannot_hide() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("p/sub")).unwrap();
    std::fs::write(root.join("p/.env"), "A=1").unwrap();
    std::fs::write(root.join("p/sub/.env"), "B=2").unwrap();
    std::fs::create_dir(root.join(".ssh")).unwrap();
    std::fs::write(root.join(".ssh/id_rsa"), "k").unwrap();
    let pats = [
        MaskPattern::new(root.join("**/.env")).unwrap(),
        MaskPattern::new(root.join(".ssh")).unwrap(),
        MaskPattern::new(root.join(".ssh/id_rsa")).unwrap(),
        MaskPattern::new(root.join(".aws")).unwrap(),
    ];
    let nowhere = Path::new("/nonexistent-scratch");
    let got = resolve(&pats, std::slice::from_ref(&root), nowhere).unwrap();
    assert_eq!(
        got,
        vec![
            root.join(".ssh"),
            root.join("p/.env"),
            root.join("p/sub/.env")
        ]
    );
    // Outside every grant.
    let e = resolve(&pats[..1], &[PathBuf::from("/nonexistent-grant")], nowhere).unwrap_err();
    assert!(e.contains("outside every granted tree"), "{e}");
    // A symlink masks what it names.
    std::os::unix::fs::symlink(root.join("p/.env"), root.join("p/sub/link.env")).unwrap();
    let got = resolve(
        &[MaskPattern::new(root.join("p/sub/link.env")).unwrap()],
        std::slice::from_ref(&root),
        nowhere,
    )
    .unwrap();
    assert_eq!(got, vec![root.join("p/.env")]);
    // A hard-linked file is refused, inside a masked dir too.
    std::fs::hard_link(root.join("p/.env"), root.join("copy")).unwrap();
    let e = resolve(&pats[..1], std::slice::from_ref(&root), nowhere).unwrap_err();
    assert!(e.contains("hard links"), "{e}");
    std::fs::hard_link(root.join(".ssh/id_rsa"), root.join("key-copy")).unwrap();
    let e = resolve(&pats[1..2], std::slice::from_ref(&root), nowhere).unwrap_err();
    assert!(e.contains(".ssh/id_rsa`, which has 2 hard links"), "{e}");
}

#[test]
fn resolve_sees_what_the_sandbox_sees_through_symlinks() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    let nowhere = Path::new("/nonexistent-scratch");
    // HOME is a symlink to where the files are.
    std::fs::create_dir_all(root.join("data/home/p")).unwrap();
    std::fs::write(root.join("data/home/p/.env"), "A=1").unwrap();
    std::os::unix::fs::symlink(root.join("data/home"), root.join("home")).unwrap();
    let pat = MaskPattern::new(root.join("home/**/.env")).unwrap();
    let got = resolve(std::slice::from_ref(&pat), &[root.join("home")], nowhere).unwrap();
    assert_eq!(got, vec![root.join("data/home/p/.env")]);
    assert!(pat.resolved().matches(&root.join("data/home/p/.env")));
    // A linked directory inside the tree leads to a granted one
    // elsewhere, and a link back up makes a cycle.
    std::fs::create_dir_all(root.join("other/deep")).unwrap();
    std::fs::write(root.join("other/deep/.env"), "B=2").unwrap();
    std::os::unix::fs::symlink(root.join("other"), root.join("data/home/p/lib")).unwrap();
    std::os::unix::fs::symlink(root.join("data/home"), root.join("other/up")).unwrap();
    let grants = [root.join("home"), root.join("other")];
    let got = resolve(std::slice::from_ref(&pat), &grants, nowhere).unwrap();
    assert_eq!(
        got,
        vec![root.join("data/home/p/.env"), root.join("other/deep/.env")]
    );
    // Led outside every grant, a link shows nothing: not masked.
    let got = resolve(std::slice::from_ref(&pat), &grants[..1], nowhere).unwrap();
    assert_eq!(got, vec![root.join("data/home/p/.env")]);
}

#[test]
fn names_that_are_not_utf8_match_wildcards() {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"k\xffey");
    let pat = MaskPattern::new("/h/*").unwrap();
    assert!(pat.matches(&Path::new("/h").join(odd)));
    let pat = MaskPattern::new("/h/*/x").unwrap();
    assert!(!pat.matches(&Path::new("/h").join(odd)));
    assert!(pat.matches(&Path::new("/h").join(odd).join("x")));
}

#[test]
fn masks_around_scratch_or_under_proc_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("s/x")).unwrap();
    for (mask, scratch) in [("s/x", "s"), ("s", "s"), ("s", "s/x")] {
        let e = resolve(
            &[MaskPattern::new(root.join(mask)).unwrap()],
            std::slice::from_ref(&root),
            &root.join(scratch),
        )
        .unwrap_err();
        assert!(e.contains("scratch dir"), "{mask} {scratch}: {e}");
    }
    let e = resolve(
        &[MaskPattern::new("/proc/self/environ").unwrap()],
        &[PathBuf::from("/proc")],
        &root.join("s"),
    )
    .unwrap_err();
    assert!(e.contains("under /proc"), "{e}");
}

#[test]
fn globs_are_linear_and_count_characters() {
    // Exponential backtracking would take hours on this name.
    let name = format!("{}x", ".".repeat(240));
    assert!(!glob(b"*.*.*.*.*.pem", name.as_bytes()));
    assert!(glob(b"*.*.*.*.*.pem", b"a.b.c.d.e.pem"));
    assert!(glob("secret?".as_bytes(), "secretä".as_bytes()));
    assert!(!glob("secret??".as_bytes(), "secretä".as_bytes()));
    assert!(glob(b"*?", "ä".as_bytes()));
    assert!(glob(b"k?y", b"k\xffy"));
    assert!(glob(b"a*b*c", b"aXbYbZc"));
    assert!(!glob(b"a*b*c", b"aXbYbZ"));
    assert!(glob(b"*", b""));
    assert!(!glob(b"?", b""));
}

#[test]
fn a_resolved_prefix_stays_literal_and_a_trailing_double_star_masks_its_dir() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("we*ird/s")).unwrap();
    std::fs::create_dir_all(root.join("weXird")).unwrap();
    std::fs::write(root.join("we*ird/s/k"), "k").unwrap();
    let pat = MaskPattern::new(root.join("we*ird/**")).unwrap();
    // Written, `we*ird` is a glob; resolved, the prefix is the real dir.
    let pat = MaskPattern {
        parts: {
            let mut p = pat.parts.clone();
            let at = p.len() - 2;
            p[at] = Part::Literal("we*ird".into());
            p
        },
        ..pat
    };
    let real = pat.resolved();
    assert!(real.matches(&root.join("we*ird/s/k")));
    assert!(!real.matches(&root.join("weXird/s/k")));
    let got = resolve(
        std::slice::from_ref(&pat),
        std::slice::from_ref(&root),
        Path::new("/nonexistent-scratch"),
    )
    .unwrap();
    assert_eq!(got, vec![root.join("we*ird")]);
}

#[test]
fn a_symlink_inside_a_masked_dir_masks_what_it_names() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".ssh")).unwrap();
    std::fs::create_dir_all(root.join("dotfiles/ssh")).unwrap();
    std::fs::write(root.join("dotfiles/ssh/id_rsa"), "k").unwrap();
    std::os::unix::fs::symlink(root.join("dotfiles/ssh/id_rsa"), root.join(".ssh/id_rsa")).unwrap();
    std::os::unix::fs::symlink(root.join(".ssh"), root.join(".ssh/loop")).unwrap();
    let got = resolve(
        &[MaskPattern::new(root.join(".ssh")).unwrap()],
        std::slice::from_ref(&root),
        Path::new("/nonexistent-scratch"),
    )
    .unwrap();
    assert_eq!(
        got,
        vec![root.join(".ssh"), root.join("dotfiles/ssh/id_rsa")]
    );
}
