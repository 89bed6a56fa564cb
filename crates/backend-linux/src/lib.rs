//! # cordon-backend-linux
//!
//! Cordon's Linux [`SandboxBackend`]: it confines a child itself, between
//! its launch and its `exec`, with no setuid helper and no external
//! program (no bubblewrap). Everything that can fail is prepared in the
//! parent, in [`SandboxBackend::wrap`]; the child then only issues raw,
//! async-signal-safe syscalls. If any step fails the child does not exec
//! and the spawn fails: the program never runs unconfined.
//!
//! In the child, in this order (each step by the name a spawn error that
//! fails at it gives, as in "EPERM at landlock_restrict_self"; a step that
//! does not apply to the tier, the host or the layers is skipped; the
//! crate's README gives each step's reason):
//!
//! 1. `cgroup_join`, only without an init (below): into the sandbox's
//!    cgroups, so everything the child makes is counted;
//! 2. `map_writer`, tier namespaces on a root host: the helper that stays
//!    root and writes the id maps is started;
//! 3. `capability_bounding_set`, tier landlock on a root host: the
//!    bounding set is emptied while the child is still root;
//! 4. `setns_network`, a container in a pod's network namespace (root
//!    host only): that namespace joined while the child is still root;
//! 5. `setresuid`, root host only: `setgroups(0)`, `setresgid(U)`,
//!    `setresuid(U)` with a uid `U` of the sandbox's own ([`UidPool`]);
//! 6. `unshare`, tier namespaces: a user namespace and, inside it, UTS,
//!    PID, IPC and mount namespaces (and a network namespace with an
//!    egress allowlist, and for a container's root unless it joins a
//!    pod's; a cgroup namespace for a container's root);
//! 7. `setns`, only when entering a running container (an OCI runtime's
//!    `exec`), instead of steps 6 and 8 to 10 (and 12 and 15, below): the
//!    container's user, PID, network, IPC, UTS, cgroup and mount
//!    namespaces joined, the sandbox's ids inside taken, its working
//!    directory entered (resolved inside the root, through no magic link:
//!    this process still holds the user namespace's capabilities);
//! 8. `uid_map`: the uid/gid maps (`nobody` inside for a root host, the
//!    caller's own ids otherwise);
//! 9. `user_namespace_quotas`, here only where the sandbox gets no procfs
//!    of its own (test layers; otherwise with the mounts, below);
//! 10. `sethostname`, tier namespaces: the hostname `cordon`;
//! 11. `parent_death_signal`: `PR_SET_PDEATHSIG(SIGKILL)` again
//!     (credential changes clear it) and a `getppid` check;
//! 12. `egress_listener`, with an egress allowlist: the proxy's listener
//!     in the sandbox's network namespace, sent to the host;
//! 13. `process_tree`: the init and the program are made (a PID
//!     namespace's pid 1 and pid 2 in tier namespaces; in tier landlock, and
//!     in a running container entered, a subreaper init with a warden
//!     beside it, and the program its child).
//!     Only the program takes the steps below;
//! 14. `cgroup_join`, with an init: the program joins the sandbox's
//!     cgroups;
//! 15. `mounts`, tier namespaces: a reviewed dir's overlay over it (its
//!     layer's upper, `--rw-review`), the host read-only and `nosuid`, a
//!     discarded scratch a private size-limited tmpfs, a kept scratch and
//!     read-write grants `nosuid,nodev` binds (idmapped on a root host),
//!     and a procfs of the PID namespace, through which the quotas are
//!     then written (`user_namespace_quotas`) before it is made read-only
//!     (`mounts`); and the Landlock rules for the private scratch
//!     (`landlock_add_rule`) and for each reviewed dir's overlay root
//!     (`landlock_add_rule`: a rule on a directory hidden under a mount is
//!     ignored);
//!     then, for a container's root, its filesystems mounted inside it
//!     (each destination resolved inside the root) and the root entered,
//!     the host's tree detached (`pivot_root`);
//! 16. `setrlimit` for NPROC, DATA and AS (without a cgroup), NOFILE,
//!     CPU, FSIZE, CORE=0, SIGPENDING, MSGQUEUE and MEMLOCK;
//! 17. `capabilities`: all dropped (ambient, the bounding set where it
//!     can be and step 3 did not, then `capset` to 0);
//! 18. `no_new_privs`: `PR_SET_NO_NEW_PRIVS`;
//! 19. `landlock_restrict_self` with a ruleset built in the parent that
//!     handles every access right of the running kernel's ABI (but TCP's
//!     with `Network::Namespace`, which the namespace bounds instead);
//! 20. `seccomp`: the seccomp filters, last (in a running container
//!     entered, with one more that refuses `setsid` and `setpgid`: its
//!     subreaper init ends the sandbox by process group).
//!
//! The init (and in tier landlock its warden) is split off at step 13
//! and takes none of the steps after it: it runs with what the launcher
//! had then. That is the sandbox's uid on a root host; in tier namespaces
//! the sandbox's namespaces and the full capability set of its user
//! namespace (which counts only inside it), a running container's when
//! one is entered; in tier landlock no namespace and, on a root host, no
//! capability. It is in no sandbox cgroup (it
//! shares the host's memory, and the cgroup's OOM killer kills every
//! process sharing its victim's) and has none of the sandbox's rlimits,
//! no no_new_privs, no Landlock domain and no seccomp filter: the init is
//! not confined. What holds instead: it runs its own raw syscalls only,
//! never execs, and only reaps, records the program's status and ends
//! the sandbox when the program ends; the program can neither trace it
//! (seccomp, no capabilities, Landlock's ptrace scoping) nor kill it (a
//! PID namespace's init ignores the signals of its namespace; in tier
//! landlock and in a running container entered, Landlock's signal
//! scoping: the container's own processes are in other Landlock domains
//! than the init, which is in none). A test in `linux/confine.rs`
//! (`the_crate_docs_list_the_steps_in_the_order_confine_takes_them`)
//! holds this list to the order the code takes the steps in.
//!
//! The child's `HOME` and `TMPDIR` are its scratch dir (core's spawner sets
//! them for every sandboxed child): `git` and `gcc` need both writable.
//! A caller's own scratch dir (`Scratch::Existing`) is never chowned: on a
//! root host it (like every writable host directory) is mounted idmapped,
//! so the caller's files appear as the sandbox's and what it creates is
//! stored as the caller's. Tier landlock has no mounts: a root host
//! refuses a caller's scratch dir there, and its fresh scratch dir is
//! chowned to the sandbox's uid for the sandbox's life (handed back to the
//! caller and removed before the uid is released).
//!
//! See [`docs`] (the crate's `README.md`) for every seccomp rule and every
//! Landlock right with the reason it exists, the minimal system set, the
//! uid / user-namespace / `RLIMIT_NPROC` decision, what each Landlock ABI
//! level gives, the known limits, and why each dependency is there.
//!
//! ## Example
//! ```
//! use std::sync::Arc;
//! use cordon_backend_linux::LinuxBackend;
//! use cordon_core::{ChildSpec, ExitOutcome, RunnerConfig, SandboxBackend, Spawner};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let backend = LinuxBackend::new();
//! if let Some(reason) = backend.availability().reason() {
//!     eprintln!("no Linux sandbox here: {reason}");
//!     return Ok(());
//! }
//! // Untrusted code should go through `SandboxRunner`, which first runs the
//! // conformance probes; a confined `Spawner` is the same spawn path.
//! let spawner = Spawner::confined(Arc::new(backend), RunnerConfig::default());
//! let spec = ChildSpec::new("/bin/sh")
//!     .args(["-c", "echo hi > out && cat out && ! cat /etc/shadow"]);
//! let mut child = spawner.spawn(&spec)?;
//! assert_eq!(child.wait().await?, ExitOutcome::Exited(0));
//! # Ok(())
//! # }
//! ```
//!
//! On targets other than Linux the crate compiles, but the backend is
//! always unavailable ("Landlock and seccomp exist only on Linux") and
//! `wrap` refuses.

#![warn(missing_docs)]

use cordon_core::ChildCommand;
use std::collections::BTreeMap;

use cordon_core::{Availability, SandboxBackend, SandboxPolicy, WrapError};

#[cfg(target_os = "linux")]
mod linux;

/// The design notes: every seccomp rule and Landlock right with its
/// reason (the crate's `README.md`).
#[doc = include_str!("../README.md")]
pub mod docs {}

#[cfg(target_os = "linux")]
pub use linux::facts::HOST_FACTS;
/// The default view every sandbox gets (the docs' table is generated from
/// these): read + execute dirs, read-only files (the public ones only when
/// world-readable), read-only dirs (and `/etc` dirs by name prefix), and
/// devices.
#[cfg(target_os = "linux")]
pub use linux::landlock_rules::{
    SYSTEM_EXEC_DIRS, SYSTEM_PUBLIC_FILES, SYSTEM_READ_DEVICES, SYSTEM_READ_DIRS,
    SYSTEM_READ_DIR_PREFIXES, SYSTEM_READ_FILES, SYSTEM_RW_DEVICES,
};
#[cfg(target_os = "linux")]
pub use linux::seccomp::pools::{Held, HostPool, HOST_POOLS, NO_HOST_POOL};
#[cfg(target_os = "linux")]
pub use linux::uid::{UidPool, UID_RANGE_ENV};

/// The uid and gid the program has *inside* its user namespace on a root
/// host (`nobody`/`nogroup`, so tools find a user database entry for
/// themselves); on the host it is a uid of its own ([`UidPool`]). Only
/// [`Layers`] without `own_uid` also use it on the host, shared by every
/// sandbox, which the conformance probes fail.
pub const SANDBOX_UID: u32 = 65534;
/// See [`SANDBOX_UID`].
pub const SANDBOX_GID: u32 = 65534;

/// Which isolation layers the backend applies on top of the ones it always
/// applies (rlimits, no capabilities, no_new_privs, Landlock, seccomp, and
/// in [`Tier::Namespaces`] a user namespace). The namespace layers (and
/// the namespace quotas of `kernel_quotas`) hold in tier namespaces only:
/// [`Tier::Landlock`] makes no namespace, whatever they say.
///
/// [`LinuxBackend::new`] applies every layer. A backend with fewer layers
/// is *not* a weaker production option: it fails the conformance probes
/// that catch what is missing, so the gate refuses it. It exists so that
/// tests can show each probe catching the breach its layer closes, and so
/// that `cargo xtask bench` can show what each layer costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layers {
    /// A PID namespace with a minimal init as pid 1: no host process can be
    /// named, and the init's death takes every sandbox process with it.
    pub pid_namespace: bool,
    /// An IPC namespace: SysV IPC and POSIX message queues are private and
    /// freed with the sandbox.
    pub ipc_namespace: bool,
    /// A mount namespace in which the host is read-only and `nosuid`, and
    /// scratch (a size-limited tmpfs, or a `nosuid,nodev` bind of the
    /// caller's dir) and read-write grants are the only writable places.
    pub mount_namespace: bool,
    /// Limits for the sandbox as a whole: a cgroup per sandbox (memory,
    /// processes, CPU time) where the host lets this process make one, and
    /// otherwise the CPU time of the sandbox's process tree summed by the
    /// runner. Without it every limit but the process count (which the
    /// user namespace already makes sandbox-wide) is per process.
    pub sandbox_limits: bool,
    /// The seccomp allowlist (unlisted syscalls return `ENOSYS`, dangerous
    /// ones `EPERM`, argument checks where a call is needed but dangerous)
    /// instead of the deny-list.
    pub seccomp_allowlist: bool,
    /// On a root host, a uid and gid of its own for every sandbox, from a
    /// [`UidPool`], instead of 65534 shared with every other sandbox and
    /// every `nobody` process of the host. (An unprivileged host's
    /// sandboxes always run as its own uid.)
    pub own_uid: bool,
    /// A UTS namespace whose hostname is `cordon`: the host's name is not
    /// shown to the program. Tier namespaces only: [`Tier::Landlock`]
    /// makes no namespace, and its program sees the host's hostname.
    pub uts_namespace: bool,
    /// The quotas the kernel keeps per user namespace, set low in the
    /// sandbox's own one (inotify, fanotify, every kind of namespace),
    /// and small `RLIMIT_SIGPENDING`, `RLIMIT_MSGQUEUE` and
    /// `RLIMIT_MEMLOCK`, so one sandbox cannot take what others or the
    /// host need (see the README's quota table).
    pub kernel_quotas: bool,
}

impl Layers {
    /// Every layer: what [`LinuxBackend::new`] applies.
    pub const ALL: Layers = Layers {
        pid_namespace: true,
        ipc_namespace: true,
        mount_namespace: true,
        sandbox_limits: true,
        seccomp_allowlist: true,
        own_uid: true,
        uts_namespace: true,
        kernel_quotas: true,
    };

    /// The base layers only, every optional one off (user namespace,
    /// rlimits, capabilities, no_new_privs, Landlock, the seccomp
    /// deny-list). It fails the conformance probes for what the optional
    /// layers close; tests run attacks under it to show they can succeed.
    pub const BASE: Layers = Layers {
        pid_namespace: false,
        ipc_namespace: false,
        mount_namespace: false,
        sandbox_limits: false,
        seccomp_allowlist: false,
        own_uid: false,
        uts_namespace: false,
        kernel_quotas: false,
    };
}

impl Default for Layers {
    fn default() -> Self {
        Layers::ALL
    }
}

/// How a sandbox is isolated from the rest of the host. A
/// [`LinuxBackend`] uses the strongest tier this host allows (it decides
/// once, at its first use, so the gate and every spawn see the same one),
/// or the one it was told to require ([`LinuxBackend::with_tier`]), and
/// names it in its host facts (`tier`); it never falls back from a
/// required tier, nor from a tier that is available. Each tier must pass
/// the conformance probes on its own: the gate certifies the tier in use.
///
/// `docs/decisions/0009-landlock-tier.md` records why the second tier is
/// what it is; the README's "Tiers" section says, probe by probe, what
/// each protection becomes in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    /// The full sandbox: user, PID, IPC, mount and UTS namespaces (and a
    /// network namespace with an egress allowlist) around Landlock,
    /// seccomp, rlimits and no capabilities. Needs unprivileged user
    /// namespaces that can map ids and mount (not a container runtime's
    /// default seccomp profile, not Ubuntu's AppArmor user-namespace
    /// restriction, not `user.max_user_namespaces=0`).
    Namespaces,
    /// No namespace at all, for hosts that refuse them: Landlock (ABI ≥ 6,
    /// Linux ≥ 6.12: files, TCP, and signals and abstract UNIX sockets
    /// scoped to the sandbox), a seccomp filter that also refuses SysV IPC,
    /// POSIX message queues, new sessions and process groups, pidfds and
    /// every pid-taking call on another pid, the uid of its own on a root
    /// host, and a subreaper outside the Landlock domain that kills the
    /// sandbox's process group when it ends. It gives up hiding the host's
    /// hostname and the existence of host pids, `--allow-host`, and (on a
    /// root host) writable host directories; see the README.
    Landlock,
}

impl Tier {
    /// Every tier, strongest first: the order [`LinuxBackend::new`] tries
    /// them in.
    pub const ALL: [Tier; 2] = [Tier::Namespaces, Tier::Landlock];

    /// Its name in host facts and on the command line (`namespaces`,
    /// `landlock`).
    pub fn name(self) -> &'static str {
        match self {
            Tier::Namespaces => "namespaces",
            Tier::Landlock => "landlock",
        }
    }

    /// The tier named `name` ([`Tier::name`]).
    pub fn parse(name: &str) -> Option<Tier> {
        Tier::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The Linux sandbox backend (Landlock + seccomp + user, PID, IPC and mount
/// namespaces + rlimits + capability drop, or without the namespaces in
/// [`Tier::Landlock`]). See the crate docs.
///
/// It holds its [`Layers`], the tier it was told to require (if any) and,
/// once decided, the tier it uses, and for a root host the [`UidPool`]
/// its sandboxes' uids come from: every other call re-checks the host, so
/// a backend created before the host lost a feature still reports it.
/// Clones share the decided tier.
#[derive(Debug, Clone, Default)]
pub struct LinuxBackend {
    layers: Layers,
    /// The tier required by [`LinuxBackend::with_tier`]; `None`: the
    /// strongest available.
    required: Option<Tier>,
    #[cfg(target_os = "linux")]
    uid_pool: Option<std::sync::Arc<UidPool>>,
    #[cfg(target_os = "linux")]
    chosen: std::sync::Arc<std::sync::OnceLock<linux::tier::Choice>>,
}

impl LinuxBackend {
    /// The backend with every layer. Cheap: nothing is probed until asked.
    /// On a root host its sandboxes' uids come from the range in
    /// [`UID_RANGE_ENV`] (`CORDON_UID_RANGE`) if that is set, else from
    /// [`UidPool::default`]; [`LinuxBackend::with_uid_pool`] overrides
    /// both.
    pub fn new() -> Self {
        LinuxBackend::with_layers(Layers::ALL)
    }

    /// A backend with only some layers; see [`Layers`] for why this exists.
    /// Never admitted by the gate unless it has them all.
    pub fn with_layers(layers: Layers) -> Self {
        LinuxBackend {
            layers,
            required: None,
            #[cfg(target_os = "linux")]
            uid_pool: None,
            #[cfg(target_os = "linux")]
            chosen: Default::default(),
        }
    }

    /// The same backend, using `tier` and nothing else: where the host
    /// does not allow it, the backend is unavailable with the reason (it
    /// never falls back to another tier).
    pub fn with_tier(mut self, tier: Tier) -> Self {
        self.required = Some(tier);
        #[cfg(target_os = "linux")]
        {
            self.chosen = Default::default();
        }
        self
    }

    /// The tier this backend uses on this host: the required one, or the
    /// strongest the host allows, decided at the first call (of this or
    /// of any [`SandboxBackend`] method) and kept for the backend's life.
    /// An error says why no tier can run here (each tier's reason).
    pub fn tier(&self) -> Result<Tier, String> {
        #[cfg(target_os = "linux")]
        {
            self.choice().tier()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Err("Landlock and seccomp exist only on Linux: use the backend for this OS".into())
        }
    }

    /// The tier decided for this backend (decided now if not yet).
    #[cfg(target_os = "linux")]
    fn choice(&self) -> &linux::tier::Choice {
        self.chosen
            .get_or_init(|| linux::tier::Choice::decide(self.required, self.layers, self.pool()))
    }

    /// The same backend, giving a root host's sandboxes their uids from
    /// `pool` (checked against the host's accounts and subordinate ids at
    /// the first spawn; see [`UidPool`]).
    #[cfg(target_os = "linux")]
    pub fn with_uid_pool(mut self, pool: UidPool) -> Self {
        self.uid_pool = Some(std::sync::Arc::new(pool));
        self
    }

    /// The layers this backend applies.
    pub fn layers(&self) -> Layers {
        self.layers
    }

    /// The pool a root host's sandbox uids come from (an error when
    /// [`UID_RANGE_ENV`] names no valid range).
    #[cfg(target_os = "linux")]
    fn pool(&self) -> Result<&UidPool, &str> {
        match &self.uid_pool {
            Some(p) => Ok(p),
            None => linux::uid::env_pool().as_ref().map_err(String::as_str),
        }
    }
}

impl SandboxBackend for LinuxBackend {
    fn name(&self) -> &str {
        "linux"
    }

    fn availability(&self) -> Availability {
        #[cfg(target_os = "linux")]
        {
            linux::availability(self.layers, self.choice(), self.pool())
        }
        #[cfg(not(target_os = "linux"))]
        {
            Availability::Unavailable {
                reason: "Landlock and seccomp exist only on Linux: use the backend for this OS"
                    .into(),
            }
        }
    }

    fn host_facts(&self) -> BTreeMap<String, String> {
        #[cfg(target_os = "linux")]
        {
            linux::host_facts(self.layers, self.choice(), self.pool())
        }
        #[cfg(not(target_os = "linux"))]
        {
            BTreeMap::new()
        }
    }

    /// With the seccomp allowlist (every layer set has it but
    /// `Layers::BASE`): a network namespace and the host's proxy
    /// (`linux/net.rs`). The deny-list would let UDP and raw
    /// sockets be made, so those layers refuse `Network::Allow`.
    /// [`Tier::Landlock`] does not claim it: without a network namespace
    /// the proxy's port would be reachable on every host address.
    fn claims_egress_allowlist(&self) -> bool {
        cfg!(target_os = "linux")
            && self.layers.seccomp_allowlist
            && self.tier() == Ok(Tier::Namespaces)
    }

    /// A root host's pool range when each sandbox gets a uid of its own:
    /// tier landlock gives a fresh scratch to that uid while it runs.
    fn sandbox_uids(&self) -> Option<std::ops::RangeInclusive<u32>> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: geteuid has no preconditions.
            if self.layers.own_uid && unsafe { libc::geteuid() } == 0 {
                return self.pool().ok().map(|p| p.first()..=p.last());
            }
        }
        None
    }

    fn step_name(&self, id: u32) -> Option<&'static str> {
        #[cfg(target_os = "linux")]
        {
            linux::Step::from_id(id).map(linux::Step::name)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = id;
            None
        }
    }

    /// In tier namespaces, a pty from a devpts instance of the sandbox's
    /// own, mounted nowhere (`linux/terminal.rs`): there an unprivileged
    /// caller's sandbox has the caller's uid and could `chmod` a host pty
    /// open to other users. In tier landlock the host's: chmod of the
    /// caller's files is refused there, and a root host's sandbox uid does
    /// not own a root pty.
    fn open_terminal(
        &self,
    ) -> Option<std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>> {
        #[cfg(target_os = "linux")]
        {
            match self.tier() {
                Ok(Tier::Namespaces) => Some(linux::terminal::private_pty()),
                _ => None,
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    fn exec_dirs(&self) -> Vec<std::path::PathBuf> {
        #[cfg(target_os = "linux")]
        {
            linux::exec_dirs()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Vec::new()
        }
    }

    fn private_scratch_mountpoint(&self, base: &std::path::Path) -> Option<std::path::PathBuf> {
        #[cfg(target_os = "linux")]
        {
            if self.layers.mount_namespace && self.tier() == Ok(Tier::Namespaces) {
                return linux::shared_mountpoint(base);
            }
        }
        let _ = base;
        None
    }

    fn wrap(
        &self,
        cmd: &mut ChildCommand,
        policy: &SandboxPolicy,
    ) -> Result<cordon_core::WrapResources, WrapError> {
        #[cfg(target_os = "linux")]
        {
            linux::wrap(cmd, policy, self.layers, self.choice(), self.pool())
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = (cmd, policy);
            Err(WrapError::new(
                "linux",
                "Landlock and seccomp exist only on Linux: use the backend for this OS",
            ))
        }
    }
}
