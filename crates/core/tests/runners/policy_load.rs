//! `PolicyFile::load` and `apply` against real files: a policy a sandbox
//! could rewrite is refused, `extends` follows the file's real directory,
//! and a policy file with a second name is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use cordon_core::policy::{Expansions, PolicyFile};
use cordon_core::{ChildSpec, RunnerConfig, Scratch};

fn file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

fn vars(cwd: &Path) -> Expansions {
    Expansions {
        home: Some(cwd.to_path_buf()),
        cwd: cwd.to_path_buf(),
    }
}

fn apply(p: &PolicyFile, config: &mut RunnerConfig, spec: &mut ChildSpec) -> Result<(), String> {
    p.apply(config, spec).map_err(|e| e.to_string())
}

#[test]
fn a_policy_the_sandbox_could_rewrite_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let spec = || ChildSpec::new("/bin/true");
    // The file in its own `rw` tree, by `${CWD}`.
    let own = file(
        &d,
        "proj/cordon.toml",
        "[fs]\nro = [\"/usr\"]\nrw = [\"${CWD}\"]\n",
    );
    let p = PolicyFile::load(&own, &vars(&d.join("proj"))).unwrap();
    let err = p.check_out_of_reach(&[]).unwrap_err().to_string();
    assert!(err.contains(":3: `fs.rw`:"), "{err}");
    assert!(
        err.contains("could rewrite the policy of its next run"),
        "{err}"
    );
    let err = apply(&p, &mut RunnerConfig::default(), &mut spec()).unwrap_err();
    assert!(err.contains("lies inside"), "{err}");

    // A base it extends inside a tree the extending file grants.
    file(&d, "proj/base.toml", "[fs]\nro = [\"/usr\"]\n");
    let top = file(
        &d,
        "top/tool.toml",
        "extends = [\"../proj/base.toml\"]\n[fs]\nrw = [\"${CWD}\"]\n",
    );
    let p = PolicyFile::load(&top, &vars(&d.join("proj"))).unwrap();
    let err = p.check_out_of_reach(&[]).unwrap_err().to_string();
    assert!(err.contains("base.toml` lies inside"), "{err}");

    // A grant made outside the policy (a flag, an embedder's config), and
    // an existing scratch dir.
    let clean = file(&d, "top/clean.toml", "[fs]\nro = [\"/usr\"]\n");
    let p = PolicyFile::load(&clean, &vars(&d)).unwrap();
    let mut config = RunnerConfig::default();
    config.read_write.push(d.join("top"));
    let err = apply(&p, &mut config, &mut spec()).unwrap_err();
    assert!(err.contains("(granted outside this policy)"), "{err}");
    let mut s = spec();
    s.scratch = Scratch::Existing(d.clone());
    let err = apply(&p, &mut RunnerConfig::default(), &mut s).unwrap_err();
    assert!(err.contains("lies inside"), "{err}");

    // Through a symlink to the tree: compared by inode, not by name.
    std::os::unix::fs::symlink(d.join("top"), d.join("alias")).unwrap();
    let mut config = RunnerConfig::default();
    config.read_write.push(d.join("alias"));
    assert!(apply(&p, &mut config, &mut spec()).is_err());

    // A sibling tree is fine.
    let mut config = RunnerConfig::default();
    config.read_write.push(d.join("proj"));
    apply(&p, &mut config, &mut spec()).unwrap();
}

#[test]
fn extends_is_relative_to_the_real_file_not_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    file(&d, "real/base.toml", "[fs]\nro = [\"/usr\"]\n");
    let tool = file(&d, "real/tool.toml", "extends = [\"base.toml\"]\n");
    // A decoy beside the link, which must not be read.
    file(&d, "links/base.toml", "[fs]\nrw = [\"/\"]\n");
    std::os::unix::fs::symlink(&tool, d.join("links/tool.toml")).unwrap();
    let p = PolicyFile::load(&d.join("links/tool.toml"), &vars(&d)).unwrap();
    assert!(p.read_write.is_empty(), "{:?}", p.read_write);
    assert_eq!(p.read_only[0].value, Path::new("/usr"));
}

#[test]
fn a_policy_file_with_a_second_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let p = file(&d, "a.toml", "[fs]\nro = [\"/usr\"]\n");
    std::fs::hard_link(&p, d.join("b.toml")).unwrap();
    let err = PolicyFile::load(&p, &vars(&d)).unwrap_err().to_string();
    assert!(err.contains("has 2 names (hard links)"), "{err}");
}

#[test]
fn a_runner_without_a_backend_refuses_masks_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let config = RunnerConfig {
        read_only: vec![dir.path().to_path_buf()],
        masks: vec![cordon_core::policy::MaskPattern::new(dir.path().join("x")).unwrap()],
        ..RunnerConfig::default()
    };
    let spec = ChildSpec::new("/usr/bin/touch").args([marker.as_os_str()]);
    let err = cordon_core::Spawner::hygiene_only(config)
        .spawn(&spec)
        .unwrap_err()
        .to_string();
    assert!(err.contains("masks but no sandbox backend"), "{err}");
    assert!(!marker.exists());
}

#[test]
fn a_symlink_to_the_policy_inside_a_writable_tree_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let real = file(&d, "policies/proj.toml", "[fs]\nro = [\"/usr\"]\n");
    std::fs::create_dir_all(d.join("proj")).unwrap();
    std::fs::create_dir_all(d.join("safe")).unwrap();
    // The program could point the link at another of the user's policies.
    std::os::unix::fs::symlink(&real, d.join("proj/.cordon")).unwrap();
    // And through a second link that lies elsewhere.
    std::os::unix::fs::symlink(d.join("proj/.cordon"), d.join("safe/link")).unwrap();
    for given in [d.join("proj/.cordon"), d.join("safe/link")] {
        let p = PolicyFile::load(&given, &vars(&d)).unwrap();
        let mut config = RunnerConfig::default();
        config.read_write.push(d.join("proj"));
        let err = apply(&p, &mut config, &mut ChildSpec::new("/bin/true")).unwrap_err();
        let inside = format!("lies inside `{}`", d.join("proj").display());
        assert!(err.contains(&inside), "{given:?}: {err}");
        // The file itself, named directly, is fine.
        let p = PolicyFile::load(&real, &vars(&d)).unwrap();
        apply(&p, &mut config, &mut ChildSpec::new("/bin/true")).unwrap();
    }
}

/// A bind mount of a directory of the test's own, unmounted when dropped.
struct Bind(PathBuf);

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn bind(from: &Path, to: &Path) -> Bind {
    std::fs::create_dir_all(to).unwrap();
    let st = std::process::Command::new("mount")
        .arg("--bind")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success(), "mount --bind (the test needs root)");
    Bind(to.to_path_buf())
}

#[test]
fn a_policy_dir_mounted_under_a_writable_tree_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let p = file(&d, "pol/tool.toml", "[fs]\nro = [\"/usr\"]\n");
    let _bind = bind(&d.join("pol"), &d.join("work/pol"));
    let p = PolicyFile::load(&p, &vars(&d)).unwrap();
    let mut config = RunnerConfig::default();
    config.read_write.push(d.join("work"));
    let err = apply(&p, &mut config, &mut ChildSpec::new("/bin/true")).unwrap_err();
    assert!(err.contains("lies inside"), "{err}");
}

#[test]
fn a_masked_path_is_masked_at_every_mount_that_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    file(&d, "home/.ssh/inner/id_rsa", "k");
    let _a = bind(&d.join("home"), &d.join("mnt"));
    let _b = bind(&d.join("home/.ssh/inner"), &d.join("other"));
    let grants = [d.join("home"), d.join("mnt"), d.join("other")];
    let mask = cordon_core::policy::MaskPattern::new(d.join("home/.ssh")).unwrap();
    let got =
        cordon_core::policy::resolve_masks(&[mask], &grants, Path::new("/nonexistent")).unwrap();
    assert_eq!(
        got,
        vec![d.join("home/.ssh"), d.join("mnt/.ssh"), d.join("other")],
    );
    // Outside every grant, an alias is not the sandbox's to read.
    let mask = cordon_core::policy::MaskPattern::new(d.join("home/.ssh")).unwrap();
    let got = cordon_core::policy::resolve_masks(&[mask], &grants[..1], Path::new("/nonexistent"))
        .unwrap();
    assert_eq!(got, vec![d.join("home/.ssh")]);
}

#[test]
fn a_bind_mount_of_a_dir_inside_a_writable_tree_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    file(&d, "data/x/p.toml", "[fs]\nro = [\"/usr\"]\n");
    let _bind = bind(&d.join("data/x"), &d.join("a"));
    let p = PolicyFile::load(&d.join("a/p.toml"), &vars(&d)).unwrap();
    let mut config = RunnerConfig::default();
    config.read_write.push(d.join("data"));
    let err = apply(&p, &mut config, &mut ChildSpec::new("/bin/true")).unwrap_err();
    assert!(err.contains("lies inside"), "{err}");
}

#[test]
fn masks_a_program_could_move_out_of_their_pattern_are_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let p = file(
        &d,
        "p.toml",
        "[fs]\nrw = [\"${CWD}\"]\nmask = [\"${CWD}/.env\", \"${CWD}/**/.env\", \"${CWD}/config/*.key\"]\n",
    );
    let p = PolicyFile::load(&p, &vars(&d.join("proj"))).unwrap();
    let w = p.movable_masks(&[]);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("p.toml:3: mask `"), "{w:?}");
    assert!(w[0].contains("config/*.key` lies inside"), "{w:?}");
    assert!(w[0].ends_with("proj/**/*.key`"), "{w:?}");
}
