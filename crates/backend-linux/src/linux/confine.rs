//! The confinement, as the list of its steps: what runs in the child
//! between its launch and its `exec`, in this order, each step a function
//! of the module of its mechanism (read [`confine`] top to bottom).
//!
//! Everything here is async-signal-safe: raw syscalls on data prepared in
//! the parent ([`ChildPlan`]), `io::Error` built from errno, no
//! allocation, no locks. The first step that fails ends the launch: it
//! reports its [`Step`] on the launch's report pipe
//! ([`ChildContext::report_step`]) and returns the errno, which core turns
//! into a spawn error naming the step ("EPERM at landlock_restrict_self");
//! the program is never executed.
//!
//! It runs in core's launcher, a `clone(CLONE_VM)` child in the host's
//! memory. With a PID namespace the launcher hands over to the init once
//! the namespaces exist, and the steps after [`Step::ProcessTree`] run in
//! the program process that [`tree::split`](super::tree::split) creates
//! inside the new namespace; the init takes none of them (the crate docs
//! say what it runs under). The crate docs list the steps in this order
//! by their names; a test below holds the two together. Tier landlock takes the same list without
//! the namespace steps (no `unshare`, maps, quotas, hostname or mounts):
//! its init is a subreaper with a warden (`tree/`), and the program is
//! confined by rlimits, capabilities, no_new_privs, Landlock and its
//! seccomp filter alone.

use cordon_core::ChildContext;

use super::plan::ChildPlan;
use std::os::fd::AsRawFd;

use super::{
    caps, cgroup, creds, explain, landlock_rules, maps, namespaces, net, quotas, rlimits, seccomp,
};

/// One step of the confinement, by a stable id (its number on the report
/// pipe) and name (in errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Step {
    /// Join the sandbox's cgroups (`cgroup.rs`).
    CgroupJoin = 1,
    /// Start the root helper that writes the maps (`maps.rs`).
    MapWriter = 2,
    /// Become the sandbox's uid and gid (`creds.rs`).
    Credentials = 3,
    /// Unshare the user namespace and the others (`namespaces.rs`).
    Namespaces = 4,
    /// Write the uid/gid maps (`maps.rs`).
    IdMaps = 5,
    /// The quotas of the new user namespace (`quotas.rs`).
    Quotas = 6,
    /// The UTS namespace's hostname (`quotas.rs`).
    Hostname = 7,
    /// Re-arm the parent-death signal (`creds.rs`).
    ParentDeath = 8,
    /// Open the egress proxy's listener and send it out (`net.rs`).
    EgressListener = 9,
    /// Make the init and the program (`tree/`).
    ProcessTree = 10,
    /// The mount namespace (`mounts.rs`).
    Mounts = 11,
    /// The Landlock rule of the private scratch (`landlock_rules.rs`).
    ScratchRule = 12,
    /// The rlimits (`rlimits.rs`).
    Rlimits = 13,
    /// Drop every capability (`caps.rs`).
    Capabilities = 14,
    /// `PR_SET_NO_NEW_PRIVS` (`caps.rs`).
    NoNewPrivs = 15,
    /// `landlock_restrict_self` (`landlock_rules.rs`).
    Landlock = 16,
    /// Install the seccomp filters (`seccomp/`).
    Seccomp = 17,
    /// Empty the capability bounding set before the uid changes (tier
    /// landlock on a root host, right after [`Step::MapWriter`]'s place;
    /// `caps.rs`).
    BoundingSet = 18,
    /// Mount a container's filesystems inside its root and `pivot_root`
    /// into it (`container.rs`), after the mounts.
    ContainerRoot = 19,
    /// Join a running container's namespaces instead of making new ones
    /// (`container/join.rs`), right after [`Step::Namespaces`]' place.
    JoinContainer = 20,
    /// Join a pod's network namespace (`container/join.rs`), right before
    /// [`Step::Credentials`], while still root.
    JoinNetwork = 21,
}

impl Step {
    /// Every step, by id: the order [`confine`] takes them in, but for
    /// the steps added later (each says where it runs).
    pub(crate) const ALL: [Step; 21] = [
        Step::CgroupJoin,
        Step::MapWriter,
        Step::Credentials,
        Step::Namespaces,
        Step::IdMaps,
        Step::Quotas,
        Step::Hostname,
        Step::ParentDeath,
        Step::EgressListener,
        Step::ProcessTree,
        Step::Mounts,
        Step::ScratchRule,
        Step::Rlimits,
        Step::Capabilities,
        Step::NoNewPrivs,
        Step::Landlock,
        Step::Seccomp,
        Step::BoundingSet,
        Step::ContainerRoot,
        Step::JoinContainer,
        Step::JoinNetwork,
    ];

    /// The name errors give it: what failed, by the call or mechanism.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::CgroupJoin => "cgroup_join",
            Step::MapWriter => "map_writer",
            Step::Credentials => "setresuid",
            Step::Namespaces => "unshare",
            Step::IdMaps => "uid_map",
            Step::Quotas => "user_namespace_quotas",
            Step::Hostname => "sethostname",
            Step::ParentDeath => "parent_death_signal",
            Step::EgressListener => "egress_listener",
            Step::ProcessTree => "process_tree",
            Step::Mounts => "mounts",
            Step::ScratchRule => "landlock_add_rule",
            Step::Rlimits => "setrlimit",
            Step::Capabilities => "capabilities",
            Step::NoNewPrivs => "no_new_privs",
            Step::Landlock => "landlock_restrict_self",
            Step::Seccomp => "seccomp",
            Step::BoundingSet => "capability_bounding_set",
            Step::ContainerRoot => "pivot_root",
            Step::JoinContainer => "setns",
            Step::JoinNetwork => "setns_network",
        }
    }

    /// The step with report id `id`.
    pub(crate) fn from_id(id: u32) -> Option<Step> {
        Step::ALL.into_iter().find(|s| *s as u32 == id)
    }
}

/// Runs in the child before exec. Returns only in the process that is to
/// execute the program; with a PID namespace the launcher hands over and
/// the init never returns (both exit).
pub(crate) fn confine(plan: &ChildPlan, ctx: &ChildContext) -> std::io::Result<()> {
    let at = |step: Step| {
        move |e: std::io::Error| {
            ctx.report_step(step as u32);
            e
        }
    };
    // Into the sandbox's cgroups first, while still allowed to write there:
    // everything it makes is counted from now on. With an init (a PID
    // namespace's, or tier landlock's subreaper) the program joins instead
    // (below): the init shares the host's memory,
    // and the cgroup's OOM killer, which kills every process sharing its
    // victim's memory, must never pick it.
    if plan.tree.is_none() {
        cgroup::join(&plan.cgroup_join).map_err(at(Step::CgroupJoin))?;
    }
    // A root host's maps are written by a helper that stays root, made
    // before the uid changes: this process shares the host's memory, which
    // must not be dumpable while it runs as the sandbox's uid (maps.rs).
    let mut writer_args = maps::WriterArgs::new();
    let writer = match (plan.map_writer_stack, &plan.id_maps) {
        // SAFETY: the stack is the slot's, owned by this launch.
        (Some(stack), Some(m)) => Some(
            unsafe { maps::MapWriter::start(m, stack, &mut writer_args) }
                .map_err(at(Step::MapWriter))?,
        ),
        _ => None,
    };
    // As the sandbox's uid, with no user namespace, it could not (tier
    // landlock on a root host).
    if plan.bounding == caps::Bounding::BeforeCredentials {
        caps::drop_bounding(plan.last_cap).map_err(at(Step::BoundingSet))?;
    }
    // A pod's network namespace: owned by the host's user namespace, so
    // joined while this process is root there.
    if let Some(net) = &plan.join_network {
        super::container::join::enter_network(net).map_err(at(Step::JoinNetwork))?;
    }
    if let Some((uid, gid)) = plan.drop_to {
        creds::become_ids(uid, gid).map_err(at(Step::Credentials))?;
    }
    // Tier landlock makes none.
    if plan.unshare_flags != 0 {
        namespaces::enter(plan.unshare_flags).map_err(at(Step::Namespaces))?;
    }
    // Or a running container's, joined (an OCI runtime's `exec`): its
    // maps, quotas, hostname and mounts are made already.
    if let Some(join) = &plan.join {
        join.enter().map_err(at(Step::JoinContainer))?;
    }
    maps::write(writer, plan.id_maps.as_ref()).map_err(at(Step::IdMaps))?;
    // While this process holds the new user namespace's capabilities:
    // here, through the host's `/proc`, unless the sandbox gets a procfs
    // of its own (a PID and a mount namespace), which is faster (mounts.rs).
    let own_proc = plan.tree.is_some() && plan.mounts.is_some();
    if let (Some(q), false) = (&plan.quotas, own_proc) {
        q.apply().map_err(at(Step::Quotas))?;
    }
    if let Some(name) = &plan.hostname {
        quotas::set_hostname(name).map_err(at(Step::Hostname))?;
    }
    creds::rearm_parent_death(plan.parent_pid).map_err(at(Step::ParentDeath))?;
    if let Some(egress) = &plan.egress {
        // SAFETY: between the launch and the exec, with the plan's socket
        // open (the plan owns it).
        unsafe { net::open_way_out(egress) }.map_err(at(Step::EgressListener))?;
    }
    // From here on, with a PID namespace, this is the program (pid 2); in
    // tier landlock, the child of the subreaper init.
    if let Some((slot, mode)) = plan.tree {
        let container = plan
            .mounts
            .as_ref()
            .is_some_and(|m| m.container().is_some());
        let split = || -> std::io::Result<()> {
            // A container's init takes the launcher's cwd, the host's
            // scratch: `pivot_root` moves only the cwds at the old root,
            // and any other would stay a way into the host's tree
            // (`/proc/1/cwd`).
            if container {
                // SAFETY: chdir to a static NUL-terminated path.
                let r = unsafe { libc::chdir(c"/".as_ptr()) };
                super::sys::check_long(r.into())?;
            }
            // SAFETY: the slot is held by the resources, which outlive the
            // launch.
            unsafe { super::tree::split(slot, mode, ctx) }
        };
        split().map_err(at(Step::ProcessTree))?;
        // The program: the init made it with every signal blocked (the
        // init blocks them before it takes the terminal); the program's
        // own start with none blocked, as the launcher left them.
        let none: u64 = 0;
        // SAFETY: a raw syscall on a local.
        unsafe {
            super::sys::raw(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK as usize,
                &none as *const u64 as usize,
                0,
                8,
            )
        };
        cgroup::join(&plan.cgroup_join).map_err(at(Step::CgroupJoin))?;
    }
    if let Some(mounts) = &plan.mounts {
        mounts.apply(own_proc).map_err(at(Step::Mounts))?;
        if let (Some(q), true) = (&plan.quotas, own_proc) {
            q.apply().map_err(at(Step::Quotas))?;
        }
        mounts.seal_proc(own_proc).map_err(at(Step::Mounts))?;
        if mounts.scratch_is_private() {
            landlock_rules::add_scratch_rule(&plan.ruleset, plan.scratch_rights)
                .map_err(at(Step::ScratchRule))?;
        }
        for dir in mounts.reviewed_dirs() {
            landlock_rules::add_mount_rule(&plan.ruleset, dir, plan.review_rights)
                .map_err(at(Step::ScratchRule))?;
        }
    }
    if let Some(root) = plan.mounts.as_ref().and_then(|m| m.container()) {
        root.enter().map_err(at(Step::ContainerRoot))?;
    }
    rlimits::apply(&plan.rlimits).map_err(at(Step::Rlimits))?;
    caps::drop_all(plan.last_cap, plan.bounding).map_err(at(Step::Capabilities))?;
    caps::no_new_privs().map_err(at(Step::NoNewPrivs))?;
    landlock_rules::restrict_self(&plan.ruleset, plan.landlock_flags)
        .map_err(at(Step::Landlock))?;
    // Last, so nothing above is itself filtered; the program can neither
    // trace nor signal the init (this filter, no capabilities, Landlock's
    // ptrace and signal scoping).
    match &plan.seccomp_listener {
        Some((send, guard)) => explain::install_notifying(&plan.seccomp, guard, send.as_raw_fd()),
        None => seccomp::install(&plan.seccomp),
    }
    .map_err(at(Step::Seccomp))
}

#[cfg(test)]
mod tests {
    use super::Step;

    /// The steps in the order [`super::confine`] takes them: each
    /// `at(Step::…)` of its body, in the order of the source (a step
    /// reported at two places is listed twice).
    fn code_order() -> Vec<Step> {
        let src = include_str!("confine.rs");
        let start = src
            .find("pub(crate) fn confine(")
            .expect("confine.rs defines `confine`");
        let body = &src[start..];
        let body = &body[..body.find("\n}\n").expect("`confine` ends")];
        body.match_indices("at(Step::")
            .map(|(i, m)| {
                let ident: String = body[i + m.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                Step::ALL
                    .into_iter()
                    .find(|s| format!("{s:?}") == ident)
                    .unwrap_or_else(|| panic!("`confine` reports an unknown step `{ident}`"))
            })
            .collect()
    }

    /// The steps in the order the crate docs' numbered list names them
    /// (`lib.rs`): every `` `name` `` in it that is a [`Step::name`].
    fn documented_order() -> Vec<Step> {
        let lib = include_str!("../lib.rs");
        let intro = lib
            .find("//! In the child, in this order")
            .expect("lib.rs's crate docs have the step list");
        let list = &lib[intro..];
        let list = &list[list.find("//! 1. ").expect("the list starts at 1.")..];
        let list = &list[..list
            .find("\n//!\n")
            .expect("a blank doc line ends the list")];
        list.split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|word| Step::ALL.into_iter().find(|s| s.name() == word))
            .collect()
    }

    /// The crate docs' list of the steps is the code's: a step moved,
    /// added or removed in `confine` without the docs (or the other way
    /// round) fails here.
    #[test]
    fn the_crate_docs_list_the_steps_in_the_order_confine_takes_them() {
        let code = code_order();
        for s in Step::ALL {
            assert!(
                code.contains(&s),
                "`confine` never reports {s:?} through `at`: report every step so"
            );
        }
        let names = |v: &[Step]| v.iter().map(|s| s.name()).collect::<Vec<_>>();
        assert_eq!(
            names(&documented_order()),
            names(&code),
            "the step list in lib.rs's crate docs (left) differs from the order `confine` \
             takes the steps in (right): fix the docs"
        );
    }

    #[test]
    fn step_ids_are_stable_and_distinct() {
        for (i, s) in Step::ALL.iter().enumerate() {
            assert_eq!(*s as u32, i as u32 + 1);
            assert_eq!(Step::from_id(*s as u32), Some(*s));
        }
        let mut names: Vec<_> = Step::ALL.iter().map(|s| s.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Step::ALL.len());
        assert_eq!(Step::from_id(0), None);
    }
}
