//! An operator of a store, as the CLI tests drive one: `cordon star …`
//! as root or as uid 65534, each with a home, a store database and a key
//! file of its own, every step a separate process.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::common::{cordon, run, CORDON};

/// Who runs the commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Root,
    Nobody,
}

pub struct Operator {
    pub who: Who,
    /// A 0755 dir the operator's files live under (readable by both uids).
    pub dir: PathBuf,
    /// The operator's home (its own).
    pub home: PathBuf,
    exe: PathBuf,
    cache: PathBuf,
}

/// The shared cache of `who`'s uid (see `common::shared_cache_dir`).
fn shared_cache(who: Who) -> PathBuf {
    super::common::shared_cache_dir(match who {
        Who::Root => 0,
        Who::Nobody => 65534,
    })
}

/// Creates `path` as a dir with `mode`, owned by `uid`.
pub fn dir_of(path: &Path, mode: u32, uid: u32) {
    std::fs::create_dir_all(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
}

/// Writes a file readable by everyone.
pub fn public_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
}

impl Operator {
    /// An operator under `dir` (made 0755): root, or uid 65534 (then with
    /// a copy of cordon it can execute).
    pub fn new(dir: &Path, who: Who) -> Operator {
        dir_of(dir, 0o755, 0);
        let uid = match who {
            Who::Root => 0,
            Who::Nobody => 65534,
        };
        let home = dir.join("home");
        dir_of(&home, 0o700, uid);
        let exe = match who {
            Who::Root => PathBuf::from(CORDON),
            Who::Nobody => {
                let bin = dir.join("bin");
                dir_of(&bin, 0o755, 0);
                let exe = bin.join("cordon");
                std::fs::copy(CORDON, &exe).unwrap();
                std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
                exe
            }
        };
        let cache = shared_cache(who);
        Operator {
            who,
            dir: dir.to_path_buf(),
            home,
            exe,
            cache,
        }
    }

    pub fn db(&self) -> PathBuf {
        self.home.join("star.db")
    }

    pub fn key(&self) -> PathBuf {
        self.home.join("store.key")
    }

    /// `cordon` as this operator, with nothing of the test's environment.
    pub fn command(&self) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = match self.who {
            Who::Root => cordon(&self.cache),
            Who::Nobody => Command::new(&self.exe),
        };
        c.env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("XDG_CACHE_HOME", &self.cache)
            // Not where the test's package dirs are: `star run ID` prefers
            // a path that exists.
            .current_dir(&self.home);
        if self.who == Who::Nobody {
            c.uid(65534).gid(65534);
        }
        c
    }

    /// `cordon star ARGS --db DB --key-file KEY`, with `stdin` piped in.
    pub fn star(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = self.command();
        c.arg("star").args(args);
        c.arg("--db")
            .arg(self.db())
            .arg("--key-file")
            .arg(self.key());
        feed(&mut c, stdin)
    }
}

/// Runs `c` with `stdin` written to it (or nothing: stdin is empty).
pub fn feed(c: &mut Command, stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    match stdin {
        None => run(c.stdin(Stdio::null())),
        Some(input) => {
            c.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = super::common::spawn(c);
            let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
            child.wait_with_output().unwrap()
        }
    }
}

/// A package dir `name` under `parent` with `package.toml` and
/// `main.star`, readable by every uid.
pub fn package_dir(parent: &Path, name: &str, toml: &str, main: &str) -> PathBuf {
    let p = parent.join(name);
    dir_of(&p, 0o755, 0);
    public_file(&p.join("package.toml"), toml);
    public_file(&p.join("main.star"), main);
    p
}
