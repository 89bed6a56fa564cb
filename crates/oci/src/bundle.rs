//! A bundle's `config.json` mapped onto Cordon's confinement, or refused
//! with the field that cannot be honoured named.
//!
//! The rule (decision 0017): a field Cordon can honour is honoured; a
//! field that asks for *less* than Cordon gives anyway (capabilities of
//! the default set, `noNewPrivileges: false`, a user id) is accepted and
//! the container gets Cordon's confinement, with a warning; a field that
//! asks for *more* than Cordon can confine, or for something it does not
//! build yet, is refused, so a bundle is never run with less than it asked
//! to be held to.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use cordon_core::policy::{ContainerMount, ContainerMountKind, ContainerRoot};
use cordon_core::{ChildSpec, Limits, StdioMode};
use oci_spec::runtime::{LinuxNamespaceType, PosixRlimitType, Process, Spec};

mod seccomp;

use seccomp::seccomp_profile;

/// A container as Cordon will run it.
#[derive(Debug)]
pub struct Container {
    /// What the runner starts (its `container` set).
    pub spec: ChildSpec,
    /// What was accepted but not honoured as asked, one line each.
    pub warnings: Vec<String>,
    /// The bundle's annotations, for `state`.
    pub annotations: std::collections::HashMap<String, String>,
}

/// The capabilities a container may ask for and get none of: the OCI
/// runtimes' default set. Cordon's container keeps no capability (as
/// `cordon run`'s program); asking for one of these is asking for less
/// than root, so the bundle runs. Anything else is refused.
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CAP_AUDIT_WRITE",
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_MKNOD",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_RAW",
    "CAP_SETFCAP",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
];

/// Mount options that change nothing Cordon decides (propagation: every
/// mount is private; access-time policy) or that Cordon applies anyway.
const HARMLESS_OPTIONS: [&str; 14] = [
    "bind",
    "rbind",
    "private",
    "rprivate",
    "slave",
    "rslave",
    "nosuid",
    "nodev",
    "rw",
    "relatime",
    "strictatime",
    "norelatime",
    "newinstance",
    "noatime",
];

/// Reads and maps the bundle at `bundle`.
pub fn load(bundle: &Path) -> Result<Container, String> {
    load_config(&bundle.join("config.json"), bundle)
}

/// Reads and maps `config` (a bundle's `config.json`, or the copy kept in
/// a container's state) of the bundle at `bundle`.
pub fn load_config(config: &Path, bundle: &Path) -> Result<Container, String> {
    let spec = Spec::load(config).map_err(|e| format!("{}: {e}", config.display()))?;
    map(&spec, bundle)
}

/// Maps a parsed `spec` whose bundle directory is `bundle`.
pub fn map(spec: &Spec, bundle: &Path) -> Result<Container, String> {
    let mut warnings = Vec::new();
    if !spec.version().starts_with("1.") {
        return Err(format!(
            "ociVersion: `{}` is not a 1.x runtime spec",
            spec.version()
        ));
    }
    if let Some(hooks) = spec.hooks() {
        let any = [
            hooks.prestart().as_ref().map(Vec::len),
            hooks.create_runtime().as_ref().map(Vec::len),
            hooks.create_container().as_ref().map(Vec::len),
            hooks.start_container().as_ref().map(Vec::len),
            hooks.poststart().as_ref().map(Vec::len),
            hooks.poststop().as_ref().map(Vec::len),
        ]
        .iter()
        .any(|n| n.unwrap_or(0) > 0);
        if any {
            return Err("hooks: hooks are not supported by cordon-runtime yet".into());
        }
    }
    let root = spec.root().as_ref().ok_or("root: the bundle has no root")?;
    let rootfs = if root.path().is_absolute() {
        root.path().clone()
    } else {
        bundle.join(root.path())
    };
    let rootfs = rootfs
        .canonicalize()
        .map_err(|e| format!("root.path `{}`: {e}", rootfs.display()))?;
    let readonly = root.readonly().unwrap_or(false);

    let process = spec
        .process()
        .as_ref()
        .ok_or("process: the bundle has no process")?;
    let mut limits = check_process(process, &mut warnings, "process")?;
    let mut child = process_child(process, "process")?;

    let linux = spec
        .linux()
        .as_ref()
        .ok_or("linux: the bundle has no linux section")?;
    let mut have = BTreeSet::new();
    // A pod's network namespace (the CNI's, shared by the pod's
    // containers) is joined; every other namespace is the container's own.
    let mut network = None;
    for ns in linux.namespaces().iter().flatten() {
        if ns.typ() == LinuxNamespaceType::Time {
            return Err(
                "linux.namespaces: a time namespace is not supported by cordon-runtime".into(),
            );
        }
        if let (LinuxNamespaceType::Network, Some(path)) = (ns.typ(), ns.path()) {
            refuse_host_network(path)?;
            network = Some(path.clone());
        } else if ns.path().is_some() {
            return Err(format!(
                "linux.namespaces: joining the {:?} namespace by path is not supported by \
                 cordon-runtime yet",
                ns.typ()
            ));
        }
        have.insert(format!("{:?}", ns.typ()));
    }
    for needed in [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Mount,
    ] {
        if !have.contains(&format!("{needed:?}")) {
            return Err(format!(
                "linux.namespaces: no {needed:?} namespace means the host's, which Cordon \
                 never shares with a container"
            ));
        }
    }
    if linux.uid_mappings().as_ref().is_some_and(|m| !m.is_empty())
        || linux.gid_mappings().as_ref().is_some_and(|m| !m.is_empty())
    {
        return Err(
            "linux.uidMappings: Cordon maps the container's ids itself (one unprivileged uid \
             per sandbox); a bundle's own mappings are refused"
                .into(),
        );
    }
    if linux.devices().as_ref().is_some_and(|d| !d.is_empty()) {
        return Err(
            "linux.devices: devices beyond the default set (null, zero, full, random, urandom, \
             tty) are refused"
                .into(),
        );
    }
    let seccomp = match linux.seccomp() {
        Some(profile) => Some(seccomp_profile(profile)?),
        None => None,
    };
    let refused = [
        (
            "linux.mountLabel",
            linux.mount_label().as_ref().is_some_and(|l| !l.is_empty()),
        ),
        ("linux.personality", linux.personality().is_some()),
        ("linux.intelRdt", linux.intel_rdt().is_some()),
        (
            "linux.timeOffsets",
            linux.time_offsets().as_ref().is_some_and(|t| !t.is_empty()),
        ),
        ("linux.memoryPolicy", linux.memory_policy().is_some()),
        (
            "linux.netDevices",
            linux.net_devices().as_ref().is_some_and(|d| !d.is_empty()),
        ),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(format!(
            "{field}: not supported by cordon-runtime, so refused"
        ));
    }
    // Every mount is private to the sandbox: `slave` would let the host's
    // later mounts in, `shared` send the container's out.
    match linux.rootfs_propagation().as_deref() {
        None | Some("" | "private" | "rprivate" | "slave" | "rslave") => {}
        Some(other) => {
            return Err(format!(
                "linux.rootfsPropagation: `{other}` is refused (every mount is private)"
            ))
        }
    }
    if process.oom_score_adj().is_some() {
        warnings.push("process.oomScoreAdj: not applied".into());
    }
    if linux.sysctl().as_ref().is_some_and(|s| !s.is_empty()) {
        return Err("linux.sysctl: setting sysctls is refused".into());
    }
    if let Some(r) = linux.resources() {
        // Limits Cordon does not hold are refused: running without them
        // would be running with less confinement than asked.
        let unheld = [
            // Shares are a weight between busy containers, not a limit.
            (
                "cpu",
                r.cpu().as_ref().is_some_and(|c| {
                    c.quota().is_some_and(|q| q > 0)
                        || c.cpus().as_ref().is_some_and(|v| !v.is_empty())
                        || c.mems().as_ref().is_some_and(|v| !v.is_empty())
                        || c.realtime_runtime().is_some()
                        || c.idle().is_some_and(|i| i != 0)
                        || c.burst().is_some()
                }),
            ),
            ("blockIO", r.block_io().is_some()),
            (
                "hugepageLimits",
                r.hugepage_limits().as_ref().is_some_and(|v| !v.is_empty()),
            ),
            ("network", r.network().is_some()),
            ("rdma", r.rdma().as_ref().is_some_and(|v| !v.is_empty())),
            (
                "unified",
                r.unified().as_ref().is_some_and(|v| !v.is_empty()),
            ),
        ];
        if let Some((field, _)) = unheld.iter().find(|(_, set)| *set) {
            return Err(format!(
                "linux.resources.{field}: not held by Cordon (it limits memory, processes, open \
                 files, file size and CPU time), so refused"
            ));
        }
        if let Some(m) = r.memory() {
            if m.swap().is_some()
                || m.reservation().is_some()
                || m.kernel().is_some()
                || m.kernel_tcp().is_some()
            {
                return Err(
                    "linux.resources.memory: only `limit` is held by Cordon (swap, reservation \
                     and kernel limits are refused)"
                        .into(),
                );
            }
            if let Some(l) = m.limit().filter(|l| *l > 0) {
                limits.memory_bytes = Some(l as u64);
            }
        }
        if let Some(p) = r.pids() {
            if p.limit() > 0 {
                let l = p.limit() as u64;
                limits.max_processes = Some(limits.max_processes.map_or(l, |n| n.min(l)));
            }
        }
        // The device cgroup's rules grant nothing Cordon gives: the device
        // files a container has are the six default ones (binds of the
        // host's), and it can make none (no CAP_MKNOD in the host's user
        // namespace; a filesystem mounted in the sandbox's namespace
        // opens no device node). Extra devices are `linux.devices`,
        // refused above.
        if r.devices().iter().flatten().any(|d| d.allow()) {
            warnings.push(
                "linux.resources.devices: the device cgroup is not used; the container has the \
                 default devices only"
                    .into(),
            );
        }
    }

    let mut mounts = Vec::new();
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        let mut m = mount(i, m)?;
        // A sysfs belongs to the network namespace of the user namespace
        // that mounts it; a joined one is not the container's.
        if network.is_some() && m.kind == ContainerMountKind::Sysfs {
            warnings.push(format!(
                "mounts[{i}] ({}): sysfs in a joined network namespace is an empty directory",
                m.destination.display()
            ));
            m.kind = ContainerMountKind::Empty;
        }
        mounts.push(m);
    }
    // Masked paths: covered (an empty directory, or the host's /dev/null
    // over a file) where they exist; only inside /proc and /sys, which
    // are the kernel's, so what they are is known.
    for p in linux.masked_paths().iter().flatten() {
        let path = PathBuf::from(p);
        if !(path.starts_with("/proc") || path.starts_with("/sys")) {
            return Err(format!(
                "linux.maskedPaths: `{p}` is outside /proc and /sys, which is not supported"
            ));
        }
        mounts.push(ContainerMount {
            destination: path,
            kind: ContainerMountKind::Mask,
            read_only: true,
            no_exec: true,
            source: None,
        });
    }
    // Read-only paths: the container's /proc and /sys are read-only
    // whole already.
    for p in linux.readonly_paths().iter().flatten() {
        let path = Path::new(p);
        if !(path.starts_with("/proc") || path.starts_with("/sys")) {
            return Err(format!(
                "linux.readonlyPaths: `{p}` is outside /proc and /sys, which is not supported"
            ));
        }
    }

    let container = ContainerRoot {
        rootfs,
        readonly,
        mounts,
        cwd: process.cwd().clone(),
        hostname: spec.hostname().clone().filter(|h| !h.is_empty()),
        enter: None,
        network,
    };
    container.check().map_err(|e| format!("mounts: {e}"))?;
    child.limits = limits;
    child.container = Some(container);
    child.seccomp = seccomp;
    child.label = Some("cordon-runtime".into());
    Ok(Container {
        spec: child,
        warnings,
        annotations: spec.annotations().clone().unwrap_or_default(),
    })
}

/// The program, arguments and environment of a `process` object (the
/// bundle's, or `exec`'s: its fields named from `field`), its stdio
/// relayed.
pub(crate) fn process_child(process: &Process, field: &str) -> Result<ChildSpec, String> {
    let args = process.args().clone().unwrap_or_default();
    let Some((program, rest)) = args.split_first() else {
        return Err(format!("{field}.args: empty"));
    };
    let mut child = ChildSpec::new(PathBuf::from(program))
        .args(rest.iter().map(OsString::from))
        .stdio(StdioMode::Relay);
    for kv in process.env().iter().flatten() {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        child.env.push((k.into(), v.into()));
    }
    Ok(child)
}

/// The checks of a `process` object (the bundle's, or `exec`'s, whose
/// fields are named from `field`); returns the container's limits with
/// its rlimits applied.
pub(crate) fn check_process(
    process: &Process,
    warnings: &mut Vec<String>,
    field: &str,
) -> Result<Limits, String> {
    if process.terminal().unwrap_or(false) {
        return Err(format!(
            "{field}.terminal: a terminal (podman -t) is not supported by cordon-runtime yet"
        ));
    }
    if let Some(label) = process.selinux_label() {
        if !label.is_empty() {
            return Err(format!(
                "{field}.selinuxLabel: SELinux labels are not supported"
            ));
        }
    }
    if process
        .apparmor_profile()
        .as_deref()
        .is_some_and(|p| !p.is_empty())
    {
        warnings.push(format!(
            "{field}.apparmorProfile: ignored (Cordon's own confinement applies)"
        ));
    }
    if process.user().uid() != 0 || process.user().gid() != 0 {
        warnings.push(format!(
            "{field}.user: uid {} gid {} asked; the container runs as the sandbox's one \
             unprivileged uid",
            process.user().uid(),
            process.user().gid()
        ));
    }
    if let Some(caps) = process.capabilities() {
        let mut asked = BTreeSet::new();
        for set in [
            caps.bounding(),
            caps.effective(),
            caps.permitted(),
            caps.inheritable(),
            caps.ambient(),
        ]
        .into_iter()
        .flatten()
        {
            asked.extend(set.iter().map(|c| format!("CAP_{c}")));
        }
        if let Some(extra) = asked
            .iter()
            .find(|c| !DEFAULT_CAPABILITIES.contains(&c.as_str()))
        {
            return Err(format!(
                "{field}.capabilities: {extra} is beyond the default set, and Cordon cannot \
                 confine a container that holds it (a privileged container is refused)"
            ));
        }
    }

    // A container is a service: no CPU-time or wall-clock cap unless the
    // bundle asks (decision 0017); the other safety nets stay, each
    // lowered or raised to what the bundle asks.
    let mut limits = Limits {
        max_processes: Some(1024),
        open_files: Some(1024),
        cpu_ms: None,
        deadline: None,
        ..Limits::default_ceilings()
    };
    for r in process.rlimits().iter().flatten() {
        match r.typ() {
            PosixRlimitType::RlimitNofile => limits.open_files = Some(r.soft()),
            PosixRlimitType::RlimitNproc => limits.max_processes = Some(r.soft()),
            other => {
                return Err(format!(
                    "{field}.rlimits: {other:?} is not supported by cordon-runtime (NOFILE and \
                     NPROC are)"
                ))
            }
        }
    }

    Ok(limits)
}

/// A pod's network namespace that is this host's own is refused here,
/// by name (the backend refuses it again when it joins).
fn refuse_host_network(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let field = format!(
        "linux.namespaces: the network namespace `{}`",
        path.display()
    );
    let theirs = std::fs::metadata(path).map_err(|e| format!("{field}: {e}"))?;
    let ours = std::fs::metadata("/proc/self/ns/net").map_err(|e| format!("{field}: {e}"))?;
    if (theirs.dev(), theirs.ino()) == (ours.dev(), ours.ino()) {
        return Err(format!(
            "{field} is the host's, which a container never joins"
        ));
    }
    Ok(())
}

/// One entry of `mounts`.
fn mount(i: usize, m: &oci_spec::runtime::Mount) -> Result<ContainerMount, String> {
    let field = |what: &str| format!("mounts[{i}] ({}): {what}", m.destination().display());
    let options = m.options().clone().unwrap_or_default();
    let mut read_only = false;
    let mut no_exec = false;
    let mut size = None;
    let mut mode = None;
    let is_bind =
        m.typ().as_deref() == Some("bind") || options.iter().any(|o| o == "bind" || o == "rbind");
    for o in &options {
        match o.split_once('=') {
            _ if o == "ro" => read_only = true,
            _ if o == "noexec" => no_exec = true,
            _ if HARMLESS_OPTIONS.contains(&o.as_str()) => {}
            Some(("size", v)) => size = Some(parse_size(v).ok_or_else(|| field("bad size"))?),
            Some(("mode", v)) => {
                mode = Some(u32::from_str_radix(v, 8).map_err(|_| field("bad mode"))?)
            }
            // devpts's: Cordon's are fixed (ptmxmode=0666, mode=0620; the
            // tty group is not mapped in the sandbox's namespace).
            Some(("ptmxmode" | "gid", _)) => {}
            _ => return Err(field(&format!("mount option `{o}` is not supported"))),
        }
    }
    let destination = m.destination().clone();
    let kind = if is_bind {
        let source = m
            .source()
            .clone()
            .ok_or_else(|| field("a bind mount without a source"))?;
        ContainerMountKind::Bind { source }
    } else {
        match m.typ().as_deref() {
            Some("proc") => ContainerMountKind::Proc,
            Some("tmpfs") if destination == Path::new("/dev") => ContainerMountKind::Devices,
            Some("tmpfs") => ContainerMountKind::Tmpfs { size, mode },
            Some("devpts") => ContainerMountKind::Devpts,
            Some("mqueue") => ContainerMountKind::Mqueue,
            Some("sysfs") => ContainerMountKind::Sysfs,
            // Decision 0017: no cgroup tree is shown to the container.
            Some("cgroup" | "cgroup2") => ContainerMountKind::Empty,
            Some(other) => return Err(field(&format!("mount type `{other}` is not supported"))),
            None => return Err(field("a mount without a type")),
        }
    };
    let source = m
        .source()
        .as_ref()
        .filter(|_| !is_bind)
        .map(|s| s.display().to_string());
    Ok(ContainerMount {
        destination,
        kind,
        read_only,
        no_exec,
        source,
    })
}

/// `65536k`, `64m`, `1g` or bytes.
fn parse_size(v: &str) -> Option<u64> {
    let (n, mult) = match v.chars().last()? {
        'k' | 'K' => (&v[..v.len() - 1], 1u64 << 10),
        'm' | 'M' => (&v[..v.len() - 1], 1 << 20),
        'g' | 'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    n.parse::<u64>().ok()?.checked_mul(mult)
}
