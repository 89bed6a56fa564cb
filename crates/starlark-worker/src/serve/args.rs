//! The worker's command line (the arguments after `WORKER_ARG`:
//! `--instance`, `--max-frame`, `--rlimit NAME=VALUE`) and the limits it
//! sets on itself before serving.

use cordon_starlark_protocol::frame::DEFAULT_MAX_FRAME;

/// The type `setrlimit` takes a resource as.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
type Resource = libc::c_int;

#[derive(Debug)]
pub(super) struct WorkerArgs {
    pub(super) instance: String,
    pub(super) max_frame: usize,
    /// Limits the worker sets on itself before anything else (a worker of
    /// the host's `Isolation::Process`, which no sandbox backend limits).
    pub(super) rlimits: Vec<(RlimitName, u64)>,
}

/// The resources `--rlimit NAME=VALUE` may set (the names the host's
/// `WorkerPool` passes for its `Isolation::Process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlimitName {
    /// Private writable memory.
    Data,
    /// Address space.
    As,
    /// CPU seconds.
    Cpu,
    /// Size of a written file.
    Fsize,
    /// Open files.
    Nofile,
}

impl RlimitName {
    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            RlimitName::Data => "data",
            RlimitName::As => "as",
            RlimitName::Cpu => "cpu",
            RlimitName::Fsize => "fsize",
            RlimitName::Nofile => "nofile",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            RlimitName::Data,
            RlimitName::As,
            RlimitName::Cpu,
            RlimitName::Fsize,
            RlimitName::Nofile,
        ]
        .into_iter()
        .find(|n| n.as_str() == s)
    }

    fn resource(self) -> Resource {
        match self {
            RlimitName::Data => libc::RLIMIT_DATA,
            RlimitName::As => libc::RLIMIT_AS,
            RlimitName::Cpu => libc::RLIMIT_CPU,
            RlimitName::Fsize => libc::RLIMIT_FSIZE,
            RlimitName::Nofile => libc::RLIMIT_NOFILE,
        }
    }
}

/// Sets each limit (soft and hard) and `RLIMIT_CORE` 0 (a crash must not
/// write the host's data to disk). Any failure ends the worker: it never
/// serves a package with less than it was asked to hold.
pub(super) fn apply_rlimits(limits: &[(RlimitName, u64)]) -> Result<(), String> {
    let all = limits
        .iter()
        .map(|(n, v)| (n.resource(), *v, n.as_str()))
        .chain(std::iter::once((libc::RLIMIT_CORE, 0, "core")));
    for (resource, value, name) in all {
        let rl = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit reads `rl`.
        if unsafe { libc::setrlimit(resource, &rl) } != 0 {
            return Err(format!(
                "cannot set the worker's {name} limit to {value}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

pub(super) fn parse_args(args: &[String]) -> Result<WorkerArgs, String> {
    let mut instance = None;
    let mut max_frame = DEFAULT_MAX_FRAME;
    let mut rlimits = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--instance" => instance = it.next().cloned(),
            "--max-frame" => {
                max_frame = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--max-frame needs a byte count")?
            }
            "--rlimit" => {
                let bad = || "--rlimit needs NAME=VALUE (data, as, cpu, fsize, nofile)".to_owned();
                let (name, value) = it.next().and_then(|v| v.split_once('=')).ok_or_else(bad)?;
                let name = RlimitName::parse(name).ok_or_else(bad)?;
                rlimits.push((name, value.parse().map_err(|_| bad())?));
            }
            other => return Err(format!("unknown worker argument {other:?}")),
        }
    }
    Ok(WorkerArgs {
        instance: instance.ok_or("--instance is required")?,
        max_frame,
        rlimits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_parse() {
        let a = parse_args(&["--instance".into(), "x".into()]).unwrap();
        assert_eq!(a.instance, "x");
        assert_eq!(a.max_frame, DEFAULT_MAX_FRAME);
        assert!(parse_args(&[]).is_err());
        assert!(parse_args(&["--bogus".into()]).is_err());
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = parse_args(&args(&[
            "--instance",
            "x",
            "--rlimit",
            "data=5",
            "--rlimit",
            "cpu=2",
        ]))
        .unwrap();
        assert_eq!(a.rlimits, vec![(RlimitName::Data, 5), (RlimitName::Cpu, 2)]);
        for bad in ["nproc=1", "data", "data=-1", "data=x"] {
            assert!(
                parse_args(&args(&["--instance", "x", "--rlimit", bad])).is_err(),
                "{bad}"
            );
        }
    }
}
