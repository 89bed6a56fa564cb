//! The policy's paths as Landlock rules ([`Grants`]).

use std::path::PathBuf;

use cordon_core::{SandboxPolicy, WrapError};

use super::super::landlock_rules::{self, Grant, PathRule};
use super::super::wrap_err;
use crate::{Layers, Tier};

/// The policy's paths as Landlock rules: canonical, existing, none
/// read-only inside a writable one; the system set added.
pub(super) struct Grants {
    pub(super) rules: Vec<PathRule>,
    /// The scratch dir, canonical.
    pub(super) scratch: PathBuf,
    /// The read-write grants, canonical.
    pub(super) read_write: Vec<PathBuf>,
    /// The scratch is a private tmpfs (its rule is added in the child).
    pub(super) scratch_is_private: bool,
}

impl Grants {
    pub(super) fn of(
        policy: &SandboxPolicy,
        layers: Layers,
        tier: Tier,
    ) -> Result<Grants, WrapError> {
        let (scratch, scratch_is_dir) =
            landlock_rules::canonical_grant("scratch", &policy.scratch_dir).map_err(wrap_err)?;
        if !scratch_is_dir {
            return Err(wrap_err(format!(
                "scratch path `{}` is not a directory",
                policy.scratch_dir.display()
            )));
        }
        let mut rules = vec![PathRule {
            path: scratch.clone(),
            is_dir: true,
            grant: Grant::Scratch,
            optional: false,
        }];
        let sets: [(&str, &[PathBuf], Grant); 4] = [
            ("program", &policy.program_files, Grant::ReadExec),
            ("package", policy.package_dir.as_slice(), Grant::ReadExec),
            ("read-only grant", &policy.read_only, Grant::ReadOnly),
            ("read-write grant", &policy.read_write, Grant::ReadWrite),
        ];
        for (what, paths, grant) in sets {
            for p in paths {
                let (path, is_dir) = landlock_rules::canonical_grant(what, p).map_err(wrap_err)?;
                rules.push(PathRule {
                    path,
                    is_dir,
                    grant,
                    optional: false,
                });
            }
        }
        // A container's root, whole: read-write (less device nodes) and
        // executable. Every mount made inside it is beneath this rule.
        if let Some(root) = &policy.container {
            let (path, _) = landlock_rules::canonical_grant("container root", &root.rootfs)
                .map_err(wrap_err)?;
            rules.push(PathRule {
                path,
                is_dir: true,
                // Whole, also for a read-only root: its mount is read-only
                // (a flag the sandbox's namespace cannot clear), and the
                // writable mounts the bundle puts inside it (a tmpfs at
                // /tmp) are beneath this rule.
                grant: Grant::Container,
                optional: false,
            });
        }
        landlock_rules::check_no_read_only_under_writable(&rules).map_err(wrap_err)?;
        super::super::grant_fs::refuse_pooled(&rules, !policy.scratch_persists)
            .map_err(wrap_err)?;
        // A scratch dir backed by a private tmpfs gets its Landlock rule in
        // the child, on the tmpfs root (landlock_rules::add_scratch_rule): a
        // rule on the host directory underneath would not apply to it.
        let scratch_is_private =
            layers.mount_namespace && tier == Tier::Namespaces && !policy.scratch_persists;
        if scratch_is_private {
            rules.retain(|r| r.grant != Grant::Scratch);
        }
        let read_write = rules
            .iter()
            .filter(|r| r.grant == Grant::ReadWrite)
            .map(|r| r.path.clone())
            .collect();
        // A reviewed dir gets its rule in the child, on its overlay's root
        // (a rule on the directory beneath would be ignored there, and
        // would let any writable alias of the host's directory write it).
        for r in &policy.reviewed {
            let (path, is_dir) =
                landlock_rules::canonical_grant("reviewed dir", &r.dir).map_err(wrap_err)?;
            if !is_dir || path != r.dir {
                return Err(wrap_err(format!(
                    "reviewed dir `{}` must be a directory named by its canonical path",
                    r.dir.display()
                )));
            }
        }
        rules.extend(landlock_rules::system_rules());
        Ok(Grants {
            rules,
            scratch,
            read_write,
            scratch_is_private,
        })
    }
}
