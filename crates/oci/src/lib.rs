//! `cordon-runtime`: an OCI runtime with runc's command line, so that
//! Podman (`--runtime`), containerd's runc shim (`BinaryName`) and CRI-O
//! can run containers in Cordon sandboxes.
//!
//! Each container is one sandbox of the Linux backend in tier namespaces,
//! admitted by the same conformance gate as `cordon run` (P1–P7, answered
//! from the per-boot report cache): a host where it does not conform
//! refuses `create` with the report. The bundle's `config.json` is mapped
//! onto Cordon's confinement by [`bundle`], which refuses, naming the
//! field, whatever asks for more than Cordon can confine (privileged
//! capabilities, the host's namespaces, extra devices) or what is not
//! built yet (hooks, joining a namespace other than the network's by path,
//! a terminal). A bundle's
//! seccomp profile is stacked on Cordon's filter.
//!
//! The container's root is the bundle's `root.path`
//! ([`cordon_core::policy::ContainerRoot`]): the sandbox pivots into it
//! with the bundle's mounts made inside it, each destination resolved
//! inside the root.
//!
//! A container is run by a *monitor*: `create` starts it (this binary
//! again, detached from the caller) and returns once the gate admitted
//! the backend; it holds the sandbox's resources, waits for `start` on a
//! FIFO in the container's state dir, starts the program, forwards the
//! signals `kill` sends it to the program's process group, and exits as
//! the program did (the same code, or killed by the same signal): its pid
//! is the one the pid file names, so a caller that waits for that pid
//! (conmon, the shim) gets the container's status.
//!
//! `exec` runs a process inside a running container: a sandbox that joins
//! the container's namespaces (named by its init's pid and start time,
//! recorded at `start`) with a Landlock domain, seccomp filter and cgroup
//! of its own made from the same bundle. Detached (`-d`, as conmon calls
//! it), a monitor of its own holds it, whose pid the pid file names;
//! otherwise the calling process does, and exits as the process did.
//!
//! ```text
//! podman --runtime /usr/local/bin/cordon-runtime run --rootfs ./rootfs \
//!     --network none /bin/sh -c 'echo hi'
//! ```

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub mod bundle;
mod exec;
mod monitor;
pub mod state;

/// runc's global options, and the commands.
#[derive(Debug, Parser)]
#[command(
    name = "cordon-runtime",
    version,
    about = "An OCI runtime (runc's command line) that runs each container in a Cordon sandbox"
)]
struct Cli {
    /// Where container state is kept.
    #[arg(long, global = true, default_value = state::DEFAULT_ROOT)]
    root: PathBuf,
    /// Also write errors to this file.
    #[arg(long, global = true)]
    log: Option<PathBuf>,
    /// `text` or `json` (one `{"level","msg","time"}` object a line, as runc).
    #[arg(long = "log-format", global = true, default_value = "text")]
    log_format: String,
    /// Refused: cordon-runtime makes its own cgroups, never systemd's.
    #[arg(long = "systemd-cgroup", global = true)]
    systemd_cgroup: bool,
    /// Accepted for runc compatibility; debug output goes to stderr.
    #[arg(long, global = true)]
    debug: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Creates a container from a bundle; the program starts on `start`.
    Create {
        /// The bundle directory (holding config.json).
        #[arg(long, short = 'b', default_value = ".")]
        bundle: PathBuf,
        /// Write the container's pid (its monitor's) here.
        #[arg(long = "pid-file")]
        pid_file: Option<PathBuf>,
        /// Refused: a terminal is not supported yet.
        #[arg(long = "console-socket")]
        console_socket: Option<PathBuf>,
        /// Refused: the root is always pivoted into.
        #[arg(long = "no-pivot")]
        no_pivot: bool,
        /// Refused.
        #[arg(long = "no-new-keyring")]
        no_new_keyring: bool,
        /// Refused: no fds are passed into a container.
        #[arg(long = "preserve-fds")]
        preserve_fds: Option<u32>,
        id: String,
    },
    /// Starts a created container's program.
    Start { id: String },
    /// Prints the container's state (OCI state JSON).
    State { id: String },
    /// Sends a signal to the container's program (default SIGTERM).
    Kill {
        /// Every process of the container (its process group).
        #[arg(long, short = 'a')]
        all: bool,
        id: String,
        signal: Option<String>,
    },
    /// Deletes a stopped container's state.
    Delete {
        /// Kill it first if it still runs.
        #[arg(long, short = 'f')]
        force: bool,
        id: String,
    },
    /// Runs a process inside a running container.
    Exec {
        /// The process, as the runtime spec's `process` object (JSON);
        /// without it, the command after the id, with the bundle's env.
        #[arg(long, short = 'p')]
        process: Option<PathBuf>,
        /// Return once the process runs; its monitor's pid goes to the pid
        /// file, and the monitor exits as the process does.
        #[arg(long, short = 'd')]
        detach: bool,
        /// Write the process's pid (its monitor's, detached) here.
        #[arg(long = "pid-file")]
        pid_file: Option<PathBuf>,
        /// Refused: a terminal is not supported yet.
        #[arg(long = "console-socket")]
        console_socket: Option<PathBuf>,
        /// Refused: a terminal is not supported yet.
        #[arg(long, short = 't')]
        tty: bool,
        /// The working directory (without --process).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// More environment, `NAME=VALUE` (without --process).
        #[arg(long, short = 'e')]
        env: Vec<String>,
        /// Refused: no fds are passed into a container.
        #[arg(long = "preserve-fds")]
        preserve_fds: Option<u32>,
        id: String,
        /// The command and its arguments (without --process).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Prints what this runtime supports (OCI features JSON).
    Features,
    /// Not supported yet: refused with a clear error.
    #[command(external_subcommand)]
    Other(Vec<OsString>),
}

/// Exit status of a refused or failed command.
const FAILED: u8 = 1;

/// Runs the command line; also the monitor, when started as one.
pub fn main() -> ExitCode {
    // Before anything else (and before any thread): the conformance probe
    // child and the monitor are this same binary in another mode.
    cordon_conformance::dispatch_probe_child();
    if let Some(code) = monitor::dispatch() {
        return code;
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(FAILED)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let log = Log {
        file: cli.log.clone(),
        json: cli.log_format == "json",
    };
    match run(cli) {
        Ok(code) => code,
        Err(message) => {
            log.error(&message);
            ExitCode::from(FAILED)
        }
    }
}

/// Where errors go: stderr, and the `--log` file.
struct Log {
    file: Option<PathBuf>,
    json: bool,
}

impl Log {
    fn error(&self, message: &str) {
        eprintln!("cordon-runtime: {message}");
        let Some(path) = &self.file else { return };
        let line = if self.json {
            serde_json::json!({"level": "error", "msg": message, "time": now_rfc3339()}).to_string()
        } else {
            format!("cordon-runtime: {message}")
        };
        // The caller's own log file (conmon's): appended to, never followed
        // through a link.
        if let Ok(mut f) = cordon_core::hostfs::open_append(path).or_else(|_| create_log(path)) {
            use std::io::Write;
            let _ = writeln!(f, "{line}");
        }
    }
}

fn create_log(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Now as RFC 3339 in UTC (`2026-12-07T18:34:09Z`), as runc's JSON log
/// has it (containerd's shim parses it).
fn now_rfc3339() -> String {
    rfc3339(time::OffsetDateTime::now_utc())
}

/// `t` as RFC 3339, to the second.
fn rfc3339(t: time::OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    if cli.systemd_cgroup {
        return Err(
            "--systemd-cgroup is not supported: cordon-runtime makes the container's cgroups \
             itself (configure the caller's cgroup manager as cgroupfs)"
                .into(),
        );
    }
    if !matches!(cli.log_format.as_str(), "text" | "json") {
        return Err(format!("--log-format `{}`: text or json", cli.log_format));
    }
    if let Command::Exec {
        process,
        detach,
        pid_file,
        console_socket,
        tty,
        cwd,
        env,
        preserve_fds,
        id,
        command,
    } = cli.command
    {
        if console_socket.is_some() || tty {
            return Err(
                "exec --tty/--console-socket: a terminal is not supported by \
                 cordon-runtime yet"
                    .into(),
            );
        }
        if preserve_fds.is_some_and(|n| n > 0) {
            return Err("exec --preserve-fds is not supported".into());
        }
        let process = exec_process(&cli.root, &id, process.as_deref(), cwd, env, command)?;
        let code = exec::exec(&cli.root, &id, &process, detach, pid_file.as_deref())?;
        return Ok(code.unwrap_or(ExitCode::SUCCESS));
    }
    let done: Result<(), String> = match cli.command {
        Command::Exec { .. } => unreachable!("handled above"),
        Command::Create {
            bundle,
            pid_file,
            console_socket,
            no_pivot,
            no_new_keyring,
            preserve_fds,
            id,
        } => {
            if console_socket.is_some() {
                return Err(
                    "--console-socket: a terminal is not supported by cordon-runtime yet".into(),
                );
            }
            if no_pivot || no_new_keyring || preserve_fds.is_some_and(|n| n > 0) {
                return Err(
                    "--no-pivot, --no-new-keyring and --preserve-fds are not supported".into(),
                );
            }
            monitor::create(&cli.root, &id, &bundle, pid_file.as_deref())
        }
        Command::Start { id } => monitor::start(&cli.root, &id),
        Command::State { id } => {
            let state = monitor::state(&cli.root, &id)?;
            println!("{}", serde_json::to_string_pretty(&state).expect("json"));
            Ok(())
        }
        Command::Kill { all: _, id, signal } => {
            let sig = parse_signal(signal.as_deref().unwrap_or("SIGTERM"))?;
            monitor::kill(&cli.root, &id, sig)
        }
        Command::Delete { force, id } => monitor::delete(&cli.root, &id, force),
        Command::Features => {
            println!(
                "{}",
                serde_json::to_string_pretty(&features()).expect("json")
            );
            Ok(())
        }
        Command::Other(args) => Err(format!(
            "`{}` is not supported by cordon-runtime yet (supported: create, start, state, \
             kill, delete, exec, features)",
            args.first()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default()
        )),
    };
    done.map(|()| ExitCode::SUCCESS)
}

/// `exec`'s process: the `--process` file, or the command line's (the
/// command, with the bundle's environment and `--env`, in `--cwd` or the
/// bundle's working directory).
fn exec_process(
    root: &Path,
    id: &str,
    file: Option<&Path>,
    cwd: Option<PathBuf>,
    env: Vec<String>,
    command: Vec<String>,
) -> Result<oci_spec::runtime::Process, String> {
    if let Some(f) = file {
        if !command.is_empty() || cwd.is_some() || !env.is_empty() {
            return Err("exec: give either --process or a command, not both".into());
        }
        // The caller's file (conmon's, podman's): read by the caller's
        // own path, bounded.
        let bytes = cordon_core::hostfs::read_private(f, 1 << 20)
            .or_else(|_| std::fs::read(f))
            .map_err(|e| format!("--process {}: {e}", f.display()))?;
        return serde_json::from_slice(&bytes)
            .map_err(|e| format!("--process {}: {e}", f.display()));
    }
    if command.is_empty() {
        return Err("exec: give --process or a command to run".into());
    }
    let rec = state::Record::load(root, id)?;
    let spec = oci_spec::runtime::Spec::load(rec.bundle.join("config.json"))
        .map_err(|e| format!("{}: {e}", rec.bundle.display()))?;
    let mut process = spec.process().clone().ok_or("the bundle has no process")?;
    let mut all_env = process.env().clone().unwrap_or_default();
    all_env.extend(env);
    process.set_env(Some(all_env));
    process.set_args(Some(command));
    if let Some(c) = cwd {
        process.set_cwd(c);
    }
    Ok(process)
}

/// `TERM`, `SIGTERM` or `15`.
fn parse_signal(s: &str) -> Result<i32, String> {
    if let Ok(n) = s.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(format!("signal {n} is out of range"))
        };
    }
    let name = s.strip_prefix("SIG").unwrap_or(s);
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "WINCH" => libc::SIGWINCH,
        "ALRM" => libc::SIGALRM,
        "PIPE" => libc::SIGPIPE,
        _ => return Err(format!("unknown signal `{s}`")),
    };
    Ok(n)
}

/// What `features` prints: the OCI features document, for what is built.
fn features() -> serde_json::Value {
    serde_json::json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.2.0",
        "hooks": [],
        "mountOptions": ["ro", "rw", "nosuid", "nodev", "noexec", "bind", "rbind", "private",
                         "rprivate", "relatime", "strictatime", "mode", "size"],
        "linux": {
            "namespaces": ["pid", "network", "ipc", "uts", "mount", "user", "cgroup"],
            "capabilities": [],
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL",
                            "SCMP_ACT_KILL_THREAD", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_TRAP",
                            "SCMP_ACT_LOG"],
                "operators": ["SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ",
                              "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_MASKED_EQ"]
            },
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": {"org.opencontainers.runc.version": "none (cordon-runtime)"}
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_times_are_rfc3339() {
        let at = |s: i64| time::OffsetDateTime::from_unix_timestamp(s).unwrap();
        assert_eq!(rfc3339(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(at(1_796_668_449)), "2026-12-07T18:34:09Z");
    }

    #[test]
    fn signals_parse_by_name_and_number() {
        assert_eq!(parse_signal("TERM"), Ok(libc::SIGTERM));
        assert_eq!(parse_signal("SIGKILL"), Ok(libc::SIGKILL));
        assert_eq!(parse_signal("9"), Ok(9));
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("SIGNOPE").is_err());
    }
}
