//! Host-side inspection of live processes through `/proc`: finding the
//! probe program by its token, and reading its status, fds, limits,
//! environment and mounts without trusting anything it says.
//!
//! The pid a backend spawns need not be the program: a backend may run a
//! monitor and an init between them (forks of the host that never exec, so
//! they carry the *host's* command line). Every probe child therefore gets
//! a random `token=...` argument, and the host finds the program, and every
//! process forked from it, by scanning `/proc/*/cmdline` for that argument.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The argument prefix that carries a probe child's token.
pub(crate) const TOKEN_ARG: &str = "token=";

/// Pids of live (non-zombie) processes whose argv holds `token=<token>`:
/// the probe program and whatever it forked without exec.
pub(crate) fn token_pids(token: &str) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|pid| bears_token(*pid, token) && alive(*pid))
        .collect()
}

/// Whether `pid`'s argv holds `token=<token>` right now.
pub(crate) fn bears_token(pid: i32, token: &str) -> bool {
    let wanted = format!("{TOKEN_ARG}{token}");
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| c.split(|b| *b == 0).any(|a| a == wanted.as_bytes()))
        .unwrap_or(false)
}

/// The probe program: the token-bearing process whose parent does not
/// bear the token (its forks do).
pub(crate) fn program_pid(token: &str) -> Option<i32> {
    let pids = token_pids(token);
    let set: BTreeSet<i32> = pids.iter().copied().collect();
    let mut tops = pids
        .into_iter()
        .filter(|pid| ppid(*pid).is_none_or(|pp| !set.contains(&pp)));
    let first = tops.next();
    // Two unrelated processes with one token would make every verdict
    // ambiguous: refuse to pick one.
    if tops.next().is_some() {
        return None;
    }
    first
}

fn all_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3 is
/// index 0), or `None` if the process is gone.
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// One field of `/proc/<pid>/stat` by its number in proc(5) (1-based).
pub(crate) fn stat_field(pid: i32, field: usize) -> Option<String> {
    stat_fields(pid)?.get(field.checked_sub(3)?).cloned()
}

fn ppid(pid: i32) -> Option<i32> {
    stat_field(pid, 4)?.parse().ok()
}

/// Whether `pid` has a SIGKILL pending (sent, not yet acted on): it will
/// never run again.
pub(crate) fn sigkill_pending(pid: i32) -> bool {
    let Some(st) = status(pid) else {
        return false;
    };
    let bit = 1u64 << (libc::SIGKILL - 1);
    ["SigPnd", "ShdPnd"].iter().any(|k| {
        st.get(*k)
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|m| m & bit != 0)
    })
}

/// Whether `pid` is a live (non-zombie) process.
pub(crate) fn alive(pid: i32) -> bool {
    matches!(stat_field(pid, 3).as_deref(), Some(s) if s != "Z" && s != "X")
}

/// `/proc/<pid>/status` as key → value (values trimmed).
pub(crate) fn status(pid: i32) -> Option<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect(),
    )
}

/// The fds open in `pid`, each with what it points at.
pub(crate) fn fds(pid: i32) -> std::io::Result<Vec<(i32, PathBuf)>> {
    let mut out: Vec<(i32, PathBuf)> = std::fs::read_dir(format!("/proc/{pid}/fd"))?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse().ok()?;
            Some((n, std::fs::read_link(e.path()).unwrap_or_default()))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// One row of `/proc/<pid>/limits`: soft and hard value as printed
/// (a number or `unlimited`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limit {
    pub soft: String,
    pub hard: String,
}

impl Limit {
    /// True when both values are numbers no larger than `max`.
    pub(crate) fn at_most(&self, max: u64) -> bool {
        let ok = |v: &str| v.parse::<u64>().is_ok_and(|n| n <= max);
        ok(&self.soft) && ok(&self.hard)
    }

    /// True when both values are numbers (not `unlimited`).
    pub(crate) fn is_finite(&self) -> bool {
        self.at_most(u64::MAX)
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.soft, self.hard)
    }
}

/// `/proc/<pid>/limits` keyed by the limit's name (`Max cpu time`, ...).
pub(crate) fn limits(pid: i32) -> std::io::Result<BTreeMap<String, Limit>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    Ok(parse_limits(&text))
}

fn parse_limits(text: &str) -> BTreeMap<String, Limit> {
    // Columns are fixed-width: the name takes 26 characters.
    text.lines()
        .skip(1)
        .filter(|l| l.len() > 26)
        .filter_map(|l| {
            let (name, rest) = l.split_at(26);
            let mut values = rest.split_whitespace();
            Some((
                name.trim().to_string(),
                Limit {
                    soft: values.next()?.to_string(),
                    hard: values.next()?.to_string(),
                },
            ))
        })
        .collect()
}

/// The variable names in `pid`'s initial environment.
pub(crate) fn environ_names(pid: i32) -> std::io::Result<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ"))?;
    Ok(raw
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let e = String::from_utf8_lossy(e);
            e.split_once('=')
                .map(|(k, _)| k.to_string())
                .unwrap_or(e.into_owned())
        })
        .collect())
}

/// The inode of one of `pid`'s namespaces (`user`, `pid`, `ipc`, `mnt`).
pub(crate) fn namespace(pid: i32, kind: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// A path as `pid` sees it, reached from the host through
/// `/proc/<pid>/root` (its root, in its own mount namespace).
pub(crate) fn in_root(pid: i32, path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    PathBuf::from(format!("/proc/{pid}/root")).join(rel)
}

/// The mount that holds `path` in `pid`'s mount namespace, from
/// `/proc/<pid>/mountinfo`: its mount point and its per-mount options.
pub(crate) fn mount_of(pid: i32, path: &Path) -> Option<(String, String)> {
    let mounts = cordon_core::mountinfo::read_of(&pid.to_string()).ok()?;
    let m = cordon_core::mountinfo::holding(&mounts, path)?;
    Some((m.at.to_string_lossy().into_owned(), m.options.clone()))
}

/// Whether the filesystem mount holding `path` has `nosuid` (from the
/// kernel, via `statvfs`, on the very mount the path resolves to).
pub(crate) fn is_nosuid(path: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain data; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a valid C string; `st` is writable.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st.f_flag & libc::ST_NOSUID != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_table_parses() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              2                    2                    seconds   \n\
                    Max open files            64                   unlimited            files     \n";
        let l = parse_limits(text);
        assert!(l["Max cpu time"].at_most(2));
        assert!(!l["Max cpu time"].at_most(1));
        assert!(!l["Max open files"].at_most(64));
    }

    #[test]
    fn this_process_is_found_and_alive() {
        let me = std::process::id() as i32;
        assert!(alive(me));
        assert!(status(me).unwrap().contains_key("NoNewPrivs"));
        assert!(fds(me).unwrap().iter().any(|(n, _)| *n == 0));
        assert!(namespace(me, "user").is_some());
        let (mp, _) = mount_of(me, Path::new("/proc/self")).unwrap();
        assert_eq!(mp, "/proc");
        assert!(token_pids("no-such-token-anywhere").is_empty());
    }
}

/// One of the host's own addresses: the IP and, for a link-local IPv6
/// one, the interface it is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HostAddr {
    pub ip: std::net::IpAddr,
    pub scope: u32,
}

impl HostAddr {
    /// How checks and arguments name it: `192.0.2.2`, `fd00::2`,
    /// `fe80::1%2` (with the interface index).
    pub(crate) fn name(&self) -> String {
        if self.scope != 0 {
            format!("{}%{}", self.ip, self.scope)
        } else {
            self.ip.to_string()
        }
    }

    /// Parses [`HostAddr::name`]'s form.
    pub(crate) fn parse(s: &str) -> Option<HostAddr> {
        let (ip, scope) = match s.split_once('%') {
            Some((ip, scope)) => (ip, scope.parse().ok()?),
            None => (s, 0),
        };
        Some(HostAddr {
            ip: ip.parse().ok()?,
            scope,
        })
    }

    /// The socket address of `port` on it.
    pub(crate) fn with_port(&self, port: u16) -> std::net::SocketAddr {
        match self.ip {
            std::net::IpAddr::V4(v4) => std::net::SocketAddr::from((v4, port)),
            std::net::IpAddr::V6(v6) => {
                std::net::SocketAddr::V6(std::net::SocketAddrV6::new(v6, port, 0, self.scope))
            }
        }
    }
}

/// Every address of every interface of the host but loopback, IPv4 and
/// IPv6 (link-local ones with their interface), each once.
pub(crate) fn host_addresses() -> Vec<HostAddr> {
    let mut out: Vec<HostAddr> = Vec::new();
    let mut ifs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list freed below; each entry's address is
    // read as the sockaddr its family says it is.
    unsafe {
        if libc::getifaddrs(&mut ifs) != 0 {
            return out;
        }
        let mut p = ifs;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            let addr = if a.is_null() {
                None
            } else if i32::from((*a).sa_family) == libc::AF_INET {
                let sin = &*(a as *const libc::sockaddr_in);
                Some(HostAddr {
                    ip: std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into(),
                    scope: 0,
                })
            } else if i32::from((*a).sa_family) == libc::AF_INET6 {
                let sin6 = &*(a as *const libc::sockaddr_in6);
                let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                let link_local = (ip.segments()[0] & 0xffc0) == 0xfe80;
                Some(HostAddr {
                    ip: ip.into(),
                    scope: if link_local { sin6.sin6_scope_id } else { 0 },
                })
            } else {
                None
            };
            if let Some(h) = addr.filter(|h| !h.ip.is_loopback()) {
                if !out.contains(&h) {
                    out.push(h);
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(ifs);
    }
    out
}
