//! Policy files (`cordon run --policy`, `cordon policy show|check`): the
//! examples in `examples/policies/` run for real as root and as uid 65534,
//! their masks hold against a hostile program that has `$HOME` granted,
//! and bad files are refused with the line before anything runs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::http::{git_repo, HostServer};
use crate::common::{cordon, run, text, unprivileged};

const SECRET: &str = "BEGIN-PRIVATE-KEY-not-for-the-sandbox";
const ENV_SECRET: &str = "TOKEN=env-file-secret";

/// The examples, copied into `dir/policies` (root-owned, 0644, in 0755
/// dirs: readable by uid 65534, writable by nobody else).
fn examples(dir: &Path) -> PathBuf {
    let to = dir.join("policies");
    std::fs::create_dir_all(&to).unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        std::fs::copy(e.path(), &dst).unwrap();
        std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// Root with a test-made HOME, then uid 65534 (its own HOME, made by
/// `unprivileged`). `check` gets who, the HOME, and a command maker.
fn as_each_uid(dir: &Path, mut check: impl FnMut(&str, &Path, &mut dyn FnMut() -> Command)) {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cache = crate::common::shared_cache();
    let home = dir.join("root-home");
    std::fs::create_dir_all(&home).unwrap();
    check("root", &home, &mut || {
        let mut c = cordon(cache.path());
        c.env("HOME", &home);
        c
    });
    let sub = dir.join("65534");
    let _ = unprivileged(&sub);
    check("65534", &sub.join("home"), &mut || unprivileged(&sub));
}

/// Files owned by the uid that runs cordon, so that only the sandbox (its
/// mask) stands between the program and them.
fn plant(path: &Path, content: &str, who: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    if who == "65534" {
        for p in [path.parent().unwrap(), path] {
            std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
        }
    }
}

fn project(home: &Path, who: &str, out: &str) -> PathBuf {
    let p = home.join("project");
    plant(&p.join("README"), "the project\n", who);
    plant(&p.join(".env"), ENV_SECRET, who);
    plant(&p.join("sub/.env"), ENV_SECRET, who);
    plant(&p.join(".npmrc"), ENV_SECRET, who);
    plant(&p.join("src/a.js"), "export const a = 'from a.js';\n", who);
    plant(&p.join(out).join(".keep"), "", who);
    p
}

/// The hostile program: with `$HOME` granted it tries every way at the
/// masked secrets it knows, after checking it is confined. It prints one
/// line per attempt; the host judges.
const ATTACK: &str = r#"
import json, os, sys
try:
    open("/etc/hostname").read()  # world-readable, granted by nothing
    print("NOT CONFINED"); sys.exit(3)
except PermissionError:
    pass
home, proj, host_pid = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
def attempt(name, f):
    try: out[name] = repr(f())
    except Exception as e: out[name] = "refused: " + type(e).__name__
attempt("readme", lambda: open(proj + "/README").read())
attempt("read key", lambda: open(home + "/.ssh/id_rsa").read())
attempt("list .ssh", lambda: os.listdir(home + "/.ssh"))
attempt("read .env", lambda: open(proj + "/.env").read())
attempt("read sub .env", lambda: open(proj + "/sub/.env").read())
attempt("proc root", lambda: open("/proc/self/root" + home + "/.ssh/id_rsa").read())
attempt("host proc root", lambda: open("/proc/" + host_pid + "/root" + home + "/.ssh/id_rsa").read())
attempt("rename .ssh", lambda: os.rename(home + "/.ssh", proj + "/out/ssh"))
attempt("link key", lambda: os.link(home + "/.ssh/id_rsa", proj + "/out/key"))
attempt("rename .env", lambda: os.rename(proj + "/.env", proj + "/out/env"))
attempt("link .env", lambda: os.link(proj + "/.env", proj + "/out/env"))
attempt("write .env", lambda: open(proj + "/.env", "w").write("x"))
attempt("unmount", lambda: __import__("ctypes").CDLL(None).umount2((proj + "/.env").encode(), 2))
attempt("report", lambda: open(proj + "/out/report.txt", "w").write("report"))
print(json.dumps(out))
"#;

#[test]
fn the_python_tool_example_runs_and_its_masks_hold() {
    let dir = tempfile::tempdir().unwrap();
    let policies = examples(dir.path());
    let attack = dir.path().join("attack.py");
    std::fs::write(&attack, ATTACK).unwrap();
    std::fs::set_permissions(&attack, std::fs::Permissions::from_mode(0o644)).unwrap();
    as_each_uid(dir.path(), |who, home, cmd| {
        plant(&home.join(".ssh/id_rsa"), SECRET, who);
        let proj = project(home, who, "out");
        let out = run(cmd()
            .current_dir(&proj)
            .arg("run")
            .arg("--policy")
            .arg(policies.join("python-tool.toml"))
            .args([
                "--ro",
                dir.path().to_str().unwrap(),
                "--",
                "/usr/bin/python3",
            ])
            .arg(&attack)
            .arg(home)
            .arg(&proj)
            .arg(std::process::id().to_string()));
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{who}: {stdout}\n{}",
            text(&out.stderr)
        );
        assert!(
            !stdout.contains(SECRET) && !stdout.contains(ENV_SECRET),
            "{who}: {stdout}"
        );
        let got: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let field = |k: &str| got[k].as_str().unwrap().to_string();
        assert_eq!(
            field("readme"),
            "'the project\\n'",
            "{who}: HOME is granted"
        );
        assert_eq!(field("list .ssh"), "[]", "{who}");
        assert_eq!(field("read .env"), "''", "{who}: the mask is an empty file");
        assert_eq!(field("read sub .env"), "''", "{who}: `**` reaches depth");
        for k in [
            "read key",
            "proc root",
            "host proc root",
            "rename .ssh",
            "link key",
            "rename .env",
            "link .env",
            "write .env",
        ] {
            assert!(field(k).starts_with("refused"), "{who}: {k}: {stdout}");
        }
        assert_eq!(field("unmount"), "-1", "{who}: {stdout}");
        assert_eq!(field("report"), "6", "{who}: out/ is writable");
        // The host: the secrets are where they were, with one name each,
        // and out/ holds the report only.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::read_to_string(home.join(".ssh/id_rsa")).unwrap(),
            SECRET
        );
        assert_eq!(
            std::fs::metadata(home.join(".ssh/id_rsa")).unwrap().nlink(),
            1
        );
        assert_eq!(
            std::fs::read_to_string(proj.join(".env")).unwrap(),
            ENV_SECRET
        );
        assert_eq!(std::fs::metadata(proj.join(".env")).unwrap().nlink(), 1);
        let mut names: Vec<_> = std::fs::read_dir(proj.join("out"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, [".keep", "report.txt"], "{who}");
    });
}

#[test]
fn the_node_build_example_builds_without_its_masked_files() {
    let dir = tempfile::tempdir().unwrap();
    let policies = examples(dir.path());
    as_each_uid(dir.path(), |who, home, cmd| {
        let proj = project(home, who, "dist");
        plant(&home.join(".npmrc"), ENV_SECRET, who);
        plant(
            &proj.join("build.js"),
            "const fs = require('fs');\n\
             let out = fs.readFileSync('src/a.js', 'utf8');\n\
             for (const f of ['.npmrc', '.env', process.argv[2]]) {\n\
               try { out += fs.readFileSync(f, 'utf8'); } catch (e) { out += '// ' + e.code + '\\n'; }\n\
             }\n\
             out += '// NODE_ENV=' + process.env.NODE_ENV + '\\n';\n\
             fs.writeFileSync('dist/bundle.js', out);\n",
            who,
        );
        let out = run(cmd()
            .current_dir(&proj)
            .arg("run")
            .arg("--policy")
            .arg(policies.join("node-build.toml"))
            .args(["--", "/bin/sh", "-c"])
            .arg(format!(
                "cd {} && /usr/bin/node build.js {}/.npmrc",
                proj.display(),
                home.display()
            )));
        assert!(out.status.success(), "{who}: {}", text(&out.stderr));
        let bundle = std::fs::read_to_string(proj.join("dist/bundle.js")).unwrap();
        assert!(bundle.contains("from a.js"), "{who}: {bundle}");
        assert!(bundle.contains("NODE_ENV=production"), "{who}: {bundle}");
        assert!(!bundle.contains(ENV_SECRET), "{who}: {bundle}");
        assert_eq!(
            bundle.matches("// ").count(),
            1,
            "{who}: read empty masks: {bundle}"
        );
    });
}

#[test]
fn the_git_clone_example_clones_from_the_one_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let policies = examples(dir.path());
    let served = dir.path().join("served");
    git_repo(&served);
    let server = HostServer::start(served.clone());
    let other = HostServer::start(served);
    as_each_uid(dir.path(), |who, _home, cmd| {
        let allow = format!("localhost:{}", server.port);
        let script = format!(
            "/usr/bin/git clone -q http://localhost:{}/repo.git other; \
             /usr/bin/git clone -q http://localhost:{}/repo.git out && cat out/file.txt",
            other.port, server.port
        );
        let out = run(cmd()
            .arg("run")
            .arg("--policy")
            .arg(policies.join("git-clone.toml"))
            .args(["--allow-host", &allow, "--", "/bin/sh", "-c", &script]));
        let stderr = text(&out.stderr);
        assert_eq!(
            text(&out.stdout),
            "cloned through the proxy\n",
            "{who}: {stderr}"
        );
        let kept = stderr
            .lines()
            .find_map(|l| l.strip_prefix("cordon: scratch dir kept at "))
            .unwrap_or_else(|| panic!("{who}: the example keeps its scratch: {stderr}"));
        assert!(
            Path::new(kept).join("out/file.txt").exists(),
            "{who}: {kept}"
        );
        let _ = std::fs::remove_dir_all(kept);
    });
    assert!(other.requests().is_empty(), "{:?}", other.requests());
    assert!(!server.requests().is_empty());
}

/// A policy file in `dir` with `body`, mode 0644.
fn file(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    p
}

#[test]
fn bad_files_give_one_error_with_the_line_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cache = crate::common::shared_cache();
    let cases = [
        (
            "unknown.toml",
            "[fs]\nro = [\"/usr\"]\nrox = [\"/etc\"]\n",
            ":3: `fs.rox`: unknown field",
        ),
        (
            "type.toml",
            "timeout = \"soon\"\n",
            ":1: `timeout`: invalid type",
        ),
        (
            "value.toml",
            "[limits]\n\nmemory = \"12X\"\n",
            ":3: `limits.memory`:",
        ),
        (
            "outside.toml",
            "[fs]\nro = [\"/usr\"]\nmask = [\"/etc/shadow\"]\n",
            ":3: `fs.mask`: mask `/etc/shadow` lies outside every grant",
        ),
        (
            "shell.toml",
            "[fs]\nro = [\"$(id)\"]\n",
            ":2: `fs.ro`: `$(id)`: only ${HOME}",
        ),
        (
            "a.toml",
            "extends = [\"b.toml\"]\n",
            "`extends` makes a cycle",
        ),
    ];
    file(d, "b.toml", "extends = [\"a.toml\"]\n");
    for (name, body, want) in cases {
        let p = file(d, name, body);
        let out = run(cordon(cache.path()).args(["policy", "show"]).arg(&p));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{name}: {stderr}");
        assert!(stderr.contains(want), "{name}: want {want:?} in {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{name}: one error: {stderr}");
        // And `run` refuses it before anything runs.
        let marker = d.join(format!("{name}.ran"));
        let out = run(cordon(cache.path())
            .arg("run")
            .arg("--policy")
            .arg(&p)
            .args(["--trusted", "--", "/usr/bin/touch"])
            .arg(&marker));
        assert_eq!(
            out.status.code(),
            Some(125),
            "{name}: {}",
            text(&out.stderr)
        );
        assert!(!marker.exists(), "{name}: the program ran");
    }
    // Writable by another user: the file, then a dir above it.
    let p = file(d, "open.toml", "[fs]\nro = [\"/usr\"]\n");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run(cordon(cache.path()).args(["policy", "show"]).arg(&p));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("writable by other users"),
        "{}",
        text(&out.stderr)
    );
    let shared = d.join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let p = file(&shared, "p.toml", "[fs]\nro = [\"/usr\"]\n");
    let out = run(cordon(cache.path()).args(["policy", "show"]).arg(&p));
    assert_eq!(out.status.code(), Some(125));
    assert!(
        text(&out.stderr).contains("shared` is writable by other users"),
        "{}",
        text(&out.stderr)
    );
    // Where the sandbox could rewrite it: by the policy's own `rw`, a
    // flag, or a scratch dir that holds it.
    let own = file(
        d,
        "own.toml",
        &format!("[fs]\nrw = [\"{}\"]\n", d.display()),
    );
    let p = file(d, "plain.toml", "[fs]\nro = [\"/usr\"]\n");
    for (policy, flags) in [
        (&own, vec![]),
        (&p, vec!["--rw".to_string(), d.display().to_string()]),
        (&p, vec!["--scratch".to_string(), d.display().to_string()]),
    ] {
        let marker = d.join("reach.ran");
        let out = run(cordon(cache.path())
            .arg("run")
            .arg("--policy")
            .arg(policy)
            .args(&flags)
            .args(["--", "/usr/bin/touch"])
            .arg(&marker));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{flags:?}: {stderr}");
        assert!(
            stderr.contains("could rewrite the policy of its next run"),
            "{flags:?}: {stderr}"
        );
        assert!(!marker.exists(), "{flags:?}: the program ran");
    }
}

#[test]
fn policy_check_answers_for_granted_masked_and_ungranted_paths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(d.join("home/.ssh")).unwrap();
    std::fs::create_dir_all(d.join("home/out")).unwrap();
    std::fs::write(d.join("home/tool"), "").unwrap();
    let h = d.join("home");
    let p = file(
        &d,
        "p.toml",
        &format!(
            "[fs]\nro = [\"{0}\"]\nrw = [\"{0}/out\"]\nexec = [\"/usr/bin/git\"]\nmask = [\"{0}/.ssh\", \"{0}/**/*.pem\"]\n",
            h.display()
        ),
    );
    let cache = crate::common::shared_cache();
    let check = |path: &Path, flag: Option<&str>| {
        let mut c = cordon(cache.path());
        c.args(["policy", "check"]).arg(&p).arg(path);
        if let Some(f) = flag {
            c.arg(f);
        }
        let out = run(&mut c);
        (out.status.code(), text(&out.stdout))
    };
    let at = |line: usize| format!("p.toml:{line})");
    let (code, out) = check(&h.join("README"), None);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&at(2)), "{out}");
    let (code, out) = check(&h.join("out/x"), Some("--write"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&at(3)), "{out}");
    let (code, out) = check(&h.join("README"), Some("--write"));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("granted `ro` only"), "{out}");
    let (code, out) = check(&h.join(".ssh/id_rsa"), None);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("masked") && out.contains(&at(5)), "{out}");
    let (code, out) = check(&h.join("a/b/key.pem"), None);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("masked"), "{out}");
    let (code, out) = check(Path::new("/usr/bin/git"), Some("--exec"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&at(4)), "{out}");
    // Landlock adds rights down the tree: the read-only grant of the home
    // dir (which includes execute) reaches into its read-write `out`.
    let (code, out) = check(&h.join("out/x"), Some("--exec"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&at(2)), "{out}");
    let (code, out) = check(Path::new("/etc/hostname"), Some("--exec"));
    assert_eq!(code, Some(1), "{out}");
    let (code, out) = check(Path::new("/etc/shadow"), None);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no grant of this policy covers it"), "{out}");
}

#[test]
fn tier_landlock_refuses_a_policy_with_masks_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(d.join("h/.ssh")).unwrap();
    let p = file(
        &d,
        "p.toml",
        &format!(
            "[fs]\nro = [\"{0}/h\"]\nmask = [\"{0}/h/.ssh\"]\n",
            d.display()
        ),
    );
    let marker = d.join("ran");
    let cache = crate::common::shared_cache();
    let out = run(cordon(cache.path())
        .arg("run")
        .arg("--policy")
        .arg(&p)
        .args(["--tier", "landlock", "--", "/usr/bin/touch"])
        .arg(&marker));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("cannot hide a path inside a grant"),
        "{stderr}"
    );
    assert!(!marker.exists());
}

/// `cordon run --policy policy -- /bin/sh -c script`, as the test's uid.
fn sh_under(policy: &Path, script: String) -> std::process::Output {
    let cache = crate::common::shared_cache();
    run(cordon(cache.path())
        .arg("run")
        .arg("--policy")
        .arg(policy)
        .args(["--", "/bin/sh", "-c", &script]))
}

/// A tmpfs of the test's own at `at`, made shared (as systemd makes `/`
/// on most hosts), unmounted when dropped.
struct SharedMount(PathBuf);

impl SharedMount {
    fn new(at: &Path) -> SharedMount {
        std::fs::create_dir_all(at).unwrap();
        for args in [
            &[
                "-t",
                "tmpfs",
                "-o",
                "size=4m",
                "cordon-test",
                at.to_str().unwrap(),
            ][..],
            &["--make-shared", at.to_str().unwrap()][..],
        ] {
            let out = run(Command::new("mount").args(args));
            assert!(
                out.status.success(),
                "mount {args:?}: {}",
                text(&out.stderr)
            );
        }
        SharedMount(at.to_path_buf())
    }

    /// The host's mounts at or below this one.
    fn mounts(&self) -> Vec<String> {
        let prefix = self.0.to_str().unwrap();
        std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| {
                let at = l.split(' ').nth(4).unwrap_or("");
                at == prefix || at.starts_with(&format!("{prefix}/"))
            })
            .map(str::to_string)
            .collect()
    }
}

impl Drop for SharedMount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// A mask inside a read-write grant is mounted in the sandbox's mount
/// namespace only, even where the host's mount of the tree is shared (its
/// peers would receive any mount made on a copy that kept the peer
/// group): afterwards the host sees no new mount and the masked file as
/// it was, still writable.
#[test]
fn masks_under_a_writable_grant_never_reach_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let shared = SharedMount::new(&d.join("shared"));
    let proj = d.join("shared/proj");
    std::fs::create_dir_all(proj.join("sub")).unwrap();
    std::fs::write(proj.join(".env"), ENV_SECRET).unwrap();
    std::fs::write(proj.join("sub/.env"), ENV_SECRET).unwrap();
    let before = shared.mounts();
    assert_eq!(before.len(), 1, "{before:?}");
    let p = file(
        &d,
        "p.toml",
        &format!(
            "[fs]\nrw = [\"{0}\"]\nmask = [\"{0}/**/.env\"]\n",
            proj.display()
        ),
    );
    let out = sh_under(
        &p,
        format!(
            "cat {0}/.env {0}/sub/.env; echo made > {0}/made; sleep 1",
            proj.display()
        ),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(!stdout.contains(ENV_SECRET), "{stdout}");
    assert_eq!(shared.mounts(), before, "a mask reached the host");
    assert_eq!(
        std::fs::read_to_string(proj.join("made")).unwrap(),
        "made\n"
    );
    for f in [".env", "sub/.env"] {
        assert_eq!(std::fs::read_to_string(proj.join(f)).unwrap(), ENV_SECRET);
        std::fs::write(proj.join(f), "host writes").unwrap();
    }
}

/// Masks are resolved as the sandbox sees the tree: through a symlinked
/// home (the grant follows it, so must the mask) and a symlinked directory
/// inside it that leads to another granted tree.
#[test]
fn masks_hold_through_a_symlinked_home_and_linked_dirs() {
    let dir = tempfile::tempdir().unwrap();
    as_each_uid(dir.path(), |who, home, cmd| {
        // Readable by `who` without a sandbox: only the masks hide them.
        let d = home.canonicalize().unwrap().join("t");
        plant(&d.join("real/home/.ssh/id_rsa"), SECRET, who);
        plant(&d.join("real/home/p/.env"), ENV_SECRET, who);
        plant(&d.join("lib/deep/.env"), ENV_SECRET, who);
        // The control: a file beside each secret, through the same links,
        // that no mask names: read, it shows each path resolves inside
        // the grants, so a secret missing from the output was masked.
        for (i, f) in [
            "real/home/visible",
            "real/home/p/visible",
            "lib/deep/visible",
        ]
        .iter()
        .enumerate()
        {
            plant(&d.join(f), &format!("visible-{i}"), who);
        }
        std::os::unix::fs::symlink(d.join("real/home"), d.join("home")).unwrap();
        std::os::unix::fs::symlink(d.join("lib"), d.join("real/home/p/lib")).unwrap();
        let h = d.join("home");
        let p = file(
            dir.path(),
            &format!("{who}.toml"),
            &format!(
                "[fs]\nro = [\"{0}\", \"{1}\"]\nmask = [\"{0}/.ssh\", \"{0}/**/.env\"]\n",
                h.display(),
                d.join("lib").display()
            ),
        );
        let script = format!(
            "cat {0}/.ssh/id_rsa; cat {0}/p/.env {0}/p/lib/deep/.env; ls -A {0}/.ssh; \
             cat {0}/visible {0}/p/visible {0}/p/lib/deep/visible; echo; echo done",
            h.display()
        );
        let out = run(cmd()
            .arg("run")
            .arg("--policy")
            .arg(&p)
            .args(["--", "/bin/sh", "-c", &script]));
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{who}: {stdout}{}", text(&out.stderr));
        assert!(
            !stdout.contains(SECRET) && !stdout.contains(ENV_SECRET),
            "{who}: {stdout}"
        );
        assert!(stdout.ends_with("done\n"), "{who}: {stdout}");
        assert!(
            stdout.contains("visible-0visible-1visible-2"),
            "{who}: the unmasked files beside the secrets were not read: {stdout}"
        );
        // The host: what the masks covered is where it was.
        assert_eq!(
            std::fs::read_to_string(d.join("lib/deep/.env")).unwrap(),
            ENV_SECRET
        );
    });
}
