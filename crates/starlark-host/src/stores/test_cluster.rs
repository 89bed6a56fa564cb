//! A throwaway PostgreSQL server for tests and the benchmark (feature
//! `test-cluster`; not for production): `initdb` into a temporary
//! directory, the server on a free port of 127.0.0.1 (password auth) and
//! a unix socket in that directory, run as uid 65534 when the caller is
//! root (PostgreSQL refuses root), stopped and removed when dropped — or,
//! for [`TestCluster::shared`], when the process exits. The server gets
//! `SIGQUIT` (immediate shutdown) should the test process die first.
//!
//! PostgreSQL missing is an error, never a skip: [`TestCluster::start`]
//! says what to install.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The uid and gid the server runs as when the caller is root.
const SERVER_UID: u32 = 65534;

/// A running throwaway server.
pub struct TestCluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    password: String,
    child: Mutex<Option<Child>>,
    /// Dropping it ends the thread that started the server (whose death
    /// is the server's parent-death signal).
    keeper: Mutex<Option<mpsc::Sender<()>>>,
    /// Whether it takes TLS connections only.
    tls: bool,
}

/// The directory holding `initdb` and `postgres`: `CORDON_PG_BIN`, the
/// directory `initdb` on `PATH` resolves into, or the newest
/// `/usr/lib/postgresql/*/bin` (Debian's packages).
pub fn find_bin_dir() -> Result<PathBuf, String> {
    let usable = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(d) = std::env::var_os("CORDON_PG_BIN") {
        let d = PathBuf::from(d);
        return if usable(&d) {
            Ok(d)
        } else {
            Err(format!(
                "CORDON_PG_BIN={} holds no initdb and postgres",
                d.display()
            ))
        };
    }
    for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
        if let Ok(real) = std::fs::canonicalize(dir.join("initdb")) {
            if let Some(d) = real.parent().filter(|d| usable(d)) {
                return Ok(d.to_owned());
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| usable(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d).ok_or_else(|| {
        "PostgreSQL is not installed (no initdb and postgres on PATH or in \
         /usr/lib/postgresql/*/bin): the PostgreSQL store tests need a real server — install \
         it (apt-get install postgresql) or set CORDON_PG_BIN"
            .to_owned()
    })
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A command that runs as [`SERVER_UID`] when we are root.
fn as_server_user(program: &Path) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    if is_root() {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe syscalls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(SERVER_UID) != 0
                    || libc::setuid(SERVER_UID) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd
}

fn chown_to_server(path: &Path) -> Result<(), String> {
    if is_root() {
        std::os::unix::fs::chown(path, Some(SERVER_UID), Some(SERVER_UID))
            .map_err(|e| format!("chown {}: {e}", path.display()))?;
    }
    Ok(())
}

fn run(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A CA (`ca.pem`) and the server's certificate and key
/// (`server.pem`, `server.key`) for `localhost` and 127.0.0.1, in `dir`.
fn make_certificates(dir: &Path) -> Result<(), String> {
    let openssl = |args: &[&str]| {
        run(
            Command::new("openssl").current_dir(dir).args(args),
            "openssl (the TLS test cluster's certificates)",
        )
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "2", "-subj", "/CN=cordon test CA"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            &["-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    )?;
    openssl(
        &[
            &["req"][..],
            &ec,
            &["-subj", "/CN=localhost", "-keyout", "server.key"],
            &["-out", "server.csr"],
        ]
        .concat(),
    )?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| format!("server.ext: {e}"))?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ])?;
    Ok(())
}

impl TestCluster {
    /// Makes and starts a new cluster, or says why not.
    pub fn start() -> Result<TestCluster, String> {
        Self::start_with(false)
    }

    /// A cluster that takes TLS connections only (`hostssl` in
    /// `pg_hba.conf`), its certificate, for `localhost` and 127.0.0.1,
    /// signed by a CA made for it with `openssl` ([`TestCluster::ca_file`]).
    pub fn start_tls() -> Result<TestCluster, String> {
        Self::start_with(true)
    }

    /// The CA that signed a TLS cluster's certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    fn start_with(tls: bool) -> Result<TestCluster, String> {
        let bin = find_bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("cordon-pg-")
            .tempdir()
            .map_err(|e| format!("no temporary directory: {e}"))?
            .keep();
        let mut cluster = TestCluster {
            dir: dir.clone(),
            bin,
            port: 0,
            password: {
                let mut b = [0u8; 16];
                getrandom::getrandom(&mut b).map_err(|e| format!("no randomness: {e}"))?;
                hex::encode(b)
            },
            child: Mutex::new(None),
            keeper: Mutex::new(None),
            tls: false,
        };
        chown_to_server(&dir)?;
        let pwfile = dir.join("pwfile");
        std::fs::write(&pwfile, &cluster.password).map_err(|e| format!("pwfile: {e}"))?;
        chown_to_server(&pwfile)?;
        let data = dir.join("data");
        run(
            as_server_user(&cluster.bin.join("initdb"))
                .current_dir(&dir)
                .arg("-D")
                .arg(&data)
                .args(["-U", "cordon", "-E", "UTF8", "--locale=C", "--no-sync"])
                .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
                .arg(format!("--pwfile={}", pwfile.display())),
            "initdb",
        )?;
        if tls {
            make_certificates(&dir)?;
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            )
            .map_err(|e| format!("pg_hba.conf: {e}"))?;
            let key = dir.join("server.key");
            std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .map_err(|e| format!("server.key: {e}"))?;
            chown_to_server(&key)?;
            cluster.tls = true;
        }
        // A port taken between our probe and the server's bind: try again.
        let mut last = String::new();
        for _ in 0..5 {
            cluster.port = free_port()?;
            match cluster.launch(&data) {
                Ok(()) => return Ok(cluster),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn launch(&self, data: &Path) -> Result<(), String> {
        let log_path = self.dir.join(format!("server-{}.log", self.port));
        let log = std::fs::File::create(&log_path).map_err(|e| format!("server log: {e}"))?;
        let mut cmd = as_server_user(&self.bin.join("postgres"));
        cmd.current_dir(&self.dir)
            .arg("-D")
            .arg(data)
            .args(["-p", &self.port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(&self.dir)
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .stdout(Stdio::null())
            .stderr(log);
        if self.tls {
            cmd.args(["-c", "ssl=on", "-c"])
                .arg(format!(
                    "ssl_cert_file={}",
                    self.dir.join("server.pem").display()
                ))
                .arg("-c")
                .arg(format!(
                    "ssl_key_file={}",
                    self.dir.join("server.key").display()
                ));
        }
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: one async-signal-safe syscall between fork and exec,
            // after the uid change (which would clear it).
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        // The server's parent is a thread that lives as long as the
        // cluster: its death (the process's) is the server's.
        let (child_tx, child_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("pg-test-cluster".into())
            .spawn(move || {
                let _ = child_tx.send(cmd.spawn());
                let _ = stop_rx.recv();
            })
            .map_err(|e| format!("cannot start the server's thread: {e}"))?;
        let child = child_rx
            .recv()
            .map_err(|_| "the server's thread died".to_owned())?
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        *self.keeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(stop_tx);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            let exited = self
                .child
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
                .map(|c| c.try_wait().ok().flatten().is_some())
                .unwrap_or(true);
            if exited || Instant::now() > deadline {
                self.stop_server();
                let mut text = String::new();
                let _ = std::fs::File::open(&log_path).map(|mut f| f.read_to_string(&mut text));
                return Err(format!("the test PostgreSQL server did not start: {text}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The cluster every test of this process shares, started on first
    /// use and stopped (its directory removed) when the process exits.
    /// Panics, loudly, when it cannot start: a test needing PostgreSQL
    /// never passes without it.
    pub fn shared() -> &'static TestCluster {
        static SHARED: OnceLock<TestCluster> = OnceLock::new();
        extern "C" fn stop_shared() {
            if let Some(c) = SHARED.get() {
                c.stop();
            }
        }
        SHARED.get_or_init(|| {
            let c = TestCluster::start().unwrap_or_else(|e| panic!("{e}"));
            // SAFETY: registers a plain function to run at exit.
            unsafe { libc::atexit(stop_shared) };
            c
        })
    }

    /// The password of the `cordon` superuser.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory of the server's programs (`pg_dump`, `psql`).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// A new, empty database; its URL, without the password.
    pub fn database(&self) -> String {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("{e}"));
        self.url(&name)
    }

    /// The URL of database `name`, without the password.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://cordon@127.0.0.1:{}/{name}", self.port)
    }

    /// `url` with the password in it (for the environment, never argv).
    pub fn with_password(&self, url: &str) -> String {
        url.replacen("://cordon@", &format!("://cordon:{}@", self.password), 1)
    }

    /// `program` of the server's (`psql`, `pg_dump`) as the superuser,
    /// over TCP to this cluster.
    fn client(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.env("PGPASSWORD", &self.password)
            .args(["-h", "127.0.0.1", "-U", "cordon", "-p"])
            .arg(self.port.to_string());
        c
    }

    /// Runs `sql` in database `db` as the superuser; its output.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        run(
            self.client("psql")
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
                .args(["-d", db, "-c", sql]),
            "psql",
        )
    }

    /// Everything database `db` holds, as `pg_dump` writes it (without
    /// the random `\restrict` key newer versions put in every dump).
    pub fn dump(&self, db: &str) -> Result<String, String> {
        let dump = run(self.client("pg_dump").arg(db), "pg_dump")?;
        Ok(dump
            .lines()
            .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
            .map(|l| format!("{l}\n"))
            .collect())
    }

    fn stop_server(&self) {
        let child = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = child {
            // SIGINT: fast shutdown (clients cut off, then a clean stop).
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    /// Stops the server (its databases are then unreachable) and removes
    /// its directory.
    pub fn stop(&self) {
        self.stop_server();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
