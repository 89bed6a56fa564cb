//! What the confinement is given: everything the child needs, computed in
//! the parent (`wrap`), so that the child only issues raw syscalls on it.

use std::os::fd::OwnedFd;

use super::maps::IdMaps;
use super::mounts::MountPlan;
use super::quotas::QuotaPlan;
use super::seccomp;

/// Everything the child needs, computed in the parent. Moved into the
/// pre-exec hook, so it lives exactly as long as the `ChildCommand`.
pub(crate) struct ChildPlan {
    /// `tasks` (v1) or `cgroup.procs` (v2) of the sandbox's cgroups (held
    /// open by the resources the runner keeps): the launcher (or, with a
    /// PID namespace, the program), a single thread, writes `0` to each to
    /// join them.
    pub cgroup_join: Vec<libc::c_int>,
    /// On a root host: the uid and gid (on the host) the launcher becomes
    /// before it creates the user namespace, so that they own it: the
    /// sandbox's own (`uid.rs`).
    pub drop_to: Option<(u32, u32)>,
    pub parent_pid: libc::pid_t,
    /// `CLONE_NEWUSER` plus the namespaces of the enabled layers; 0 in
    /// tier landlock (no `unshare` at all).
    pub unshare_flags: libc::c_int,
    /// Identity uid/gid maps for the new user namespace (needed for the
    /// mounts); `None` leaves it unmapped as the base layers did.
    pub id_maps: Option<IdMaps>,
    pub mounts: Option<MountPlan>,
    /// The sandbox's quotas in its user namespace (`quotas.rs`).
    pub quotas: Option<QuotaPlan>,
    /// With a UTS namespace: its hostname (`cordon`, or a container's).
    pub hostname: Option<std::ffi::CString>,
    /// Landlock rights of the scratch dir, for the rule the child adds on a
    /// private tmpfs scratch: Landlock ignores rules on a mount point that
    /// is hidden under a mount, so the rule must name the tmpfs root, which
    /// exists only in the child.
    pub scratch_rights: u64,
    /// The Landlock rights of a reviewed dir's overlay root (a read-write
    /// grant's), added in the child once it is mounted.
    pub review_rights: u64,
    pub rlimits: [(libc::__rlimit_resource_t, Option<u64>); super::rlimits::COUNT],
    pub last_cap: libc::c_ulong,
    /// When the capability bounding set is emptied (`caps.rs`).
    pub bounding: super::caps::Bounding,
    pub ruleset: OwnedFd,
    /// `landlock_restrict_self`'s flags (explain mode: log after exec).
    pub landlock_flags: u32,
    /// seccomp filters, installed in this order (compiled once per
    /// process and shared).
    pub seccomp: std::sync::Arc<Vec<seccomp::Program>>,
    /// With `CLONE_NEWPID`, or in tier landlock: the address of the
    /// [`TreeSlot`] (held by the resources for the child's whole life) in
    /// which to make the init and the program, and the init's mode.
    ///
    /// [`TreeSlot`]: super::tree::TreeSlot
    pub tree: Option<(usize, super::tree::Mode)>,
    /// On a root host with maps to write: the stack top for the helper that
    /// writes them as root (`maps.rs`).
    pub map_writer_stack: Option<usize>,
    /// With an egress allowlist: how to open the sandbox's one way out
    /// (`net.rs`; `unshare_flags` then has `CLONE_NEWNET`).
    pub egress: Option<super::net::EgressPlan>,
    /// In explain mode: the socket the program sends its seccomp filter's
    /// listener on, and the guard installed after it (`explain.rs`;
    /// `seccomp` is then the notifying variant).
    pub seccomp_listener: Option<(OwnedFd, seccomp::Program)>,
    /// Entering a running container: its namespaces, joined instead of
    /// made (`unshare_flags` is then 0, and there are no maps, quotas,
    /// hostname, mounts or egress listener to make).
    pub join: Option<super::container::join::JoinPlan>,
    /// A pod's network namespace, joined before the credentials change
    /// (`unshare_flags` then has no `CLONE_NEWNET`).
    pub join_network: Option<OwnedFd>,
}
