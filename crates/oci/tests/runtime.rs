//! `cordon-runtime` for real: under Podman beside runc (the same commands,
//! the same output and exit codes), and called directly with bundles that
//! must be refused or that attack the host from inside.
//!
//! Needs root, Podman, runc, conmon and a static busybox (`.ci/run`
//! installs them); a missing one fails the test, it is never skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[path = "../../backend-linux/tests/common/container_filter.rs"]
#[allow(dead_code)]
mod container_filter;

const RUNTIME: &str = env!("CARGO_BIN_EXE_cordon-runtime");
const RUNC: &str = "/usr/sbin/runc";
const BUSYBOX: &str = "/bin/busybox";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A scratch area for one test: a busybox root, Podman's storage and
/// config, the runtime's state root. Under a 0700 dir, as an image's root
/// is in Podman's store: the runtime must not need the sandbox's uid to
/// reach it.
struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        assert!(
            is_root(),
            "these tests run Podman as root (CI runs as root)"
        );
        for tool in [RUNC, BUSYBOX, "/usr/bin/podman", "/usr/bin/conmon"] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: .ci/run installs podman, runc, conmon and busybox-static"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let lab = Lab { dir };
        let rootfs = lab.rootfs();
        for d in ["bin", "proc", "dev", "sys", "tmp", "etc", "run"] {
            std::fs::create_dir_all(rootfs.join(d)).unwrap();
        }
        std::fs::copy(BUSYBOX, rootfs.join("bin/busybox")).unwrap();
        for applet in [
            "sh", "echo", "cat", "ls", "sleep", "true", "false", "id", "touch", "mkdir", "kill",
            "wc", "grep", "mount", "ln",
        ] {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet)).unwrap();
        }
        // Podman's default ulimits exceed what this host's root may set
        // (no CAP_SYS_RESOURCE in some sandboxes): the same for both runtimes.
        std::fs::write(
            lab.path().join("containers.conf"),
            "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n",
        )
        .unwrap();
        lab
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn rootfs(&self) -> PathBuf {
        self.path().join("rootfs")
    }

    fn state_root(&self) -> PathBuf {
        self.path().join("state")
    }

    /// `podman --runtime RUNTIME` with storage of this lab's own.
    fn podman(&self, runtime: &str) -> Command {
        let mut c = self.podman_with_conf(&self.path().join("containers.conf"));
        c.arg("--runtime").arg(runtime);
        c
    }

    /// `podman` with storage of this lab's own and the `conf` given.
    fn podman_with_conf(&self, conf: &Path) -> Command {
        let mut c = Command::new("podman");
        c.env("CONTAINERS_CONF", conf)
            .arg("--root")
            .arg(self.path().join("storage"))
            .arg("--runroot")
            .arg(self.path().join("runroot"))
            .arg("--storage-driver")
            .arg("vfs")
            .arg("--cgroup-manager")
            .arg("cgroupfs")
            .arg("--events-backend")
            .arg("none");
        c
    }

    /// `podman run --rm` of `cmd` in the busybox root.
    fn run(&self, runtime: &str, extra: &[&str], cmd: &[&str]) -> Output {
        let mut c = self.podman(runtime);
        // Podman's default seccomp profile is stacked on Cordon's filter.
        c.args(["run", "--rm", "--network", "none"])
            .args(extra)
            .arg("--rootfs")
            .arg(self.rootfs())
            .args(cmd);
        c.output().unwrap()
    }

    /// `podman run -d --name NAME` of `cmd` in the busybox root; asserts it
    /// started.
    fn run_detached(&self, runtime: &str, name: &str, cmd: &[&str]) {
        let started = self
            .podman(runtime)
            .args(["run", "-d", "--name", name, "--network", "none"])
            .arg("--rootfs")
            .arg(self.rootfs())
            .args(cmd)
            .output()
            .unwrap();
        assert!(
            started.status.success(),
            "{runtime}: {}",
            text(&started.stderr)
        );
    }

    /// `cordon-runtime --root STATE ARGS`. Its stdout and stderr are
    /// files: a monitor `create` starts keeps them (they are the
    /// container's), so pipes would not end before it does.
    fn runtime(&self, args: &[&str]) -> Output {
        self.runtime_with(&mut Command::new(RUNTIME), args)
    }

    /// `create`, `start`, the wait for the end and `delete` of the bundle
    /// `b` as `id`: what its program wrote to stdout.
    fn run_bundle(&self, b: &Path, id: &str) -> Vec<u8> {
        let out_file = tempfile::NamedTempFile::new().unwrap();
        let status = Command::new(RUNTIME)
            .arg("--root")
            .arg(self.state_root())
            .args(["create", "--bundle", b.to_str().unwrap(), id])
            .stdin(std::process::Stdio::null())
            .stdout(out_file.reopen().unwrap())
            .stderr(std::process::Stdio::inherit())
            .status()
            .unwrap();
        assert!(status.success(), "create {id}");
        let out = self.runtime(&["start", id]);
        assert!(out.status.success(), "start {id}: {}", text(&out.stderr));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let state: serde_json::Value =
                serde_json::from_slice(&self.runtime(&["state", id]).stdout).unwrap();
            if state["status"] == "stopped" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{id} still runs");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.runtime(&["delete", id]);
        std::fs::read(out_file.path()).unwrap()
    }

    /// [`Lab::runtime`] on a prepared `cmd`.
    fn runtime_with(&self, cmd: &mut Command, args: &[&str]) -> Output {
        let out = tempfile::tempfile().unwrap();
        let err = tempfile::tempfile().unwrap();
        let status = cmd
            .arg("--root")
            .arg(self.state_root())
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(err.try_clone().unwrap())
            .status()
            .unwrap();
        let read = |mut f: std::fs::File| {
            use std::io::{Read, Seek};
            let mut v = Vec::new();
            f.seek(std::io::SeekFrom::Start(0)).unwrap();
            f.read_to_end(&mut v).unwrap();
            v
        };
        Output {
            status,
            stdout: read(out),
            stderr: read(err),
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn podman_runs_echo_and_sh_as_runc_does() {
    let lab = Lab::new();
    let cases: [&[&str]; 4] = [
        &["/bin/echo", "hello from a container"],
        &["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
        &["sh", "-c", "ls /; cat /etc/hostname | wc -c"],
        &[
            "/bin/sh",
            "-c",
            "ls /dev; touch /tmp/x && echo wrote; exit 0",
        ],
    ];
    for cmd in cases {
        let theirs = lab.run(RUNC, &[], cmd);
        let ours = lab.run(RUNTIME, &[], cmd);
        assert_eq!(
            (ours.status.code(), text(&ours.stdout), text(&ours.stderr)),
            (
                theirs.status.code(),
                text(&theirs.stdout),
                text(&theirs.stderr)
            ),
            "{cmd:?}: cordon-runtime (left) differs from runc (right)"
        );
    }
}

#[test]
fn podman_stop_and_kill_control_a_long_running_container() {
    let lab = Lab::new();
    for runtime in [RUNC, RUNTIME] {
        // stop: SIGTERM, which the program's trap turns into exit 7.
        let name = "trapper";
        lab.run_detached(
            runtime,
            name,
            &["/bin/sh", "-c", "trap 'exit 7' TERM; sleep 100 & wait"],
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
        let stop = lab
            .podman(runtime)
            .args(["stop", "-t", "20", name])
            .output()
            .unwrap();
        assert!(stop.status.success(), "{runtime}: {}", text(&stop.stderr));
        let code = lab
            .podman(runtime)
            .args(["inspect", name, "--format", "{{.State.ExitCode}}"])
            .output()
            .unwrap();
        assert_eq!(text(&code.stdout).trim(), "7", "{runtime}: stop");
        lab.podman(runtime).args(["rm", name]).output().unwrap();

        // kill: SIGKILL, 137.
        let name = "sleeper";
        lab.run_detached(runtime, name, &["/bin/sleep", "100"]);
        let kill = lab.podman(runtime).args(["kill", name]).output().unwrap();
        assert!(kill.status.success(), "{runtime}: {}", text(&kill.stderr));
        let wait = lab.podman(runtime).args(["wait", name]).output().unwrap();
        assert_eq!(text(&wait.stdout).trim(), "137", "{runtime}: kill");
        lab.podman(runtime).args(["rm", name]).output().unwrap();
    }
}

/// A bundle of the busybox root with `edit` applied to a minimal config.
fn bundle(lab: &Lab, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = lab.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": {"path": lab.rootfs()},
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/sh", "-c", "echo ran > /tmp/ran"],
            "env": ["PATH=/bin"],
            "cwd": "/"
        },
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "mode=755", "size=65536k"]}
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                           {"type": "uts"}, {"type": "mount"}]
        }
    });
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

#[test]
fn bundles_asking_for_more_than_cordon_confines_are_refused_by_field() {
    let lab = Lab::new();
    type Edit = Box<dyn FnOnce(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "privileged",
            Box::new(|c| {
                c["process"]["capabilities"] = serde_json::json!({"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]})
            }),
            "process.capabilities: CAP_SYS_ADMIN",
        ),
        (
            "host-pid",
            Box::new(|c| {
                c["linux"]["namespaces"] = serde_json::json!([{"type": "network"}, {"type": "ipc"},
                    {"type": "uts"}, {"type": "mount"}])
            }),
            "linux.namespaces: no Pid namespace",
        ),
        (
            "joined-ipc",
            Box::new(|c| {
                c["linux"]["namespaces"][2] =
                    serde_json::json!({"type": "ipc", "path": "/proc/1/ns/ipc"})
            }),
            "linux.namespaces: joining the Ipc namespace",
        ),
        (
            "host-net",
            Box::new(|c| {
                c["linux"]["namespaces"][1] =
                    serde_json::json!({"type": "network", "path": "/proc/self/ns/net"})
            }),
            "linux.namespaces: the network namespace `/proc/self/ns/net` is the host's",
        ),
        (
            "devices",
            Box::new(|c| {
                c["linux"]["devices"] = serde_json::json!([{"path": "/dev/sda", "type": "b",
                    "major": 8, "minor": 0}])
            }),
            "linux.devices",
        ),
        (
            "seccomp-notify",
            Box::new(|c| {
                c["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_NOTIFY"})
            }),
            "linux.seccomp.defaultAction",
        ),
        (
            "cpu-quota",
            Box::new(|c| {
                c["linux"]["resources"] =
                    serde_json::json!({"cpu": {"quota": 50000, "period": 100000}})
            }),
            "linux.resources.cpu",
        ),
        (
            "shared-propagation",
            Box::new(|c| c["linux"]["rootfsPropagation"] = serde_json::json!("rshared")),
            "linux.rootfsPropagation",
        ),
        (
            "readonly-outside-proc",
            Box::new(|c| c["linux"]["readonlyPaths"] = serde_json::json!(["/procdata"])),
            "linux.readonlyPaths",
        ),
        (
            "hooks",
            Box::new(|c| c["hooks"] = serde_json::json!({"prestart": [{"path": "/bin/true"}]})),
            "hooks",
        ),
    ];
    for (name, edit, field) in cases {
        let b = bundle(&lab, name, edit);
        let out = lab.runtime(&["create", "--bundle", b.to_str().unwrap(), name]);
        assert_eq!(out.status.code(), Some(1), "{name} was not refused");
        assert!(
            text(&out.stderr).contains(field),
            "{name}: the refusal does not name `{field}`: {}",
            text(&out.stderr)
        );
        assert!(
            !lab.state_root().join(name).exists(),
            "{name}: a refused create left state behind"
        );
    }
    // Nothing ran: the program of every case would have written this.
    assert!(!lab.rootfs().join("tmp/ran").exists());
    // Bad input gets a clear error too.
    let out = lab.runtime(&["create", "--bundle", "/nonexistent", "x"]);
    assert_eq!(out.status.code(), Some(1));
    let out = lab.runtime(&["create", "--bundle", ".", "../escape"]);
    assert!(text(&out.stderr).contains("invalid container id"));
    let out = lab.runtime(&["--systemd-cgroup", "state", "x"]);
    assert!(text(&out.stderr).contains("--systemd-cgroup"));
    let out = lab.runtime(&["ps", "x"]);
    assert!(text(&out.stderr).contains("not supported"));
}

#[test]
fn create_start_state_delete_by_hand() {
    let lab = Lab::new();
    let b = bundle(&lab, "by-hand", |_| {});
    let pid_file = lab.path().join("pid");
    let out = lab.runtime(&[
        "create",
        "--bundle",
        b.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        "c1",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pid: i32 = std::fs::read_to_string(&pid_file).unwrap().parse().unwrap();
    let state: serde_json::Value =
        serde_json::from_slice(&lab.runtime(&["state", "c1"]).stdout).unwrap();
    assert_eq!(state["status"], "created");
    assert_eq!(state["pid"], pid);
    assert!(!lab.rootfs().join("tmp/ran").exists(), "ran before start");
    let out = lab.runtime(&["create", "--bundle", b.to_str().unwrap(), "c1"]);
    assert!(text(&out.stderr).contains("exists already"));
    let out = lab.runtime(&["delete", "c1"]);
    assert!(
        text(&out.stderr).contains("not stopped"),
        "{}",
        text(&out.stderr)
    );
    let out = lab.runtime(&["start", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let state: serde_json::Value =
            serde_json::from_slice(&lab.runtime(&["state", "c1"]).stdout).unwrap();
        if state["status"] == "stopped" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {}",
            state["status"]
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read_to_string(lab.rootfs().join("tmp/ran")).unwrap(),
        "ran\n"
    );
    let out = lab.runtime(&["delete", "c1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!lab.state_root().join("c1").exists());
    let out = lab.runtime(&["state", "c1"]);
    assert!(text(&out.stderr).contains("does not exist"));
}

#[test]
fn a_container_cannot_reach_the_host_through_its_root_or_its_mounts() {
    let lab = Lab::new();
    // A canary of the host's, outside the root.
    let canary = lab.path().join("host-canary");
    std::fs::write(&canary, "host secret").unwrap();
    // The root tries to lead a mount out: /sys an absolute link to /tmp,
    // which on the host is the host's /tmp. And a link to the canary.
    let rootfs = lab.rootfs();
    std::fs::remove_dir(rootfs.join("sys")).unwrap();
    std::os::unix::fs::symlink("/tmp", rootfs.join("sys")).unwrap();
    std::os::unix::fs::symlink(&canary, rootfs.join("etc/passwd")).unwrap();
    std::fs::create_dir(lab.path().join("vol")).unwrap();
    let host_tmp_before = std::fs::read_dir("/tmp").unwrap().count();
    let script = format!(
        "cat {canary} 2>/dev/null && echo READ-CANARY; \
         cat /etc/passwd 2>/dev/null && echo READ-VIA-LINK; \
         ls /proc/1/root/ 2>/dev/null && echo PID1-ROOT; \
         cat /proc/1/root{canary} 2>/dev/null && echo READ-VIA-PID1; \
         mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED; \
         ls /tmp/kernel >/dev/null 2>&1 && echo RO-TMP; \
         [ \"$(readlink /proc/self/ns/net)\" = {host_net} ] && echo HOST-NETNS; \
         ls /tmp/class/net | grep -qv '^lo$' && echo HOST-NET-DEVICES; \
         echo done",
        canary = canary.display(),
        host_net = std::fs::read_link("/proc/self/ns/net").unwrap().display()
    );
    let out = lab.run(
        RUNTIME,
        &[
            "-v",
            &format!("{}:/hostdir:ro", lab.path().join("vol").display()),
        ],
        &["/bin/sh", "-c", &script],
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("done"),
        "did not run: {}",
        text(&out.stderr)
    );
    for breach in [
        "READ-CANARY",
        "READ-VIA-LINK",
        "PID1-ROOT",
        "READ-VIA-PID1",
        "MOUNTED",
        "HOST-NETNS",
        "HOST-NET-DEVICES",
    ] {
        assert!(!stdout.contains(breach), "{breach}: {stdout}");
    }
    // The link in the root was resolved inside it: sysfs went over the
    // root's own /tmp (read-only there: nothing written), never the host's.
    assert!(stdout.contains("RO-TMP"), "{stdout}");
    assert!(std::fs::read_dir("/tmp").unwrap().count() > 0 || host_tmp_before == 0);
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "host secret");
}

#[test]
fn a_host_where_the_sandbox_does_not_conform_refuses_create_with_the_report() {
    let lab = Lab::new();
    let b = bundle(&lab, "refused", |_| {});
    // Under a container runtime's seccomp filter no user namespace can be
    // made: tier namespaces, which a container needs, does not conform.
    // A cache of its own, so no report of the plain host is reused.
    let cache = lab.path().join("cache");
    let mut cmd = Command::new(RUNTIME);
    cmd.env("XDG_CACHE_HOME", &cache);
    container_filter::install_on(&mut cmd);
    let out = lab.runtime_with(&mut cmd, &["create", "--bundle", b.to_str().unwrap(), "r1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no conforming sandbox backend")
            && err.contains("\nbackend unavailable: tier namespaces is required")
            && err.contains("NOT CONFORMING"),
        "the refusal carries the report: {err}"
    );
    assert!(!lab.state_root().join("r1").exists(), "state left behind");
    assert!(!lab.rootfs().join("tmp/ran").exists(), "the program ran");
}

/// A containerd of this test's own (no CRI plugin), stopped on drop.
struct Containerd {
    child: std::process::Child,
    sock: PathBuf,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Containerd {
    fn start(dir: &Path) -> Containerd {
        for tool in [
            "/usr/bin/containerd",
            "/usr/bin/ctr",
            "/usr/bin/containerd-shim-runc-v2",
        ] {
            assert!(
                Path::new(tool).exists(),
                "{tool} is missing: .ci/run installs containerd"
            );
        }
        let config = dir.join("containerd.toml");
        std::fs::write(
            &config,
            "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n",
        )
        .unwrap();
        let sock = dir.join("containerd.sock");
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .arg("--root")
            .arg(dir.join("containerd-root"))
            .arg("--state")
            .arg(dir.join("containerd-state"))
            .arg("--address")
            .arg(&sock)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Containerd { child, sock };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while c.ctr(&["version"]).status.code() != Some(0) {
            assert!(
                std::time::Instant::now() < deadline,
                "containerd did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        c
    }

    fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.sock)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }
}

#[test]
fn containerd_runs_an_imported_image_with_the_shim_calling_cordon_runtime() {
    let lab = Lab::new();
    // The busybox root as an image in an OCI archive (Podman makes it),
    // imported from that local tarball.
    let tar = lab.path().join("rootfs.tar");
    let ok = Command::new("tar")
        .arg("-C")
        .arg(lab.rootfs())
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success());
    let import = lab
        .podman(RUNC)
        .arg("import")
        .arg(&tar)
        .arg("localhost/cordon-test:1")
        .output()
        .unwrap();
    assert!(import.status.success(), "{}", text(&import.stderr));
    let archive = lab.path().join("image.tar");
    let save = lab
        .podman(RUNC)
        .args(["save", "--format", "oci-archive", "-o"])
        .arg(&archive)
        .arg("localhost/cordon-test:1")
        .output()
        .unwrap();
    assert!(save.status.success(), "{}", text(&save.stderr));
    let ctd = Containerd::start(lab.path());
    // The native snapshotter: a writable root is mounted idmapped on a root
    // host, which overlayfs cannot be (decision 0017).
    let out = ctd.ctr(&[
        "images",
        "import",
        "--snapshotter",
        "native",
        archive.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = "echo from the image; ls /bin/busybox; exit 3";
    let mut results = Vec::new();
    for (runtime, id) in [(RUNC, "with-runc"), (RUNTIME, "with-cordon")] {
        let out = ctd.ctr(&[
            "run",
            "--rm",
            "--snapshotter",
            "native",
            "--runc-binary",
            runtime,
            "localhost/cordon-test:1",
            id,
            "/bin/sh",
            "-c",
            script,
        ]);
        results.push((out.status.code(), text(&out.stdout), text(&out.stderr)));
    }
    assert_eq!(
        results[1], results[0],
        "cordon-runtime (left) differs from runc (right)"
    );
    assert_eq!(results[1].0, Some(3), "{:?}", results[1]);
    assert!(results[1].1.contains("from the image"));
}

#[test]
fn a_writable_root_holding_a_setuid_file_is_refused_and_a_read_only_one_runs() {
    use std::os::unix::fs::PermissionsExt;
    let lab = Lab::new();
    // Root's setuid file in the root: through the idmapped writable root
    // the container could rewrite it and keep the bit.
    let planted = lab.rootfs().join("bin/su-like");
    std::fs::copy(BUSYBOX, &planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let writable = bundle(&lab, "setuid-rw", |_| {});
    let out = lab.runtime(&["create", "--bundle", writable.to_str().unwrap(), "s1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lab.runtime(&["start", "s1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("setuid/setgid") && err.contains("su-like"),
        "{err}"
    );
    assert!(!lab.rootfs().join("tmp/ran").exists(), "the program ran");
    lab.runtime(&["delete", "--force", "s1"]);
    // Read-only, with a writable tmpfs at /tmp: runs.
    let read_only = bundle(&lab, "setuid-ro", |c| {
        c["root"]["readonly"] = serde_json::json!(true);
        c["mounts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}));
        c["hostname"] = serde_json::json!("bundle-host");
        c["process"]["args"] = serde_json::json!([
            "/bin/sh",
            "-c",
            "echo in-tmpfs > /tmp/x && cat /tmp/x && cat /proc/sys/kernel/hostname"
        ]);
    });
    let out = lab.run_bundle(&read_only, "s2");
    assert_eq!(text(&out).trim(), "in-tmpfs\nbundle-host");
    assert_eq!(
        std::fs::metadata(&planted).unwrap().permissions().mode() & 0o7777,
        0o4755
    );
}

#[test]
fn a_bundles_seccomp_profile_only_takes_away() {
    let lab = Lab::new();
    // mkdir refused by the profile (Cordon's filter allows it); mount and
    // unshare allowed by it (Cordon's filter refuses them).
    let script = "touch /tmp/file && echo touched; \
                  mkdir /tmp/dir 2>/dev/null && echo MKDIR-RAN; \
                  mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED; \
                  echo done";
    let b = bundle(&lab, "profile", |c| {
        c["process"]["args"] = serde_json::json!(["/bin/sh", "-c", script]);
        c["mounts"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}));
        c["linux"]["seccomp"] = serde_json::json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [
                {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
                {"names": ["mount", "unshare", "no_such_call"], "action": "SCMP_ACT_ALLOW"}
            ]
        });
    });
    let out = text(&lab.run_bundle(&b, "p1"));
    assert!(out.contains("touched") && out.contains("done"), "{out}");
    assert!(
        !out.contains("MKDIR-RAN"),
        "the profile's refusal did not hold: {out}"
    );
    assert!(
        !out.contains("MOUNTED"),
        "the profile gave back what Cordon refuses: {out}"
    );
}

/// What uid 65534 needs to run containers of its own, where it can reach
/// it: the runtime (a copy in a 0755 dir), a copy of the busybox root
/// owned by it (`prepare` may add to it first), a state dir and an output
/// file it may write. Its HOME does not exist.
struct NobodysCopy {
    dir: tempfile::TempDir,
    runtime: PathBuf,
    rootfs: PathBuf,
    states: PathBuf,
    out: PathBuf,
}

impl NobodysCopy {
    fn new(lab: &Lab, prepare: impl FnOnce(&Path)) -> NobodysCopy {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(dir.path(), 0o755);
        let runtime = dir.path().join("cordon-runtime");
        std::fs::copy(RUNTIME, &runtime).unwrap();
        let rootfs = dir.path().join("rootfs");
        let ok = Command::new("cp")
            .arg("-a")
            .arg(lab.rootfs())
            .arg(&rootfs)
            .status()
            .unwrap();
        assert!(ok.success());
        prepare(&rootfs);
        let ok = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&rootfs)
            .status()
            .unwrap();
        assert!(ok.success());
        let states = dir.path().join("states");
        std::fs::create_dir(&states).unwrap();
        mode(&states, 0o777);
        let out = dir.path().join("out");
        std::fs::write(&out, "").unwrap();
        mode(&out, 0o666);
        NobodysCopy {
            dir,
            runtime,
            rootfs,
            states,
            out,
        }
    }

    /// Runs `script` as uid 65534 with no HOME; what it wrote to `out`.
    fn run(&self, script: &str) -> (std::process::ExitStatus, String) {
        let status = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["env", "HOME=/nonexistent", "/bin/sh", "-c", script])
            .status()
            .unwrap();
        (status, std::fs::read_to_string(&self.out).unwrap())
    }
}

#[test]
fn an_unprivileged_caller_runs_a_container_of_its_own() {
    let lab = Lab::new();
    let nobody = NobodysCopy::new(&lab, |_| {});
    let (dir, runtime, rootfs) = (nobody.dir.path(), &nobody.runtime, &nobody.rootfs);
    let b = dir.join("bundle");
    std::fs::create_dir(&b).unwrap();
    let config = serde_json::json!({
        "ociVersion": "1.0.2",
        "root": {"path": rootfs, "readonly": true},
        // The host's /tmp bound in (the caller's own reach): it holds the
        // sandbox's scratch mount point, where the container's own root
        // is attached; a copy made after that would show the root there,
        // writable.
        "process": {"user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin"], "cwd": "/",
                    "args": ["/bin/sh", "-c",
                             "echo unprivileged-ok; touch /tmp/made; \
                              ls -A /run/.cordon-scratch-65534/ 2>/dev/null | grep -q . && echo ROOT-LEAKED; \
                              touch /made-in-root 2>/dev/null && echo ROOT-WRITABLE; true"]},
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/run", "type": "bind", "source": "/tmp", "options": ["rbind"]}
        ],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                 {"type": "uts"}, {"type": "mount"}]}
    });
    std::fs::write(b.join("config.json"), config.to_string()).unwrap();
    let script = format!(
        "R={rt}; S={st}/mine; $R --root $S create --bundle {b} u1 > {out} 2>&1 && \
         $R --root $S start u1 && sleep 1 && $R --root $S delete --force u1",
        rt = runtime.display(),
        st = nobody.states.display(),
        b = b.display(),
        out = nobody.out.display()
    );
    let (status, out) = nobody.run(&script);
    assert!(status.success(), "{out}");
    assert!(out.contains("unprivileged-ok"), "{out}");
    assert!(
        !out.contains("ROOT-LEAKED") && !out.contains("ROOT-WRITABLE"),
        "{out}"
    );
    assert!(!rootfs.join("made-in-root").exists());
    // /tmp was the container's tmpfs: nothing of it reached the root.
    assert!(!rootfs.join("tmp/made").exists());
}

#[test]
fn podman_exec_runs_inside_the_running_container_as_runc_does() {
    let lab = Lab::new();
    for runtime in [RUNC, RUNTIME] {
        let name = "execed";
        // The marker is in the container's own /dev/shm (a tmpfs of its
        // mount namespace): only a process inside that namespace sees it.
        lab.run_detached(
            runtime,
            name,
            &["/bin/sh", "-c", "echo inside > /dev/shm/marker; sleep 100"],
        );
        assert!(!lab.rootfs().join("dev/shm/marker").exists());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let exec = |args: &[&str], stdin: &[u8]| {
            let mut c = lab.podman(runtime);
            c.args(["exec", "-i", name])
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = c.spawn().unwrap();
            use std::io::Write;
            child.stdin.take().unwrap().write_all(stdin).unwrap();
            child.wait_with_output().unwrap()
        };
        loop {
            let seen = exec(&["/bin/cat", "/dev/shm/marker"], b"");
            if seen.status.success() {
                assert_eq!(text(&seen.stdout), "inside\n", "{runtime}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{runtime}: {}",
                text(&seen.stderr)
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let hostname = lab
            .podman(runtime)
            .args(["inspect", name, "--format", "{{.Config.Hostname}}"])
            .output()
            .unwrap();
        let out = exec(
            &["/bin/sh", "-c", "cat; hostname; echo to-stderr >&2; exit 5"],
            b"from stdin\n",
        );
        assert_eq!(
            out.status.code(),
            Some(5),
            "{runtime}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stdout),
            format!("from stdin\n{}", text(&hostname.stdout)),
            "{runtime}"
        );
        assert!(text(&out.stderr).contains("to-stderr"), "{runtime}");
        // Detached: returns at once, the process runs on inside.
        let out = lab
            .podman(runtime)
            .args([
                "exec",
                "-d",
                name,
                "/bin/sh",
                "-c",
                "echo late > /dev/shm/late",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{runtime}: {}", text(&out.stderr));
        loop {
            if exec(&["/bin/cat", "/dev/shm/late"], b"").status.success() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{runtime}: exec -d");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let kill = lab.podman(runtime).args(["kill", name]).output().unwrap();
        assert!(kill.status.success(), "{runtime}: {}", text(&kill.stderr));
        lab.podman(runtime)
            .args(["rm", "-f", name])
            .output()
            .unwrap();
    }
}

/// The record's sandbox of a started container `id`, waiting for it.
fn running(lab: &Lab, id: &str) -> serde_json::Value {
    let path = lab.state_root().join(id).join("state.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Ok(b) = std::fs::read(&path) {
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            if v["started"] == true {
                return v;
            }
        }
        assert!(std::time::Instant::now() < deadline, "{id} never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn an_exec_can_touch_neither_its_own_init_nor_the_container_and_a_host_pid_is_never_joined() {
    let lab = Lab::new();
    let b = bundle(&lab, "exec-target", |c| {
        c["process"]["args"] = serde_json::json!(["/bin/sleep", "100"]);
    });
    let out = lab.runtime(&["create", "--bundle", b.to_str().unwrap(), "t1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lab.runtime(&["start", "t1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rec = running(&lab, "t1");

    // Hostile: from inside the exec, signal its own init (its parent),
    // the container's init (pid 1) and program (pid 2). It first checks it
    // is inside the container (its pid 1 is the container's monitor,
    // never the host's init), and reports each attempt's result.
    let script = "grep -q cordon-runtime /proc/1/cmdline || exit 90; \
                  for p in $PPID 1 2; do if kill -9 $p 2>/dev/null; then echo killed $p; \
                  else echo refused $p; fi; done";
    let out = lab.runtime(&["exec", "t1", "/bin/sh", "-c", script]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said} {}", text(&out.stderr));
    assert!(!said.contains("killed"), "{said}");
    assert_eq!(said.matches("refused").count(), 3, "{said}");
    // The container runs on.
    let state: serde_json::Value =
        serde_json::from_slice(&lab.runtime(&["state", "t1"]).stdout).unwrap();
    assert_eq!(state["status"], "running");

    // It cannot leave its process group (by which its init ends it), so
    // nothing of it outlives it in the container.
    std::os::unix::fs::symlink("busybox", lab.rootfs().join("bin/setsid")).unwrap();
    let out = lab.runtime(&[
        "exec",
        "t1",
        "/bin/sh",
        "-c",
        "read _ _ _ _ _ s0 _ < /proc/$$/stat; \
         s1=$(setsid sh -c 'read _ _ _ _ _ s _ < /proc/self/stat; echo $s' 2>/dev/null); \
         [ \"$s1\" = \"$s0\" ] && echo STAYED || echo LEFT $s0 $s1",
    ]);
    assert_eq!(text(&out.stdout).trim(), "STAYED", "{}", text(&out.stderr));
    // The bundle rewritten after `create` (the host's `/` as the root)
    // changes nothing: an exec is made from the config kept at `create`.
    let mut rewritten: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.join("config.json")).unwrap()).unwrap();
    rewritten["root"]["path"] = serde_json::json!("/");
    std::fs::write(b.join("config.json"), rewritten.to_string()).unwrap();
    let out = lab.runtime(&[
        "exec",
        "t1",
        "/bin/sh",
        "-c",
        "[ -e /etc/passwd ] && echo HOST-ROOT || echo OWN-ROOT",
    ]);
    assert_eq!(
        text(&out.stdout).trim(),
        "OWN-ROOT",
        "{}",
        text(&out.stderr)
    );
    // An exec's environment (a secret, say) is its own: no other process
    // of the container shows it in its command line (the exec's init and
    // warden share its monitor's memory).
    let out = lab.runtime(&[
        "exec",
        "-e",
        "SECRET_TOKEN=hunter2-of-the-exec",
        "t1",
        "/bin/sh",
        "-c",
        "for p in /proc/[0-9]*; do [ $p = /proc/$$ ] || cat $p/cmdline; echo; done \
         > /tmp/cmdlines 2>/dev/null; true",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seen = std::fs::read_to_string(lab.rootfs().join("tmp/cmdlines")).unwrap();
    assert!(seen.contains("sleep"), "{seen}");
    assert!(!seen.contains("hunter2"), "{seen}");

    // A record whose sandbox names a host process (this test's own): the
    // exec is refused, and nothing ran (no marker in the root).
    let path = lab.state_root().join("t1").join("state.json");
    let mut forged = rec.clone();
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let stat = std::fs::read_to_string(format!("/proc/{me}/stat")).unwrap();
    let start: u64 = stat[stat.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    forged["sandbox"] = serde_json::json!({"pid": me, "start_time": start});
    std::fs::write(&path, forged.to_string()).unwrap();
    let out = lab.runtime(&["exec", "t1", "/bin/touch", "/forged"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("shares this host's"),
        "{}",
        text(&out.stderr)
    );
    assert!(!lab.rootfs().join("forged").exists());
    // A pid that is no longer the sandbox's (wrong start time): refused.
    let mut stale = rec.clone();
    stale["sandbox"]["start_time"] = serde_json::json!(1);
    std::fs::write(&path, stale.to_string()).unwrap();
    let out = lab.runtime(&["exec", "t1", "/bin/touch", "/stale"]);
    assert!(
        text(&out.stderr).contains("no longer"),
        "{}",
        text(&out.stderr)
    );
    assert!(!lab.rootfs().join("stale").exists());
    std::fs::write(&path, rec.to_string()).unwrap();

    let out = lab.runtime(&["delete", "--force", "t1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lab.runtime(&["exec", "t1", "/bin/true"]);
    assert!(text(&out.stderr).contains("does not exist"));
}

/// A network namespace of the test's own (`ip netns`), deleted on drop.
struct PodNetwork {
    name: String,
}

impl PodNetwork {
    fn new(tag: &str) -> PodNetwork {
        let name = format!("cordon-test-{tag}-{}", std::process::id());
        let ok = Command::new("ip")
            .args(["netns", "add", &name])
            .status()
            .unwrap();
        assert!(ok.success(), "ip netns add {name}");
        let ok = Command::new("ip")
            .args(["-n", &name, "link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(ok.success());
        PodNetwork { name }
    }

    fn path(&self) -> String {
        format!("/var/run/netns/{}", self.name)
    }
}

impl Drop for PodNetwork {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

#[test]
fn two_containers_of_a_pod_share_its_network_namespace_and_nothing_else() {
    let lab = Lab::new();
    let pod = PodNetwork::new("pod");
    let port = 20_000 + (std::process::id() % 20_000);
    let in_pod = |name: &str, script: String| {
        let path = pod.path();
        bundle(&lab, name, move |c| {
            c["process"]["args"] = serde_json::json!(["/bin/sh", "-c", script]);
            c["linux"]["namespaces"] = serde_json::json!([
                {"type": "pid"}, {"type": "network", "path": path}, {"type": "ipc"},
                {"type": "uts"}, {"type": "mount"}
            ]);
            // A sysfs asked for in a joined namespace becomes an empty dir.
            c["mounts"].as_array_mut().unwrap().push(
                serde_json::json!({"destination": "/sys", "type": "sysfs", "source": "sysfs"}),
            );
        })
    };
    // The server: one line to the first client, its pid namespace's view
    // of its processes to its stdout.
    let server = in_pod(
        "server",
        format!("echo from-the-server | nc -l -p {port}; ls /sys | wc -l"),
    );
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new(RUNTIME)
        .arg("--root")
        .arg(lab.state_root())
        .args(["create", "--bundle", server.to_str().unwrap(), "server"])
        .stdin(std::process::Stdio::null())
        .stdout(out_file.reopen().unwrap())
        .stderr(std::process::Stdio::inherit())
        .status()
        .unwrap();
    assert!(status.success());
    let out = lab.runtime(&["start", "server"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    running(&lab, "server");
    // An exec (a kubelet's probe) enters a container in a pod's namespace:
    // the network namespace is joined first, while the runtime is root.
    let out = lab.runtime(&[
        "exec",
        "server",
        "/bin/sh",
        "-c",
        "ls /proc/self/ns/net >/dev/null",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Outside the pod (the host, a container of its own) the port is
    // closed: the listener is in the pod's namespace only.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port as u16)).is_err());
    let alone = bundle(&lab, "alone", |c| {
        c["process"]["args"] = serde_json::json!([
            "/bin/sh",
            "-c",
            format!("nc 127.0.0.1 {port} </dev/null && echo reached || echo closed")
        ]);
    });
    assert_eq!(text(&lab.run_bundle(&alone, "alone")).trim(), "closed");

    // A second container of the pod reaches it over the pod's loopback;
    // it sees none of the server's processes (a PID namespace of its own).
    let client = in_pod(
        "client",
        format!(
            "for i in 1 2 3 4 5 6 7 8 9 10; do nc 127.0.0.1 {port} </dev/null && break; \
             sleep 0.2; done; ls /proc | grep -c '^[0-9]'"
        ),
    );
    let said = text(&lab.run_bundle(&client, "client"));
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.first(), Some(&"from-the-server"), "{said}");
    // Its own init, its shell and the `ls`: never the server's.
    assert!(lines.last().unwrap().parse::<u32>().unwrap() <= 4, "{said}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let state: serde_json::Value =
            serde_json::from_slice(&lab.runtime(&["state", "server"]).stdout).unwrap();
        if state["status"] == "stopped" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "server still runs");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    lab.runtime(&["delete", "server"]);
    // The server's /sys was the empty directory.
    assert_eq!(
        std::fs::read_to_string(out_file.path()).unwrap().trim(),
        "0"
    );

    // A file that is no namespace is refused, the host's own namespace
    // by name at `create`; and one swapped for the host's between
    // `create` and `start` (a bind mount over the named file) is refused
    // by the backend when it joins. Nothing runs.
    let netfile = lab.path().join("netfile");
    std::fs::write(&netfile, "").unwrap();
    let mount = |src: &str| {
        let ok = Command::new("mount")
            .args(["--bind", src])
            .arg(&netfile)
            .status()
            .unwrap();
        assert!(ok.success(), "mount --bind {src}");
    };
    let umount = || {
        let _ = Command::new("umount").arg(&netfile).status();
    };
    mount(&pod.path());
    let netfile_path = netfile.to_str().unwrap().to_string();
    // A FIFO (an open of it would block the runtime), and a network
    // namespace an unprivileged user owns (held by a process of the
    // test's, killed below).
    let fifo = lab.path().join("a-fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let fifo_path = fifo.to_str().unwrap().to_string();
    let mut owned = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([
            "unshare",
            "--user",
            "--net",
            "--map-root-user",
            "sleep",
            "60",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let owned_path = format!("/proc/{}/ns/net", owned.id());
    for (name, path) in [
        ("hostnet", "/proc/self/ns/net"),
        ("notns", "/etc/hostname"),
        ("fifo", fifo_path.as_str()),
        ("userowned", owned_path.as_str()),
        ("swapped", netfile_path.as_str()),
    ] {
        let b = bundle(&lab, name, |c| {
            c["process"]["args"] = serde_json::json!(["/bin/touch", format!("/{name}")]);
            c["linux"]["namespaces"] = serde_json::json!([
                {"type": "pid"}, {"type": "network", "path": path}, {"type": "ipc"},
                {"type": "uts"}, {"type": "mount"}
            ]);
        });
        let out = lab.runtime(&["create", "--bundle", b.to_str().unwrap(), name]);
        let out = if out.status.success() {
            if name == "swapped" {
                umount();
                mount("/proc/self/ns/net");
            }
            lab.runtime(&["start", name])
        } else {
            out
        };
        assert!(!out.status.success(), "{name}");
        let err = text(&out.stderr);
        let want = match name {
            "hostnet" => "is the host's",
            "notns" | "fifo" => "not a network namespace",
            "userowned" => "owned by a user namespace other than the host's",
            _ => "is this host's own: a container never joins it",
        };
        assert!(err.contains(want), "{name}: {err}");
        lab.runtime(&["delete", "--force", name]);
        assert!(!lab.rootfs().join(name).exists(), "{name} ran");
    }
    let _ = owned.kill();
    let _ = owned.wait();
    umount();
}

/// A working directory that leads through `/proc/1/cwd` (the container's
/// init) would name a directory of the host's tree: as an unprivileged
/// caller (whose launcher memory is dumpable), neither `start` nor `exec`
/// enters one, and the container's own program cannot follow it either.
#[test]
fn a_working_directory_through_proc_never_leads_out_of_the_root() {
    let lab = Lab::new();
    // The image's trap: a link to the init's cwd, and up from there.
    let nobody = NobodysCopy::new(&lab, |root| {
        std::os::unix::fs::symlink("/proc/1/cwd/../../..", root.join("escape")).unwrap()
    });
    let (dir, rootfs) = (nobody.dir.path(), &nobody.rootfs);
    let bundle_with = |name: &str, cwd: &str, script: &str| {
        let b = dir.join(name);
        std::fs::create_dir(&b).unwrap();
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "root": {"path": rootfs, "readonly": true},
            "process": {"user": {"uid": 0, "gid": 0}, "env": ["PATH=/bin"], "cwd": cwd,
                        "args": ["/bin/sh", "-c", script]},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"}
            ],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                     {"type": "uts"}, {"type": "mount"}]}
        });
        std::fs::write(b.join("config.json"), config.to_string()).unwrap();
        b
    };
    let trapped = bundle_with("trapped", "/escape", "echo STARTED-IN-$(pwd); ls");
    let target = bundle_with(
        "target",
        "/",
        "cd /proc/1/cwd 2>/dev/null && echo FOLLOWED && ls; \
         cd /escape 2>/dev/null && echo FOLLOWED && ls; sleep 100",
    );
    let script = format!(
        "R={rt}; S={st}/mine; exec >> {out} 2>&1; \
         $R --root $S create --bundle {trapped} t1 && \
         {{ $R --root $S start t1 && echo START-ENTERED; $R --root $S delete --force t1; }}; \
         $R --root $S create --bundle {target} t2 && $R --root $S start t2 && sleep 1 && \
         {{ $R --root $S exec --cwd /escape t2 /bin/sh -c 'echo EXEC-IN-$(pwd); ls' \
              && echo EXEC-ENTERED; \
            $R --root $S exec t2 /bin/sh -c 'echo exec-ran; cd /proc/1/cwd 2>/dev/null \
              && echo FOLLOWED && ls'; true; }}; \
         $R --root $S delete --force t2; echo DONE",
        rt = nobody.runtime.display(),
        st = nobody.states.display(),
        out = nobody.out.display(),
        trapped = trapped.display(),
        target = target.display(),
    );
    let (status, said) = nobody.run(&script);
    assert!(status.success() && said.contains("DONE"), "{said}");
    // The exec ran (so the refusals below are of the directory only).
    assert!(said.contains("exec-ran"), "{said}");
    for leak in [
        "STARTED-IN",
        "START-ENTERED",
        "EXEC-IN",
        "EXEC-ENTERED",
        "FOLLOWED",
    ] {
        assert!(!said.contains(leak), "{leak}: {said}");
    }
}

/// `docs/fleet.md`'s `containers.conf` snippet, as written there (the
/// runtime's path put in), makes `cordon-runtime` Podman's runtime for
/// every container: no `--runtime` flag.
#[test]
fn the_fleet_docs_containers_conf_makes_podman_use_cordon_runtime() {
    let lab = Lab::new();
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/fleet.md"))
            .unwrap();
    let section = &doc[doc.find("## Built: Podman").expect("the Podman section")..];
    let snippet = section
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the containers.conf snippet");
    assert!(
        snippet.contains("/usr/local/bin/cordon-runtime"),
        "{snippet}"
    );
    let conf = lab.path().join("fleet.conf");
    std::fs::write(
        &conf,
        format!(
            "{}\n{}",
            std::fs::read_to_string(lab.path().join("containers.conf")).unwrap(),
            snippet.replace("/usr/local/bin/cordon-runtime", RUNTIME)
        ),
    )
    .unwrap();
    let podman = || lab.podman_with_conf(&conf);
    let started = podman()
        .args(["run", "-d", "--name", "fleet", "--network", "none"])
        .arg("--rootfs")
        .arg(lab.rootfs())
        .args(["/bin/sleep", "100"])
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", text(&started.stderr));
    let runtime = podman()
        .args(["inspect", "fleet", "--format", "{{.OCIRuntime}}"])
        .output()
        .unwrap();
    // The container is Cordon's: its pid 1 is cordon-runtime's monitor.
    let init = podman()
        .args(["exec", "fleet", "/bin/cat", "/proc/1/cmdline"])
        .output()
        .unwrap();
    podman().args(["rm", "-f", "fleet"]).output().unwrap();
    assert_eq!(text(&runtime.stdout).trim(), "cordon");
    assert!(
        text(&init.stdout).contains("cordon-runtime"),
        "{}",
        text(&init.stderr)
    );
}

/// TCP memory the host counts (`/proc/net/sockstat`'s `TCP: … mem N`, in
/// pages: one count for the host, whatever the namespace).
fn host_tcp_pages() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let line = text.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "mem").unwrap();
    words[at + 1].parse().unwrap()
}

/// A container in a pod's network namespace: it serves and connects
/// there, reaches nothing of the host's loopback, makes no UDP, raw or
/// netlink socket and no `TCP_ULP`; and 48 loopback connections it fills
/// both ways (each could hold megabytes) hold at most its cgroup's share
/// of the host's TCP memory.
#[test]
fn a_pods_tcp_buffers_stay_in_the_containers_share() {
    let lab = Lab::new();
    let pod = PodNetwork::new("tcp");
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    // Python from the host's /usr, bound read-only into the busybox root.
    let rootfs = lab.rootfs();
    for (link, to) in [("lib", "usr/lib"), ("lib64", "usr/lib64")] {
        std::os::unix::fs::symlink(to, rootfs.join(link)).unwrap();
    }
    std::fs::create_dir_all(rootfs.join("usr")).unwrap();
    let code = format!(
        r#"
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
c = socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=3)
a, _ = s.accept(); c.sendall(b"ping"); print("SERVED", a.recv(4).decode())
try:
    socket.create_connection(("127.0.0.1", {host_port}), timeout=3); print("HOST reached")
except OSError as e: print("HOST", e.errno)
for name, fam, typ in [("udp", socket.AF_INET, socket.SOCK_DGRAM),
                       ("raw", socket.AF_INET, socket.SOCK_RAW),
                       ("netlink", socket.AF_NETLINK, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, typ); print(name, "made")
    except OSError as e: print(name, e.errno)
try:
    c.setsockopt(socket.IPPROTO_TCP, 31, b"tls"); print("ulp set")
except OSError as e: print("ulp", e.errno)
pairs = []
for _ in range(48):
    x = socket.create_connection(("127.0.0.1", s.getsockname()[1]))
    y, _ = s.accept()
    pairs += [x, y]
for x in pairs:
    x.setblocking(False)
sent, chunk = 0, b"x" * 65536
for _ in range(200):
    moved = 0
    for x in pairs:
        try:
            moved += x.send(chunk)
        except BlockingIOError:
            pass
    sent += moved
    if moved == 0:
        break
print("FILLED", sent, flush=True)
time.sleep(60)
"#
    );
    let path = pod.path();
    let b = bundle(&lab, "tcp", move |c| {
        c["process"]["args"] = serde_json::json!([
            "/bin/sh",
            "-c",
            format!("exec /usr/bin/python3 -c '{code}'")
        ]);
        c["linux"]["namespaces"] = serde_json::json!([
            {"type": "pid"}, {"type": "network", "path": path}, {"type": "ipc"},
            {"type": "uts"}, {"type": "mount"}
        ]);
        c["mounts"].as_array_mut().unwrap().push(serde_json::json!(
            {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]}
        ));
    });
    let out_file = tempfile::NamedTempFile::new().unwrap();
    let before = host_tcp_pages();
    let status = Command::new(RUNTIME)
        .arg("--root")
        .arg(lab.state_root())
        .args(["create", "--bundle", b.to_str().unwrap(), "tcp"])
        .stdin(std::process::Stdio::null())
        .stdout(out_file.reopen().unwrap())
        .stderr(out_file.reopen().unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let out = lab.runtime(&["start", "tcp"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let said = loop {
        let said = std::fs::read_to_string(out_file.path()).unwrap();
        if said.contains("FILLED") {
            break said;
        }
        assert!(std::time::Instant::now() < deadline, "never filled: {said}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let during = host_tcp_pages();
    lab.runtime(&["delete", "--force", "tcp"]);
    let want = "SERVED ping\nHOST 111\nudp 1\nraw 1\nnetlink 1\nulp 1\n";
    assert!(said.starts_with(want), "want {want:?}: {said}");
    assert!(
        host.accept().is_err(),
        "the host's listener got a connection"
    );
    let sent: u64 = said
        .lines()
        .find_map(|l| l.strip_prefix("FILLED "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    let grew = during.saturating_sub(before) * 4096;
    // The share (64 MiB), and what other tests' sockets may add meanwhile.
    let bound = (64u64 << 20) + (16 << 20);
    assert!(
        grew <= bound,
        "the host's TCP memory grew by {grew} (sent {sent}): past {bound}"
    );
    // It did try: more moved than the share could hold unpressed.
    assert!(sent >= 16 << 20, "the filler moved only {sent} bytes");
}
